"""The compiled kernels, when they were built, and the switch back to numpy.

``common/_kernels.c`` does the per-record work of masking (BERT's layout of a pair, the selection of masked
positions, the 80/10/10 rule, ALBERT's n-gram selection) and of the TFRecord encoder in C, on the same inputs
and random draws as the numpy code beside each call, and the per-sentence cut of a document after Bling Fire as
the Python loop beside it does; the numpy and Python code stays as the fallback: an install without a C
compiler (the extension is optional in setup.py) or ``MLM_PIPELINE_NUMPY_KERNELS=1`` runs numpy.  Both give the
same bytes (tests/common/test_kernels.py; the byte matrix runs both ways).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import logging
import os
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
    # Only a build beside this file is this source's: another copy's, found by some other finder on the path (an
    # editable install of another checkout maps its modules under the same names), is not built here.
    if spec is None or spec.origin is None or Path(spec.origin).resolve().parent != beside.resolve():
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
