"""One task, start to finish: payload -> documents (reader) -> segments ->
token ids -> records (objective, ``passes`` times) -> files (writer).

The worker knows each axis only by its interface: the job names the reader,
the objective and the writer, and this module runs them.  Records are
written as each pass produces them, so memory holds one pass at a time.
Each stage's time is measured, for the statistics the sink shows and for
the benchmark.
"""

from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field

from common.config import JobConfig
from common.objectives import TokenizedDocuments, objective_named
from common.protocol import AckStats
from common.readers import ParseReport, reader_named
from common.sentences import Segmenter, split_segments
from common.tasks import Task
from common.tokenization import Vocabulary
from common.writers import ShardFile, writer_named

STAGES = ("read", "parse", "split", "tokenize", "build", "write")


@dataclass
class TaskStats:
    documents: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    segments: int = 0
    tokens: int = 0
    instances: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    cpu_seconds: float = 0.0

    def to_wire(self) -> AckStats:
        return AckStats(documents=self.documents, skipped=dict(self.skipped), segments=self.segments,
                        tokens=self.tokens, instances=self.instances, bytes_in=self.bytes_in,
                        bytes_out=self.bytes_out,
                        seconds={stage: round(value, 6) for stage, value in self.seconds.items()},
                        cpu_seconds=round(self.cpu_seconds, 6))

    @contextmanager
    def stage(self, name: str):
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - started


@dataclass
class ShardResult:
    files: list[ShardFile]  # empty when the task produced no record
    records: int
    stats: TaskStats


class TaskProcessor:
    """Turns tasks of one job into shards; holds what all its tasks share."""

    def __init__(self, config: JobConfig, vocabulary: Vocabulary, output_storage):
        self.config = config
        self.vocabulary = vocabulary
        self.output = output_storage
        reader_class = reader_named(config.reader.name)
        self.reader = reader_class(reader_class.make_params(config.reader.params))
        self.segmenter = Segmenter(config.segmenter)
        objective_class = objective_named(config.objective.name)
        self.objective = objective_class(objective_class.make_params(config.objective.params), vocabulary.special)
        writer_class = writer_named(config.writer.name)
        self.writer = writer_class(writer_class.make_params(config.writer.params), self.objective.features)

    def tokenize(self, task: Task, payload: bytes, stats: TaskStats) -> TokenizedDocuments:
        report = ParseReport()
        with stats.stage("parse"):
            documents = list(self.reader.documents(task, payload, report))
        with stats.stage("split"):
            segmented = [split_segments(document.lines, self.segmenter) for document in documents]
        with stats.stage("tokenize"):
            flat_texts = [segment for segments in segmented for segment in segments]
            ids, lengths, word_starts = self.vocabulary.encode_with_word_starts(flat_texts)
            tokenized, unusable = TokenizedDocuments.from_segments(ids, lengths, [len(s) for s in segmented],
                                                                   word_starts)
        if unusable:
            report.skip("no_usable_sentence", unusable)
        stats.skipped = report.skipped
        stats.documents = tokenized.num_documents
        stats.segments = tokenized.num_segments
        stats.tokens = len(ids)
        return tokenized

    def process(self, task: Task, payload: bytes, read_seconds: float = 0.0) -> ShardResult:
        """Write the files of ``task`` from its payload; returns what to acknowledge."""
        cpu_started = time.process_time()
        stats = TaskStats(bytes_in=len(payload))
        stats.seconds["read"] += read_seconds
        documents = self.tokenize(task, payload, stats)
        files: list[ShardFile] = []
        if documents.num_documents:
            with self.writer.writing(self.output, task.shard_stem) as output:
                for pass_index in range(self.objective.passes):
                    batches = self.objective.batches(documents, task.key, pass_index)
                    while True:
                        with stats.stage("build"):
                            batch = next(batches, None)
                        if batch is None:
                            break
                        with stats.stage("write"):
                            output.write(batch)
                        stats.instances += len(batch)
                with stats.stage("write"):
                    files = output.commit()
        stats.bytes_out = sum(f.bytes for f in files)
        stats.cpu_seconds = time.process_time() - cpu_started
        return ShardResult(files, sum(f.records for f in files), stats)
