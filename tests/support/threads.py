"""Threads a piece of code starts, counted in a fresh interpreter.

Arrow's thread pools, once started, can abort a short process at its exit ("terminate called without an active
exception", apache/arrow#34314): the readers must start none.  jemalloc's own background thread (C, joined at
exit) is not counted.
"""

from __future__ import annotations

import subprocess
import sys

from tests.support.helpers import REPO

_PRELUDE = (
    "import os, sys\n"
    "def count():\n"
    "    names = [open(f'/proc/self/task/{t}/comm').read().strip() for t in os.listdir('/proc/self/task')]\n"
    "    return sum(name != 'jemalloc_bg_thd' for name in names)\n")


def threads_started(setup: str, action: str, *args: str) -> tuple[int, str]:
    """Runs ``setup`` (imports: numpy's BLAS threads start there), counts the threads, runs ``action`` (which
    may print), and returns the threads ``action`` added and what it printed; ``args`` are ``sys.argv[1:]``."""
    script = f"{_PRELUDE}{setup}\nbefore = count()\n{action}\nprint('THREADS', count() - before)\n"
    shown = subprocess.run([sys.executable, "-c", script, *args], cwd=REPO, capture_output=True, text=True,
                           timeout=120)
    assert shown.returncode == 0, shown.stderr
    *printed, last = shown.stdout.strip().splitlines()
    assert last.startswith("THREADS "), shown.stdout
    return int(last.split()[1]), "\n".join(printed)
