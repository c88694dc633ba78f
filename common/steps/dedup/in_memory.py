"""The whole method on texts held in memory: what the job's stages compute,
in one call (for tests and small corpora; the job never holds a corpus)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from common.steps.dedup.clusters import candidate_pairs, components, handles
from common.steps.dedup.keys import KeyMaker
from common.steps.dedup.settings import DedupSettings


@dataclass
class Outcome:
    kept: np.ndarray  # bool [documents]
    clusters: dict[int, list[int]]  # kept document -> members (itself included)
    too_short: int


def deduplicate(texts: list[str], settings: DedupSettings) -> Outcome:
    maker = KeyMaker(settings)
    keys = maker.keys(texts)
    members = handles(0, len(texts))
    first, other, _kind = candidate_pairs(*maker.flat(keys, members))
    nodes, roots = components(first, other)
    clusters: dict[int, list[int]] = {}
    for node, root in zip(nodes.tolist(), roots.tolist()):
        clusters.setdefault(root, []).append(node)
    kept = np.ones(len(texts), dtype=bool)
    for root, group in clusters.items():
        for member in group:
            if member != root:
                kept[member] = False
    return Outcome(kept, clusters, keys.too_short if settings.uses_minhash else 0)
