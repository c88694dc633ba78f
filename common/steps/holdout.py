"""Splits off the held-out side (--holdout-fraction; common/holdout.py): the training part keeps its
documents of the training side, and a new part, split "holdout", takes the others, with its own random
streams (task key ``holdout:<key>``) and files (``holdout/part-<task>``).  Its counts go under "holdout"."""

from __future__ import annotations

from dataclasses import dataclass

from common import holdout
from common.outputs import TRAIN
from common.params import param
from common.steps.base import Part, Step, TaskRun


@dataclass(frozen=True)
class HoldoutParams:
    fraction: float = param(0.0, "share of the documents held out")
    seed: int = param(holdout.DEFAULT_SEED, "which documents those are")

    def validate(self) -> None:
        holdout.HoldoutSplit(self.fraction, self.seed)  # ValueError with the flag's name


class Holdout(Step):
    name = "holdout"
    makes = "parts"
    Params = HoldoutParams

    def __init__(self, params, job):
        super().__init__(params, job)
        self.split = holdout.HoldoutSplit(params.fraction, params.seed)

    def run(self, run: TaskRun) -> None:
        held_parts = []
        for part in run.parts:
            if part.split != TRAIN:
                continue
            part.documents, held = self.split.split(part.documents)
            held_parts.append(Part(holdout.SPLIT, holdout.task_key(part.key), holdout.stem(part.stem), held))
        run.parts.extend(held_parts)

    @classmethod
    def identity(cls, params) -> dict:
        return {"holdout": [params.fraction, params.seed]}
