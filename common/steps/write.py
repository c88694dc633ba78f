"""The last step: each part's records into its files, by the job's writer (stage time "write"), as
the objective makes them.  A part without documents writes nothing, and removes what an earlier run's
task wrote under its names (``Writer.names``).  The training side's records are
the task's instances; another side's files and records are counted under its split's name.

The writer's own stage after the normal pass (``Writer.finish_tasks``: Megatron's merge) is this step's
stage ``finish``."""

from __future__ import annotations

from common.job.tasks import FINISH, decode_quarantined
from common.output.files import TRAIN
from common.steps.base import JobPlan, Records, StageResult, Step, TaskRun, Written


class Write(Step[Records, Written]):
    name = "write"
    runs = "writer"
    makes = "files"
    stages = (FINISH,)
    after = "objective"

    @classmethod
    def enabled(cls, params) -> bool:
        return True


    def apply(self, parts: list[Records], run: TaskRun) -> list[Written]:
        stats = run.stats
        written_parts = []
        for part in parts:
            files = []
            stem = self.job.writer.place(part.split, part.stem)  # the format's directory for the side, if it names one
            if part.batches is not None:
                with self.job.writer.writing(self.job.output, stem) as output:
                    for batch in part.batches:
                        if part.split == TRAIN:
                            stats.instances += len(batch)
                            stats.output_tokens += batch.tokens_without_padding()
                        with stats.timed("write"):
                            output.write(batch)
                    with stats.timed("write"):
                        files = output.commit()
            written = {f.name for f in files}
            for name in self.job.writer.names(stem) or ():  # what an earlier run's task wrote otherwise
                if name not in written:
                    self.job.output.remove(name)
            if part.split != TRAIN:
                for f in files:
                    f.split = part.split
                stats.count(part.split, "records", sum(f.records for f in files))
                stats.count(part.split, "shards", len(files))
            written_parts.append(Written(part.split, part.key, part.stem, files))
        return written_parts

    def run_stage(self, task, payload: bytes, stats) -> StageResult:
        with stats.timed(FINISH):
            return StageResult(self.job.writer.finish_task(self.job.output, task, self.job.config.job_id,
                                                           decode_quarantined(payload)))

    @classmethod
    def plan(cls, params, plan: JobPlan) -> tuple[list, list]:
        writer_class = plan.config.writer_class()
        return [], list(writer_class.finish_tasks(writer_class.make_params(plan.config.writer.params), plan.output,
                                                  plan.config.job_id, plan.normal, plan.special))

    @classmethod
    def identity(cls, params) -> dict:
        return {}  # the writer is part of the identity as the job's own field
