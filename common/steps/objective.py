"""The job's objective over each part: a lazy stream of record batches, every pass in turn, drawn
from the part's own random streams (its key).  Nothing is made until the write step drains it, so
memory holds one pass; the time to make each batch is stage "build"."""

from __future__ import annotations

from collections.abc import Iterator

from common.objectives.base import Batch
from common.steps.base import Records, Step, TaskRun, Tokenized


class Objective(Step[Tokenized, Records]):
    name = "objective"
    runs = "objective"
    makes = "batches"
    after = "tokenize"

    @classmethod
    def enabled(cls, params) -> bool:
        return True


    def apply(self, parts: list[Tokenized], run: TaskRun) -> list[Records]:
        for part in parts:  # what a run(run) step placed after this one still reads on its Part
            run.drop(part, "tokenized", "tokens")
        return [Records(part.split, part.key, part.stem,
                        self._batches(part, run) if part.tokenized.num_documents else None) for part in parts]

    def _batches(self, part: Tokenized, run: TaskRun) -> Iterator[Batch]:
        objective = self.job.objective
        for pass_index in range(objective.passes):
            batches = objective.batches(part.tokenized, part.key, pass_index)
            while True:
                with run.stats.timed("build"):
                    batch = next(batches, None)
                if batch is None:
                    break
                yield batch

    @classmethod
    def identity(cls, params) -> dict:
        return {}  # the objective is part of the identity as the job's own field
