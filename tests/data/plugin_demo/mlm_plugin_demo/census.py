"""A step switched on by its own flag, as holdout is by --holdout-fraction: ``--demo-census`` counts each task's
documents and characters right after segmenting (summary.json's ``demo-census``).  Off by default: a job
without the flag does not run it, and its id is the id it had."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from mlm_pipeline.plugin import Step, param


@dataclass(frozen=True)
class CensusParams:
    section: ClassVar[str] = "Demo census"  # its heading in --help
    demo_census: bool = param(False, "Count each task's documents and characters (summary.json: demo-census).",
                              flag="--demo-census")


class Census(Step):
    name = "demo-census"
    Params = CensusParams
    after = "segment"

    @classmethod
    def enabled(cls, params: CensusParams) -> bool:
        return params.demo_census

    def run(self, run):
        for part in run.parts:
            run.stats.count(self.name, "documents", len(part.documents))
            run.stats.count(self.name, "characters", sum(len(line) for d in part.documents for line in d.lines))
