"""The first step: the task's documents, by the job's reader (stage time "parse")."""

from __future__ import annotations

from common.steps.base import Documents, Lane, Step, TaskRun


class Read(Step[Lane, Documents]):
    name = "read"
    runs = "reader"
    makes = "documents"

    @classmethod
    def enabled(cls, params) -> bool:
        return True  # always: the first step


    def apply(self, parts: list[Lane], run: TaskRun) -> list[Documents]:
        reader = self.job.reader
        with run.stats.timed("parse"):
            return [Documents(part.split, part.key, part.stem,
                              list(reader.documents(run.task, run.payload, run.report))) for part in parts]

    @classmethod
    def identity(cls, params) -> dict:
        return {}  # the reader is part of the identity as the job's own field
