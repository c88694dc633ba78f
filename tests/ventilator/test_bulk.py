"""ventilator/bulk.py: the job's tables built without cyclic collections, then frozen; garbage from before the
block is collected, not frozen with them."""

from __future__ import annotations

import gc
import weakref

from ventilator.bulk import built_for_the_job


class Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the cyclic collector frees it


def test_garbage_from_before_is_collected_and_what_the_block_built_is_frozen():
    enabled = gc.isenabled()
    gc.enable()
    try:
        garbage = Node()
        gone = weakref.ref(garbage)
        del garbage
        assert gone() is not None  # a cycle, not yet collected
        frozen = gc.get_freeze_count()
        with built_for_the_job():
            assert not gc.isenabled()
            table = [Node() for _ in range(1000)]
        assert gone() is None  # collected, never frozen
        assert gc.isenabled()
        assert gc.get_freeze_count() >= frozen + len(table)
    finally:
        gc.unfreeze()
        if not enabled:
            gc.disable()


def test_the_collector_stays_off_when_it_was():
    gc.disable()
    try:
        with built_for_the_job():
            pass
        assert not gc.isenabled()
    finally:
        gc.unfreeze()
        gc.enable()
