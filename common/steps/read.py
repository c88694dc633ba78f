"""The first step: the task's documents, by the job's reader (stage time "parse")."""

from __future__ import annotations

from common.steps.base import Step, TaskRun


class Read(Step):
    name = "read"
    runs = "reader"
    makes = "documents"

    @classmethod
    def enabled(cls, params) -> bool:
        return True  # always: the first step


    def run(self, run: TaskRun) -> None:
        reader = self.job.reader
        with run.stats.timed("parse"):
            for part in run.parts:
                part.documents = list(reader.documents(run.task, run.payload, run.report))

    @classmethod
    def identity(cls, params) -> dict:
        return {}  # the reader is part of the identity as the job's own field
