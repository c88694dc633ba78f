"""Candidate pairs from shared keys, and clusters from pairs (connected components).

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
    smallest handle (a star: enough for connected components, linear in the group).

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


def components(first: np.ndarray, other: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Connected components of the pairs' graph: (members, root) arrays, members sorted, each
    member's root the smallest handle of its component (its kept document).

    Label propagation with pointer jumping in numpy: ~40 bytes per document in a pair, where a
    Python union-find takes ~10 times that; the resolve task's memory is this, not the corpus."""
    nodes = np.unique(np.concatenate([first, other]))
    if len(nodes) == 0:
        return nodes, nodes
    a, b = np.searchsorted(nodes, first), np.searchsorted(nodes, other)
    label = np.arange(len(nodes))  # indices into the sorted nodes: the smallest index is the smallest handle
    while True:
        low = np.minimum(label[a], label[b])
        new = label.copy()
        np.minimum.at(new, a, low)
        np.minimum.at(new, b, low)
        while True:  # pointer jumping: every label to its label's label, until stable
            jumped = new[new]
            if np.array_equal(jumped, new):
                break
            new = jumped
        if np.array_equal(new, label):
            return nodes, nodes[label]
        label = new


class UnionFind:
    """The textbook structure, kept as the reference the tests check :func:`components` against."""

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
