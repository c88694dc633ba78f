"""A worker process keeps the heap its tasks free (worker/heap.py): a task's worth of blocks freed and allocated
again faults no page in, where glibc's defaults hand them back and fault each one in again."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

from tests.support.helpers import REPO

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")

#: Three "tasks", each holding forty 1 MiB arrays at once and then freeing them (as a task's arrays are); the
#: page faults of the third, and whether the heap was kept.
TASKS = """
import json, resource, sys
import numpy as np
from worker.heap import keep_freed_heap
kept = keep_freed_heap() if sys.argv[1] == "keep" else None
faults = []
for task in range(3):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    arrays = [np.ones(1 << 17) for _ in range(40)]
    del arrays
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps({"kept": kept, "faults": faults[-1]}))
"""


def tasks(mode: str, **env: str) -> dict:
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith("MALLOC_") and key != "GLIBC_TUNABLES"}
    result = subprocess.run([sys.executable, "-c", TASKS, mode], cwd=REPO, env={**environment, **env},
                            capture_output=True, text=True, check=True)
    return json.loads(result.stdout)


def test_a_kept_heap_faults_no_page_in_for_the_next_task():
    default, kept = tasks("default"), tasks("keep")
    assert kept["kept"] is True
    assert default["faults"] >= 5_000  # 40 MiB given back and faulted in again: ~10,000 pages
    assert kept["faults"] < default["faults"] / 10


def test_the_users_own_malloc_settings_are_left_alone():
    assert tasks("keep", MALLOC_ARENA_MAX="2")["kept"] is False
    assert tasks("keep", GLIBC_TUNABLES="glibc.malloc.trim_threshold=0")["kept"] is False
