"""One task, start to finish: the job's list of steps (common/steps/base.py) run over its payload.

The worker knows each step only by its interface: the job names the steps in
order (read -> [dedup] -> [holdout] -> segment -> [words] -> tokenize ->
objective -> write) and this module builds them once per job and runs them
per task.  Each step takes the sides' typed values the one before returned
and returns its own (common/steps/base.py: documents, segmented, tokenized,
records, written), one per side of the output (the training side, and a
held-out side after a split step).  A task of a step's own stage
(dedup's signature, bucket and resolve; the writer's finish) is run by the
step that declares it.  Each step times its own stages, for the statistics
the sink shows and for the benchmark.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Iterator
from dataclasses import dataclass

from common.job.config import JobConfig
from common.job.tasks import Task
from common.objectives import TokenizedDocuments
from common.output.files import TRAIN, ShardFile
from common.readers import Document, ParseReport
from common.steps import Documents, JobContext, Lane, TaskRun, TaskStats, Written, job_steps
from common.tokenization import Vocabulary

#: The timers of a normal task (``TaskStats.timed``: seconds, by name; "words" with a words step only, "dedup"
#: with dedup).  The sink sums them into its metric ``mlm_sink_worker_stage_seconds``, labelled by timer.
TIMERS = ("read", "parse", "split", "words", "tokenize", "build", "write")

__all__ = ["TIMERS", "ShardResult", "TaskProcessor", "TaskStats"]


@dataclass
class ShardResult:
    files: list[ShardFile]  # empty when the task produced no record; other splits' files marked
    records: int  # in the training side's files
    stats: TaskStats


class TaskProcessor:
    """Turns tasks of one job into shards; holds what all its tasks share."""

    def __init__(self, config: JobConfig, vocabulary: Vocabulary, output_storage):
        self.config = config
        self.vocabulary = vocabulary
        self.output = output_storage
        self.job = JobContext(config, vocabulary, output_storage)
        self.steps = [step_class(params, self.job) for step_class, params in job_steps(config)]
        self._stage_owner = {stage: step for step in self.steps for stage in step.stages}

    @property
    def reader(self):
        """The job's reader (what the ventilator, or a worker in range mode, reads a task's payload with)."""
        return self.job.reader

    def process_stage(self, task: Task, payload: bytes, stats: TaskStats) -> ShardResult:
        """A task of a step's own stage: its files are the stage's, not shards."""
        step = self._stage_owner.get(task.stage)
        if step is None:
            raise ValueError(f"unknown stage {task.stage!r} (this job's: {', '.join(self._stage_owner) or 'none'})")
        result = step.run_stage(task, payload, stats)
        if result.counters:
            stats.counters[step.name] = dict(result.counters)
        return ShardResult(result.files, 0, stats)

    def run_steps(self, task: Task, payload: bytes, stats: TaskStats) -> list[Written]:
        """Every step over the task's one side (the training side), each given what the one before returned;
        the sides' files (a split step adds a side)."""
        run = TaskRun(task, payload, stats, ParseReport())
        parts: list = [Lane(TRAIN, task.key, task.shard_stem)]
        for step in self.steps:
            parts = step.apply(parts, run)
        stats.skipped = run.report.skipped
        return parts

    # Parts of the list, for tests and benchmarks: the steps up to a point, chosen by what they make.

    def _through(self, parts: list, run: TaskRun, makes: tuple[str, ...]) -> list:
        for step in self.steps:
            if step.makes in makes:
                parts = step.apply(parts, run)
        return parts

    def parse(self, task: Task, payload: bytes, report: ParseReport, stats: TaskStats) -> list[Document]:
        """The task's documents as the steps that make documents leave them (read, less what dedup removed)."""
        run = TaskRun(task, payload, stats, report)
        parts: list[Documents] = self._through([Lane(TRAIN, task.key, task.shard_stem)], run, ("documents",))
        return parts[0].documents

    def tokenize_documents(self, documents: list[Document], report: ParseReport,
                           stats: TaskStats) -> tuple[TokenizedDocuments, int]:
        """Segments and token ids of ``documents``, one side (TokenizedDocuments), and how many tokens they had."""
        run = TaskRun(None, b"", stats, report)
        (part,) = self._through([Documents(TRAIN, "", "", list(documents))], run, ("segments", "words", "tokenized"))
        return part.tokenized, part.tokens

    def tokenize(self, task: Task, payload: bytes, stats: TaskStats):
        """All the task's documents, one side (no split), as token ids."""
        report = ParseReport()
        tokenized, _tokens = self.tokenize_documents(self.parse(task, payload, report, stats), report, stats)
        stats.skipped = report.skipped
        return tokenized

    @property
    def objective(self):
        return self.job.objective

    def process(self, task: Task, payload: bytes, read_seconds: float = 0.0) -> ShardResult:
        """Write the files of ``task`` from its payload; returns what to acknowledge."""
        cpu_started = time.process_time()
        stats = TaskStats(bytes_in=len(payload) if task.reads_input else 0)
        stats.seconds["read"] += read_seconds
        if task.stage:
            result = self.process_stage(task, payload, stats)
            stats.cpu_seconds = time.process_time() - cpu_started
            return result
        with _no_cyclic_collection():
            files = [f for part in self.run_steps(task, payload, stats) for f in part.files]
        stats.bytes_out = sum(f.bytes for f in files)
        stats.cpu_seconds = time.process_time() - cpu_started
        return ShardResult(files, sum(f.records for f in files if f.split == TRAIN), stats)


@contextlib.contextmanager
def _no_cyclic_collection() -> Iterator[None]:
    """A task's steps run without the cyclic garbage collector.  They make tens of thousands of small lists (a
    document's segments, each a list of pieces) that all die by reference count when the task ends, holding no
    cycles, while the collector walked them (and the worker's long-lived objects) ~20 times a task: ~5% of the
    worker's CPU at dupe factor 1.  Cycles a step does make wait for the first collection after the task."""
    if not gc.isenabled():  # the caller's choice; nested tasks (none today) leave it alone
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
