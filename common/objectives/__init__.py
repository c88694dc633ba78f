"""The objective axis: what a task's tokenized documents become.

Each objective is one module of this package (see :mod:`.base` for the
interface); the job names it (``--objective``) and :func:`objectives` finds
it, so adding one touches no other file.
"""

from __future__ import annotations

import functools

from common.objectives.base import Batch, Feature, Objective, Ragged, derive_seed
from common.objectives.documents import TokenizedDocuments

DEFAULT = "bert"


@functools.cache
def objectives() -> dict[str, type[Objective]]:
    from common.params import discover

    return discover(__name__, Objective)


def objective_named(name: str) -> type[Objective]:
    try:
        return objectives()[name]
    except KeyError:
        raise ValueError(f"unknown objective {name!r} (known: {', '.join(sorted(objectives()))})") from None


__all__ = ["Batch", "DEFAULT", "Feature", "Objective", "Ragged", "TokenizedDocuments", "derive_seed",
           "objective_named", "objectives"]
