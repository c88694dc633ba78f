"""The segmenter axis: how a document's paragraphs become segments (the sentences of next-sentence
prediction).  Each segmenter is one module of this package (see :mod:`.base`), found by name like the
readers, objectives and writers, so adding one touches no other file.  ``auto`` (--segmenter's default)
is resolved when the job is planned: the objective's unit, else the reader's default."""

from __future__ import annotations

from common.job.params import Registry
from common.segmenters.base import AUTO, Segmenter

_REGISTRY: Registry[Segmenter] = Registry(__name__, Segmenter, "segmenter", also_known=(AUTO,))
segmenters = _REGISTRY.variants
segmenter_named = _REGISTRY.named


def resolve(name: str, default: str) -> str:
    """``auto`` becomes ``default`` (the objective's unit or the reader's default); any other name is checked."""
    chosen = default if name == AUTO else name
    segmenter_named(chosen)
    return chosen


__all__ = ["AUTO", "Segmenter", "resolve", "segmenter_named", "segmenters"]
