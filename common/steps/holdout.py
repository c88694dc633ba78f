"""The held-out split (``--holdout-fraction``, ``--holdout-seed``): everything holdout is, in this module.

A document's side depends only on its id (its text when the input names none) and ``--holdout-seed``: never
on the task it fell in, the task size, the fleet or a resume.  The seed is the split's own, not the
objective's ``--random-seed``, so outputs made with other seeds, sequence lengths or objectives from the same
corpus hold out the same documents.

The step is on when ``--holdout-fraction`` is above 0 (:meth:`Holdout.enabled`); its flags are its
``Params`` (``HoldoutParams``), shown under "Holdout" in ``--help``.  It splits off the held-out side: the
training part keeps its documents of the training side, and a new part, split "holdout", takes the others,
with its own random streams (task key ``holdout:<key>``) and files (``holdout/part-<task>``).  Its counts go
under "holdout".
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, TypeVar

import click

from common.job.params import param
from common.output.files import TRAIN
from common.steps.base import Documents, InfoSection, Side, Step, TaskRun

#: The default --holdout-seed.
DEFAULT_SEED = 0
#: Where the held-out side's files go, relative to the output root.
DIRECTORY = "holdout"
#: The split its files are marked with (common/output/files.py), and the name its counts go under.
SPLIT = "holdout"
#: Prefix of the held-out side's task key: its random streams are its own.
KEY_PREFIX = "holdout:"

_SCALE = float(1 << 64)

T = TypeVar("T")


@dataclass(frozen=True)
class HoldoutSplit:
    """Which side each document is on (pure)."""

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


@dataclass(frozen=True)
class HoldoutParams:
    """The holdout step's parameters: its own flags, under the "Holdout" heading of --help."""

    section: ClassVar[str] = "Holdout"  # its heading in --help
    section_after: ClassVar[str] = "Segmentation and words"  # the heading it follows
    fraction: float = param(0.0, "Hold out this fraction of the documents (by a hash of their id, or text, and "
                                 "--holdout-seed) into OUT/holdout/, with its own shards; none of them is in a "
                                 "training instance. 0: off.", flag="--holdout-fraction",
                            cli={"type": click.FloatRange(0, 1, max_open=True)})
    seed: int = param(DEFAULT_SEED, "Which documents --holdout-fraction holds out (not --random-seed: outputs made "
                                    "with other objectives or seeds hold out the same ones).", flag="--holdout-seed")

    def validate(self) -> None:
        HoldoutSplit(self.fraction, self.seed)  # ValueError with the flag's name


class Holdout(Step[Documents, Documents]):
    name = "holdout"
    makes = "parts"
    Params = HoldoutParams
    after = "read"  # and after the steps that drop documents: they make documents, this one parts

    @classmethod
    def enabled(cls, params: HoldoutParams) -> bool:
        return params.fraction > 0.0

    def __init__(self, params, job):
        super().__init__(params, job)
        self.split = HoldoutSplit(params.fraction, params.seed)

    def apply(self, parts: list[Documents], run: TaskRun) -> list[Documents]:
        kept, held_parts = [], []
        for part in parts:
            if part.split != TRAIN:
                kept.append(part)
                continue
            training, held = self.split.split(part.documents)
            kept.append(Documents(part.split, part.key, part.stem, training))
            held_parts.append(Documents(SPLIT, task_key(part.key), stem(part.stem), held))
        return kept + held_parts

    @classmethod
    def identity(cls, params) -> dict:
        return {"holdout": [params.fraction, params.seed]}

    # --- How it describes itself (common/steps/base.py ``Describes``): the held-out side, its sections -------

    sides = (Side(SPLIT, DIRECTORY, label="held-out", flag="--holdout-fraction",
                  card_split="validation", colour="#ff7f0e"),)
    info_section = InfoSection(switch="fraction", off=0)

    @classmethod
    def info(cls, params: dict) -> dict:
        return {"fraction": params["fraction"], "seed": params["seed"], "directory": DIRECTORY}

    @classmethod
    def card_lines(cls, section: dict | None) -> list[str]:
        if not section:
            return ["- held out: nothing (no --holdout-fraction)"]
        return [f"- held out: {section['fraction']} of the documents (seed {section['seed']}), "
                f"under `{section.get('directory', DIRECTORY)}/`"]

    @classmethod
    def legacy_split(cls, listed: dict) -> str:
        """Manifest lines written before splits had names (protocol 4) marked the held-out side's files
        ``"holdout": true``."""
        return SPLIT if listed.get(SPLIT) else ""
