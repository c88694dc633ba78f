"""Splits off the held-out side (--holdout-fraction; common/holdout.py): the training part keeps its
documents of the training side, and a new part, split "holdout", takes the others, with its own random
streams (task key ``holdout:<key>``) and files (``holdout/part-<task>``).  Its counts go under "holdout"."""

from __future__ import annotations

from dataclasses import dataclass

from common import holdout
from common.outputs import TRAIN
from common.params import param
from common.steps.base import InfoSection, Part, Side, Step, TaskRun


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

    # --- How it describes itself (common/steps/base.py ``Describes``): the held-out side, its sections -------

    sides = (Side(holdout.SPLIT, holdout.DIRECTORY, label="held-out", flag="--holdout-fraction",
                  card_split="validation", colour="#ff7f0e"),)
    info_section = InfoSection(switch="fraction", off=0)

    @classmethod
    def info(cls, params: dict) -> dict:
        return {"fraction": params["fraction"], "seed": params["seed"], "directory": holdout.DIRECTORY}

    @classmethod
    def setting_flag(cls, key: str) -> str:
        return {"fraction": "--holdout-fraction", "seed": "--holdout-seed"}.get(key) or super().setting_flag(key)

    @classmethod
    def card_lines(cls, section: dict | None) -> list[str]:
        if not section:
            return ["- held out: nothing (no --holdout-fraction)"]
        return [f"- held out: {section['fraction']} of the documents (seed {section['seed']}), "
                f"under `{section.get('directory', holdout.DIRECTORY)}/`"]

    @classmethod
    def legacy_split(cls, listed: dict) -> str:
        """Manifest lines written before splits had names (protocol 4) marked the held-out side's files
        ``"holdout": true``."""
        return holdout.SPLIT if listed.get(holdout.SPLIT) else ""
