"""One task, start to finish: bytes -> documents -> segments -> token ids ->
instances (dupe_factor passes) -> TFRecord shard.

Instances are written as each dupe pass produces them, so memory holds one
pass at a time, not ``dupe_factor`` of them.  Each stage's time is measured,
for the statistics the sink shows and for the benchmark.
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from common.config import JobConfig
from common.formats import CorpusFormat, ParseReport, parse_documents
from common.protocol import AckStats
from common.instances import (SpecialIds, TokenizedDocuments, build_batch, derive_seed, plan_instances)
from common.sentences import Segmenter, split_segments
from common.tasks import Task
from common.tfrecord import ShardWriter, encode_records
from common.tokenization import Vocabulary

#: Instances masked and encoded per numpy batch: bounds memory per pass.
BATCH_INSTANCES = 4096

STAGES = ("read", "parse", "split", "tokenize", "plan", "mask", "serialize", "write")


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
    shard: str  # URI, "" when the task produced no instance
    records: int
    sha256: str
    stats: TaskStats


class TaskProcessor:
    """Turns tasks of one job into shards; holds what all its tasks share."""

    def __init__(self, config: JobConfig, vocabulary: Vocabulary, output_storage):
        self.config = config
        self.params = config.bert
        self.vocabulary = vocabulary
        self.output = output_storage
        self.corpus_format = CorpusFormat(config.corpus_format)
        self.segmenter = Segmenter(config.segmenter).resolve(config.corpus_format)
        self.special = SpecialIds(vocabulary.cls_id, vocabulary.sep_id, vocabulary.mask_id, vocabulary.pad_id,
                                  vocabulary.size, vocabulary.is_continuation)

    def tokenize(self, content: bytes, stats: TaskStats) -> TokenizedDocuments:
        report = ParseReport()
        with stats.stage("parse"):
            documents = list(parse_documents(self.corpus_format, content, 0, report))
        with stats.stage("split"):
            segmented = [split_segments(document.lines, self.segmenter) for document in documents]
        with stats.stage("tokenize"):
            flat_texts = [segment for segments in segmented for segment in segments]
            ids, lengths = self.vocabulary.encode_many(flat_texts)
            tokenized, unusable = TokenizedDocuments.from_segments(ids, lengths, [len(s) for s in segmented])
        if unusable:
            report.skip("no_usable_sentence", unusable)
        stats.skipped = report.skipped
        stats.documents = tokenized.num_documents
        stats.segments = len(tokenized.segment_offsets) - 1
        stats.tokens = len(ids)
        return tokenized

    def write_instances(self, task: Task, documents: TokenizedDocuments, writer: ShardWriter, stats: TaskStats) -> None:
        params = self.params
        for dupe in range(params.dupe_factor):
            with stats.stage("plan"):
                plan = plan_instances(documents, params, random.Random(derive_seed(params.random_seed, task.key, dupe, "plan")))
                mask_rng = np.random.default_rng(derive_seed(params.random_seed, task.key, dupe, "mask"))
                plan = plan.take(mask_rng.permutation(len(plan)))  # BERT shuffles its instances
            for start in range(0, len(plan), BATCH_INSTANCES):
                part = plan.take(np.arange(start, min(start + BATCH_INSTANCES, len(plan))))
                with stats.stage("mask"):
                    batch = build_batch(documents.tokens, part, params, self.special, mask_rng)
                with stats.stage("serialize"):
                    framed = encode_records(batch.features())
                with stats.stage("write"):
                    writer.write(framed, len(batch))
                stats.instances += len(batch)

    def process(self, task: Task, content: bytes, read_seconds: float = 0.0) -> ShardResult:
        """Write the shard of ``task`` from its content; returns what to acknowledge."""
        cpu_started = time.process_time()
        stats = TaskStats(bytes_in=len(content))
        stats.seconds["read"] += read_seconds
        documents = self.tokenize(content, stats)
        if documents.num_documents == 0:
            stats.cpu_seconds = time.process_time() - cpu_started
            return ShardResult("", 0, "", stats)
        with self.output.open_atomic(task.shard_name(self.config.compression)) as atomic:
            writer = ShardWriter(atomic.file, self.config.compression)
            self.write_instances(task, documents, writer, stats)
            with stats.stage("write"):
                sha256 = writer.close()
                uri = atomic.commit()
        stats.bytes_out = writer.bytes_written
        stats.cpu_seconds = time.process_time() - cpu_started
        return ShardResult(uri, writer.records, sha256, stats)
