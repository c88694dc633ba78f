"""Candidate pairs from shared keys, and clusters from pairs (union-find).

A document is named by a 64-bit *handle*: its source task's rank in the
corpus order (path, then start) in the high 32 bits, its rank among that
task's documents in the low 32 bits.  Every document lies in exactly one
task and tasks of a file do not overlap, so handles order documents exactly
as (file, offset) does, whatever the task size: "the smallest handle of a
cluster" is "the first copy in the corpus".
"""

from __future__ import annotations

import numpy as np

#: ``kind`` of a key: the exact hash, or LSH band ``i`` as ``i + 1``.
EXACT = 0


def handles(task_rank: int, count: int) -> np.ndarray:
    return (np.uint64(task_rank) << np.uint64(32)) | np.arange(count, dtype=np.uint64)


def split_handle(handle: int) -> tuple[int, int]:
    return int(handle) >> 32, int(handle) & 0xFFFFFFFF


def candidate_pairs(kinds: np.ndarray, keys: np.ndarray, members: np.ndarray) -> tuple[np.ndarray, np.ndarray,
                                                                                     np.ndarray]:
    """Documents that share a (kind, key): each is paired with the group's
    smallest handle (a star: enough for union-find, linear in the group).

    Returns (first, other, kind) arrays, one row per pair, sorted and
    without repeats, so the output does not depend on the input's order."""
    if len(members) == 0:
        empty = np.empty(0, dtype=np.uint64)
        return empty, empty, np.empty(0, dtype=np.uint16)
    order = np.lexsort((members, keys, kinds))
    kinds, keys, members = kinds[order], keys[order], members[order]
    new_group = np.r_[True, (kinds[1:] != kinds[:-1]) | (keys[1:] != keys[:-1])]
    group_start = np.flatnonzero(new_group)
    group_of = np.cumsum(new_group) - 1
    first = members[group_start][group_of]
    keep = (first != members)
    first, other, kind = first[keep], members[keep], kinds[keep]
    if len(first) == 0:
        return first, other, kind
    # One row per (first, other): the lowest kind names it (the exact hash when it is one).
    order = np.lexsort((kind, other, first))
    first, other, kind = first[order], other[order], kind[order]
    unique = np.r_[True, (first[1:] != first[:-1]) | (other[1:] != other[:-1])]
    return first[unique], other[unique], kind[unique]


class UnionFind:
    """Over the handles that appear in some pair only (not the corpus)."""

    def __init__(self):
        self.parent: dict[int, int] = {}

    def find(self, x: int) -> int:
        parent = self.parent
        root = x
        while parent.get(root, root) != root:
            root = parent[root]
        while parent.get(x, x) != root:  # path compression
            parent[x], x = root, parent[x]
        return root

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            # The smaller handle is the root: a cluster's root is its kept member.
            if rb < ra:
                ra, rb = rb, ra
            self.parent[rb] = ra
            self.parent.setdefault(ra, ra)

    def clusters(self) -> dict[int, list[int]]:
        """Root (= smallest member) -> sorted members."""
        groups: dict[int, list[int]] = {}
        for x in self.parent:
            groups.setdefault(self.find(x), []).append(x)
        return {root: sorted(members) for root, members in sorted(groups.items())}
