"""Token-budget bins: which samples of a window share a batch.  Pure logic.

Both functions take the lengths of one packing window's samples (in the
window's seeded order) and a budget of tokens, and return the bins as one
array of indices into the window with the bins' bounds, every index exactly
once.  Ties are broken by the window order, so the result is a function of
the lengths and their order only: the same on every server, run or resume.

* :func:`best_fit_decreasing` (the ``flat`` layout): samples longest first,
  each into the open bin it fills most tightly (the least room left that
  still holds it), a new bin when none does.  A bin holds at most ``budget``
  tokens; with many short samples to fill the gaps only the last few bins
  of a window are not nearly full.
* :func:`padded_runs` (the ``padded`` layout): a bin costs its rows times
  its longest sample, so samples of similar length go together: longest
  first, consecutive runs, each as long as ``rows x the run's first
  (longest) length`` stays within the budget (seed 001's optimal batching).

A sample longer than the budget fits no bin: ValueError (the server refuses
such an output before serving, loader/token_batches.py).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Bins:
    """Bin b holds ``order[bounds[b]:bounds[b + 1]]`` (indices into the window)."""

    order: np.ndarray  # int64, every index of the window once
    bounds: np.ndarray  # int64, (bins + 1)

    def __len__(self) -> int:
        return len(self.bounds) - 1

    def bin(self, index: int) -> np.ndarray:
        return self.order[self.bounds[index]:self.bounds[index + 1]]


def _decreasing(lengths: np.ndarray, budget: int) -> np.ndarray:
    lengths = np.asarray(lengths, dtype=np.int64)
    if budget < 1:
        raise ValueError(f"a budget of {budget} tokens")
    if len(lengths) and (lengths.max() > budget or lengths.min() < 1):
        bad = int(np.argmax((lengths > budget) | (lengths < 1)))
        raise ValueError(f"sample {bad} has {int(lengths[bad])} tokens: a bin holds 1 to {budget}")
    return np.argsort(-lengths, kind="stable")  # longest first, ties in window order


def best_fit_decreasing(lengths: np.ndarray, budget: int) -> Bins:
    """Bins of at most ``budget`` tokens (sum of lengths), best fit, longest first."""
    order = _decreasing(lengths, budget)
    sizes = np.asarray(lengths, dtype=np.int64)[order].tolist()
    # Open bins by room left: sorted keys room * 2^32 + bin number (bins in a window < 2^32).
    rooms: list[int] = []
    members: list[list[int]] = []
    shift = 1 << 32
    for item, size in zip(order.tolist(), sizes):
        at = bisect_left(rooms, size * shift)
        if at == len(rooms):
            number, room = len(members), budget
            members.append([item])
        else:
            key = rooms.pop(at)
            number, room = key % shift, key // shift
            members[number].append(item)
        room -= size
        if room > 0:
            insort(rooms, room * shift + number)
    return _bins(members)


def padded_runs(lengths: np.ndarray, budget: int) -> Bins:
    """Bins whose rows x longest length stay within ``budget``: consecutive runs of the samples sorted longest
    first (similar lengths together, padded to the first of the run)."""
    order = _decreasing(lengths, budget)
    sizes = np.asarray(lengths, dtype=np.int64)[order]
    bounds = [0]
    start = 0
    while start < len(order):
        rows = max(1, budget // int(sizes[start]))
        start = min(len(order), start + rows)
        bounds.append(start)
    return Bins(order.astype(np.int64), np.asarray(bounds, dtype=np.int64))


def _bins(members: list[list[int]]) -> Bins:
    counts = np.fromiter((len(m) for m in members), dtype=np.int64, count=len(members))
    order = np.fromiter((i for m in members for i in m), dtype=np.int64, count=int(counts.sum()))
    return Bins(order, np.concatenate(([0], np.cumsum(counts))).astype(np.int64))


PACKERS = {"flat": best_fit_decreasing, "padded": padded_runs}


def slots(lengths: np.ndarray, bins: Bins, layout: str, budget: int) -> int:
    """Token slots the bins occupy in a trainer: ``budget`` per flat bin (a
    static-shape step), rows x longest per padded one.  Padding waste is
    1 - tokens / slots."""
    if layout == "flat":
        return budget * len(bins)
    lengths = np.asarray(lengths, dtype=np.int64)
    total = 0
    for index in range(len(bins)):
        members = lengths[bins.bin(index)]
        total += len(members) * int(members.max())
    return total
