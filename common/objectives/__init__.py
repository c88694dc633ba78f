"""The objective axis: what a task's tokenized documents become.

Each objective is one module of this package (see :mod:`.base` for the
interface); the job names it (``--objective``) and :func:`objectives` finds
it, so adding one touches no other file.
"""

from __future__ import annotations

from common.job.params import Registry
from common.objectives.base import Batch, Feature, Objective, Ragged, derive_seed
from common.objectives.documents import TokenizedDocuments

DEFAULT = "bert"


_REGISTRY: Registry[Objective] = Registry(__name__, Objective, "objective")
objectives = _REGISTRY.variants
objective_named = _REGISTRY.named


__all__ = ["Batch", "DEFAULT", "Feature", "Objective", "Ragged", "TokenizedDocuments", "derive_seed",
           "objective_named", "objectives"]
