"""Synthetic sink journals for the memory tests of the end of a job: lines shaped as a worker's, many of them."""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Callable


def journal_line(i: int, job: str, shards: list[dict]) -> str:
    """Task ``i``'s manifest line (a 1 MiB range of a WikiExtractor file) listing ``shards``."""
    return json.dumps({"task": f"t{i:08d}", "job": job, "source": f"r{i // 100:05d}/wiki_{i % 100:02d}", "start": 0,
                       "end": 1 << 20, "version": "1-2", "shards": shards, "records": 7, "documents": 3,
                       "skipped": {}, "tokens": 900, "bytes": 1000, "worker": "w"}, sort_keys=True) + "\n"


def peak_traced_bytes(run: Callable[[], object]) -> int:
    """The most memory ``run()`` held at once, as tracemalloc sees Python's allocations."""
    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
