"""The compiled kernels, when they were built, and the switch back to numpy.

``common/_kernels.c`` does the per-record work of masking (BERT's layout of a pair, the selection of masked
positions, the 80/10/10 rule) and of the TFRecord encoder in C, on the same inputs and random draws as the
numpy code beside each call, which stays as the fallback: an install without a C compiler (the extension is
optional in setup.py) or ``MLM_PIPELINE_NUMPY_KERNELS=1`` runs numpy.  Both give the same bytes
(tests/common/test_kernels.py; the byte matrix runs both ways).
"""

from __future__ import annotations

import os
from types import ModuleType

#: Set to 1 to run the numpy code even where the kernels were built (to compare, or to rule them out).
FORCE_NUMPY = "MLM_PIPELINE_NUMPY_KERNELS"


def _load() -> ModuleType | None:
    if os.environ.get(FORCE_NUMPY, "") not in ("", "0"):
        return None
    try:
        from common import _kernels  # type: ignore[attr-defined]
    except ImportError:
        return None
    return _kernels


#: The extension module, or None: read at each call, so a test may set it to None to run the numpy path.
compiled: ModuleType | None = _load()
