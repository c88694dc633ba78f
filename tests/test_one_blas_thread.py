"""Every command of the pipeline loads numpy with one BLAS thread (common/one_blas_thread.py): OpenBLAS's own
threads spin after they start, ~0.1 CPU-s a process, and no role does linear algebra."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.helpers import REPO

#: The modules the console scripts and ``python -m`` run (setup.cfg's console_scripts).
COMMANDS = ("worker.cli", "ventilator.cli", "sink.cli", "sink.verify", "report.cli", "loader.cli")

_COUNT = ("import os, sys\n"
          "import numpy\n"
          "names = [open(f'/proc/self/task/{t}/comm').read().strip() for t in os.listdir('/proc/self/task')]\n"
          "print(sum(name != 'jemalloc_bg_thd' for name in names))\n")


def threads_after(module: str | None, **env: str) -> int:
    """The threads of a fresh interpreter that imported ``module`` (if any), then numpy."""
    clean = {name: value for name, value in os.environ.items() if not name.endswith("NUM_THREADS")}
    script = (f"import {module}\n" if module else "") + _COUNT
    shown = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120,
                           env={**clean, **env})
    assert shown.returncode == 0, shown.stderr
    return int(shown.stdout.split()[-1])


@pytest.mark.parametrize("module", COMMANDS)
def test_a_command_loads_numpy_with_one_blas_thread(module):
    assert threads_after(module) == 1


def test_numpy_alone_starts_blas_threads_here():
    """The control: without the module numpy starts OpenBLAS threads on this machine (one per core), so the test
    above can fail."""
    assert os.cpu_count() and os.cpu_count() > 1, "the control needs more than one core"
    assert threads_after(None) > 1


def test_the_users_own_setting_wins():
    assert threads_after("worker.cli", OPENBLAS_NUM_THREADS="2") == 2
