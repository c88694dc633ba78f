"""The held-out split (``--holdout-fraction``): which side a document is on.

A document's side depends only on its id (its text when the input names
none) and ``--holdout-seed``: never on the task it fell in, the task size,
the fleet or a resume.  The seed is the split's own, not the objective's
``--random-seed``, so outputs made with other seeds, sequence lengths or
objectives from the same corpus hold out the same documents.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

#: The default --holdout-seed.
DEFAULT_SEED = 0
#: Where the held-out side's files go, relative to the output root.
DIRECTORY = "holdout"
#: The split its files are marked with (common/outputs.py), and the name its counts go under.
SPLIT = "holdout"
#: Prefix of the held-out side's task key: its random streams are its own.
KEY_PREFIX = "holdout:"

_SCALE = float(1 << 64)

T = TypeVar("T")


@dataclass(frozen=True)
class HoldoutSplit:
    fraction: float = 0.0
    seed: int = DEFAULT_SEED

    def __post_init__(self):
        if not 0.0 <= self.fraction < 1.0:
            raise ValueError(f"--holdout-fraction must be at least 0 and below 1, not {self.fraction}")

    @property
    def enabled(self) -> bool:
        return self.fraction > 0.0

    def held_out(self, key: str) -> bool:
        """Whether the document named (or made of) ``key`` is held out."""
        digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8,
                                 key=str(self.seed).encode()).digest()
        return int.from_bytes(digest, "big") / _SCALE < self.fraction

    def split(self, documents: Sequence[T]) -> tuple[list[T], list[T]]:
        """(training, held out), each in input order; ``documents`` have ``id`` and ``lines``."""
        training: list[T] = []
        held: list[T] = []
        for document in documents:
            (held if self.held_out(document_key(document)) else training).append(document)
        return training, held


def document_key(document) -> str:
    """What a document is hashed by: its id, or its text when it has none."""
    return f"id\x00{document.id}" if document.id else "text\x00" + "\n".join(document.lines)


def stem(shard_stem: str) -> str:
    """The held-out side's file stem for a task's ``part-<task>``."""
    return f"{DIRECTORY}/{shard_stem}"


def task_key(key: str) -> str:
    """The held-out side's task key (its random streams differ from the training side's)."""
    return KEY_PREFIX + key
