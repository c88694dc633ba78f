"""The compiled kernels, when they were built, and the switch back to numpy.

``common/_kernels.c`` does the per-record work of masking (BERT's layout of a pair, the selection of masked
positions, the 80/10/10 rule, ALBERT's n-gram selection) and of the TFRecord encoder in C, on the same inputs
and random draws as the numpy code beside each call, and the per-sentence cut of a document after Bling Fire (its
byte offsets mapped to str offsets, the text cut there) as the numpy and Python code beside it does; that code
stays as the fallback: an install without a C compiler (the extension is optional in setup.py) or
``MLM_PIPELINE_NUMPY_KERNELS=1`` runs numpy.  Both give the
same bytes (tests/common/test_kernels.py; the byte matrix runs both ways).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.util
import logging
import os
import sys
from pathlib import Path
from types import ModuleType

log = logging.getLogger(__name__)

#: Set to 1 to run the numpy code even where the kernels were built (to compare, or to rule them out).
FORCE_NUMPY = "MLM_PIPELINE_NUMPY_KERNELS"
#: The C source; a module built from another version of it is not used (setup.py compiles its sha256 in).
SOURCE = Path(__file__).with_name("_kernels.c")
REBUILD = "`pip install -e .` or `python setup.py build_ext --inplace`"


def _load(name: str = "common._kernels", beside: Path = SOURCE.parent) -> tuple[ModuleType | None, str]:
    """The extension module (or None) and a one-line status.  Not built is an ordinary install (no C compiler):
    the status says so.  Built but not loadable (another interpreter's build, a damaged file) or built from
    another version of the source beside it (an in-place build not redone) was meant to be there: one warning
    line with the reason, never a traceback, and numpy runs."""
    forced = os.environ.get(FORCE_NUMPY, "")
    if forced not in ("", "0"):
        return None, f"numpy ({FORCE_NUMPY}={forced})"
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        spec = None
    # Only a build beside this file is known to be this source's: another copy's, found by some other finder on the
    # path (an editable install of another checkout maps its modules under the same names), is used only when it was
    # built from this very source (_installed_build).
    if spec is None or spec.origin is None or Path(spec.origin).resolve().parent != beside.resolve():
        installed = _installed_build(name, beside)
        if installed is not None:
            return installed, "compiled"
        return None, "numpy (common/_kernels.c is not built here)"
    try:
        module = importlib.import_module(name)
    except ImportError as error:
        reason = " ".join(str(error).split())
        status = f"numpy (common/_kernels.c was built but does not load: {reason})"
        log.warning("kernels: %s", status)
        return None, status
    if SOURCE.is_file() and getattr(module, "SOURCE_SHA256", None) != hashlib.sha256(SOURCE.read_bytes()).hexdigest():
        status = f"numpy (common/_kernels.c changed since it was built: rebuild with {REBUILD})"
        log.warning("kernels: %s", status)
        return None, status
    return module, "compiled"


def _installed_build(name: str, beside: Path) -> ModuleType | None:
    """The build of this very source (its compiled-in sha256 is the source's here) in another copy of the package
    on ``sys.path``, or None.  ``python -m ventilator`` in a checkout puts the checkout's ``common/`` first, which a
    plain ``pip install .`` leaves unbuilt while the installed copy in site-packages has the build: same source,
    same machine, so the same code.  A copy that does not load or was built from another source is passed over
    silently (the status then says the kernels are not built here)."""
    if not SOURCE.is_file():
        return None
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()
    *package, module_name = name.split(".")
    for entry in sys.path:
        directory = Path(entry or ".", *package)
        if not directory.is_dir() or directory.resolve() == beside.resolve():
            continue
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = directory / f"{module_name}{suffix}"
            # The sha256 is compiled in as a string (setup.py): a file without it is another source's, or another
            # package's (``common`` is a common name), passed over before any of its code runs.
            if not path.is_file() or digest.encode() not in path.read_bytes():
                continue
            spec = importlib.util.spec_from_file_location(name, path)
            if spec is None or spec.loader is None:
                continue
            try:
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
            except ImportError:  # another interpreter's build, a damaged file: not this one's
                continue
            if getattr(module, "SOURCE_SHA256", None) == digest:
                log.debug("kernels: the build at %s (of this source)", path)
                return module
    return None


#: The task counters (AckStats.counters) saying which kernels ran a task: ``{"compiled": 1}`` or ``{"numpy": 1}``,
#: summed by the sink into summary.json (``kernels``, and per worker ``this_run.kernels_by_worker``) and its log.
COUNTER = "kernels"
COMPILED, NUMPY = "compiled", "numpy"


def kind() -> str:
    """What this process runs now: "compiled" or "numpy" (the reason is in :data:`status`)."""
    return COMPILED if compiled is not None else NUMPY


compiled: ModuleType | None
#: What this process runs, for the worker's log: "compiled", or "numpy (why)".
status: str
#: The extension module, or None: read at each call, so a test may set it to None to run the numpy path.
compiled, status = _load()
