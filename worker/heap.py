"""A worker process keeps the C heap its tasks freed, instead of handing it back to the kernel after each task.

A task allocates its arrays (the objective's random draws and layouts, the token ids, the encoded records: a few MB
each for an 8 MiB task) and frees them all when it ends.  glibc's malloc serves blocks past its mmap threshold
with their own mappings and gives the top of the heap back (trims it) once more than its trim threshold is free,
so the next task faults every page in again, zeroed by the kernel: ~2,700 page faults a 2 MB task at dupe factor 1
and ~0.004-0.007 CPU-s per MB of system time, ~5% of the worker's CPU (the table in docs/benchmarks.md).  Here
blocks up to 32 MiB (the ceiling glibc's own sliding threshold stops at on 64-bit) come from the heap, and the
heap is trimmed only past 256 MiB free: a worker's resident memory stays near its peak between tasks (the peak
itself, ``VmHWM``, does not change), which the next task reuses.

Only with glibc, and only where the user set none of malloc's own knobs (``MALLOC_*_``, ``GLIBC_TUNABLES``).
"""

from __future__ import annotations

import ctypes
import logging
import os
import platform

log = logging.getLogger(__name__)

#: mallopt(3)'s parameters.
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
#: Blocks up to this size come from the heap (glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit; larger is refused).
MMAP_THRESHOLD = 32 << 20
#: The heap is given back to the kernel only when this much is free at its top.
TRIM_THRESHOLD = 256 << 20


def keep_freed_heap() -> bool:
    """Set this process's malloc to keep what its tasks free (see the module); whether it was set."""
    if platform.libc_ver()[0] != "glibc":
        return False
    if "GLIBC_TUNABLES" in os.environ or any(name.startswith("MALLOC_") for name in os.environ):
        log.debug("heap: malloc's own settings in the environment are kept")
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    # Each returns 1 when set.  A threshold glibc refuses (a 32-bit build's lower ceiling) leaves both as they were:
    # a trim threshold alone would stop the sliding mmap threshold and map every large block anew.
    if not mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD):
        return False
    return bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
