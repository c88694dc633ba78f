"""Which records go in which batch of which rank: pure functions of
(dataset, seed, epoch, window, world size, batch size).

Nothing here depends on the server process, its start time or how many
servers there are, so any server computes the same batch for the same
request, a restarted one included.

The epoch order is a two-level shuffle, so memory stays flat in dataset
size: the shards are permuted (seed, epoch), their records laid end to end
in that order, and each window of ``window`` consecutive records is
permuted (seed, epoch, window index).  A record therefore moves at most a
window away from its shard neighbours in the permuted shard order; the
server holds one window's permutation (``window`` int64s) and the shards it
touches, never a permutation of the whole dataset.  With ``window`` at least
the number of records, it is a full uniform shuffle.

Ranks take batches in turn: global step k is the k-th run of
``world_size * batch_size`` records of the epoch order, rank r's batch k is
the r-th ``batch_size`` of it.  All ranks thus read the same window at the
same time (what the shard cache wants).  The records that do not fill a
last step are shared out as evenly as possible (a last, shorter batch for
some ranks): every record is served exactly once per epoch, and ranks'
batch counts differ by at most one.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from common.objectives.base import derive_seed

#: Epochs in a row with no batch for a rank before that rank is refused.  An epoch has fewer batches than ranks
#: only on data that small (a mixture's or a token budget's epochs vary in length by a batch or so), so looking
#: ahead is cheap; a run of empty epochs longer than this is data too small for the world size.
MAX_EMPTY_EPOCHS = 64


@dataclass(frozen=True)
class Partition:
    """How an epoch of ``records`` is dealt to ``world_size`` ranks."""

    records: int
    world_size: int
    batch_size: int

    @property
    def full_steps(self) -> int:
        return self.records // (self.world_size * self.batch_size)

    def _rest(self, rank: int) -> tuple[int, int]:
        """Start and size of the rank's share of the records left after the full steps."""
        base = self.full_steps * self.world_size * self.batch_size
        rest = self.records - base
        share, extra = divmod(rest, self.world_size)
        return base + rank * share + min(rank, extra), share + (rank < extra)

    def batches(self, rank: int) -> int:
        """Batches rank ``rank`` receives per epoch."""
        return self.full_steps + (self._rest(rank)[1] > 0)

    def span(self, rank: int, batch: int) -> tuple[int, int]:
        """Positions [start, stop) in the epoch order of the rank's batch."""
        if not 0 <= batch < self.batches(rank):
            raise IndexError(f"rank {rank} has {self.batches(rank)} batches per epoch, not {batch + 1}")
        if batch < self.full_steps:
            start = (batch * self.world_size + rank) * self.batch_size
            return start, start + self.batch_size
        start, size = self._rest(rank)
        return start, start + size


class EpochOrder:
    """The epoch order of one (seed, epoch): position -> (shard, index in shard)."""

    def __init__(self, counts: np.ndarray, seed: int, epoch: int, window: int, cached_windows: int = 4):
        self.seed, self.epoch, self.window = seed, epoch, max(1, int(window))
        counts = np.asarray(counts, dtype=np.int64)
        rng = np.random.default_rng(derive_seed(seed, f"loader-epoch-{epoch}", 0, "shards"))
        self.shard_order = rng.permutation(len(counts))
        self.stream_starts = np.concatenate(([0], np.cumsum(counts[self.shard_order])))
        self.records = int(self.stream_starts[-1])
        self._windows: OrderedDict[int, np.ndarray] = OrderedDict()
        self._cached_windows = cached_windows

    def _window(self, index: int) -> np.ndarray:
        permutation = self._windows.get(index)
        if permutation is None:
            size = min(self.window, self.records - index * self.window)
            rng = np.random.default_rng(derive_seed(self.seed, f"loader-epoch-{self.epoch}", index, "window"))
            permutation = rng.permutation(size)
            self._windows[index] = permutation
            while len(self._windows) > self._cached_windows:
                self._windows.popitem(last=False)
        else:
            self._windows.move_to_end(index)
        return permutation

    def locate(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The shard (index in the manifest order) and the record within it at each position."""
        positions = np.asarray(positions, dtype=np.int64)
        windows = positions // self.window
        stream = np.empty_like(positions)
        for index in np.unique(windows).tolist():
            here = windows == index
            stream[here] = index * self.window + self._window(index)[positions[here] - index * self.window]
        slot = np.searchsorted(self.stream_starts, stream, side="right") - 1
        return self.shard_order[slot], stream - self.stream_starts[slot]
