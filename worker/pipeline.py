"""One task, start to finish: payload -> documents (reader) -> segments ->
token ids -> records (objective, ``passes`` times) -> files (writer).

With ``--holdout-fraction`` the documents are split first (common/holdout.py)
and each side runs through the objective on its own, under its own task key
and into its own files (``holdout/part-<task>``), so no document of one side
ever appears in an instance of the other, not even as a random next sentence.

The worker knows each axis only by its interface: the job names the reader,
the objective and the writer, and this module runs them.  Records are
written as each pass produces them, so memory holds one pass at a time.
Each stage's time is measured, for the statistics the sink shows and for
the benchmark.
"""

from __future__ import annotations

import dataclasses
import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from common import holdout
from common.config import JobConfig
from common.dedup import stages as dedup_stages
from common.dedup.keys import KeyMaker
from common.dedup.settings import BUCKET, RESOLVE, SIGNATURE
from common.objectives import TokenizedDocuments, objective_named
from common.protocol import AckStats
from common.readers import Document, ParseReport, reader_named
from common.sentences import Segmenter, segment_pieces
from common.tasks import FINISH, Task
from common.tokenization import Vocabulary
from common.tokenization import han_words
from common.word_segmenters import make_word_segmenter
from common.writers import ShardFile, writer_named

STAGES = ("read", "parse", "split", "words", "tokenize", "build", "write")  # words: with --word-segmenter only


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
    dedup: dict[str, int] = field(default_factory=dict)
    holdout: dict[str, int] = field(default_factory=dict)  # the held-out side: documents, tokens, records

    def to_wire(self) -> AckStats:
        return AckStats(documents=self.documents, skipped=dict(self.skipped), segments=self.segments,
                        tokens=self.tokens, instances=self.instances, bytes_in=self.bytes_in,
                        bytes_out=self.bytes_out,
                        seconds={stage: round(value, 6) for stage, value in self.seconds.items()},
                        cpu_seconds=round(self.cpu_seconds, 6), dedup=dict(self.dedup), holdout=dict(self.holdout))

    @contextmanager
    def stage(self, name: str):
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - started


@dataclass
class ShardResult:
    files: list[ShardFile]  # empty when the task produced no record; held-out ones marked
    records: int  # in the training side's files
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
        self.word_segmenter = make_word_segmenter(config.word_segmenter)
        self._han_table = han_words.han_token_table(vocabulary) if self.word_segmenter is not None else None
        objective_class = objective_named(config.objective.name)
        self.objective = objective_class(objective_class.make_params(config.objective.params), vocabulary.special)
        writer_class = writer_named(config.writer.name)
        self.writer = writer_class(writer_class.make_params(config.writer.params), self.objective.features,
                                   vocabulary.special)
        self.dedup = config.dedup
        self._keys = KeyMaker(config.dedup) if config.dedup.enabled else None
        self._plan = None

    def plan(self):
        """The normal tasks in corpus order (bucket and resolve tasks need it), read once per job."""
        if self._plan is None:
            self._plan = dedup_stages.read_plan(self.output, self.config.job_id)
        return self._plan

    def _without_duplicates(self, task: Task, documents: list, stats: TaskStats) -> list:
        """The normal pass of a dedup job: the documents the resolve stage did not remove."""
        removals = dedup_stages.read_removals(self.output, task, self.dedup.partitions)
        if not removals:
            return documents
        for code, _bytes in removals.values():
            method = dedup_stages.METHODS[code]
            stats.dedup[f"removed_{method}"] = stats.dedup.get(f"removed_{method}", 0) + 1
            stats.dedup[f"removed_{method}_bytes"] = stats.dedup.get(f"removed_{method}_bytes", 0) + _bytes
        return [document for ordinal, document in enumerate(documents) if ordinal not in removals]

    def parse(self, task: Task, payload: bytes, report: ParseReport, stats: TaskStats) -> list[Document]:
        """The task's documents, less those a dedup job removed (its ordinals follow the reader's order,
        so this comes before any holdout split)."""
        with stats.stage("parse"):
            documents = list(self.reader.documents(task, payload, report))
        if self.dedup.enabled:
            with stats.stage("dedup"):
                documents = self._without_duplicates(task, documents, stats)
        return documents

    def tokenize_documents(self, documents: list[Document], report: ParseReport,
                           stats: TaskStats) -> tuple[TokenizedDocuments, int]:
        """Segments and token ids of ``documents`` (those without a usable segment counted in ``report``),
        and how many tokens they had in all."""
        with stats.stage("split"):
            segmented = [segment_pieces(document.lines, self.segmenter) for document in documents]
        with stats.stage("tokenize"):
            # Pieces are encoded as the paragraphs they come from encode (common/sentences.py); a segment's
            # tokens are its pieces' tokens end to end.
            pieces = [piece for segments in segmented for segment in segments for piece in segment]
        if self.word_segmenter is not None:
            with stats.stage("words"):
                words = han_words.find_words(pieces, self.word_segmenter)
        with stats.stage("tokenize"):
            if self.word_segmenter is None:
                ids, piece_lengths, word_starts = self.vocabulary.encode_with_word_starts(pieces)
            else:
                ids, piece_lengths, word_starts, unmapped = han_words.encode_with_words(self.vocabulary, words,
                                                                                          self._han_table)
                if unmapped:
                    report.skip("han_text_not_one_token_per_character", unmapped)  # kept, with the tokenizer's words
            lengths = _per_segment(piece_lengths, [len(segment) for segments in segmented for segment in segments])
            tokenized, unusable = TokenizedDocuments.from_segments(ids, lengths, [len(s) for s in segmented],
                                                                   word_starts)
        if unusable:
            report.skip("no_usable_sentence", unusable)
        return tokenized, len(ids)

    def tokenize(self, task: Task, payload: bytes, stats: TaskStats) -> TokenizedDocuments:
        """All the task's documents, one side (no holdout split)."""
        report = ParseReport()
        tokenized, tokens = self.tokenize_documents(self.parse(task, payload, report, stats), report, stats)
        stats.skipped = report.skipped
        stats.documents = tokenized.num_documents
        stats.segments = tokenized.num_segments
        stats.tokens = tokens
        return tokenized

    def _write(self, documents: TokenizedDocuments, task_key: str, stem: str, stats: TaskStats) -> list[ShardFile]:
        """One side's records, every pass, into the files named from ``stem``."""
        if not documents.num_documents:
            return []
        with self.writer.writing(self.output, stem) as output:
            for pass_index in range(self.objective.passes):
                batches = self.objective.batches(documents, task_key, pass_index)
                while True:
                    with stats.stage("build"):
                        batch = next(batches, None)
                    if batch is None:
                        break
                    with stats.stage("write"):
                        output.write(batch)
                    stats.instances += len(batch)
            with stats.stage("write"):
                return output.commit()

    def process_stage(self, task: Task, payload: bytes, stats: TaskStats) -> ShardResult:
        """A dedup stage's task (see common/dedup/stages.py): its files are the stage's, not shards."""
        if task.stage == SIGNATURE:
            report = ParseReport()
            with stats.stage("parse"):
                documents = list(self.reader.documents(task, payload, report))
            with stats.stage("signature"):
                result = dedup_stages.write_signatures(self.output, self.dedup, self._keys, task, documents)
        elif task.stage == BUCKET:
            with stats.stage("bucket"):
                result = dedup_stages.find_pairs(self.output, task, self.plan(), dedup_stages.decode_skips(payload))
        elif task.stage == FINISH:  # the format's own stage (Megatron's merge): its files are the stage's
            with stats.stage(FINISH):
                files = self.writer.finish_task(self.output, task, self.config.job_id,
                                                dedup_stages.decode_skips(payload))
            return ShardResult(files, 0, stats)
        elif task.stage == RESOLVE:
            with stats.stage("resolve"):
                result = dedup_stages.resolve(self.output, self.plan(), self.dedup.partitions,
                                              dedup_stages.decode_skips(payload))
        else:
            raise ValueError(f"unknown stage {task.stage!r}")
        # Their bytes are the stage's own: the job's bytes_written stays the training shards'.
        stats.dedup = {**result.counters, f"{task.stage}_bytes_written": sum(f.bytes for f in result.files)}
        return ShardResult(result.files, 0, stats)

    def process(self, task: Task, payload: bytes, read_seconds: float = 0.0) -> ShardResult:
        """Write the files of ``task`` from its payload; returns what to acknowledge."""
        cpu_started = time.process_time()
        stats = TaskStats(bytes_in=len(payload) if task.reads_input else 0)
        stats.seconds["read"] += read_seconds
        if task.stage:
            result = self.process_stage(task, payload, stats)
            stats.cpu_seconds = time.process_time() - cpu_started
            return result
        split = holdout.HoldoutSplit(self.config.holdout_fraction, self.config.holdout_seed)
        if not split.enabled:
            files = self._write(self.tokenize(task, payload, stats), task.key, task.shard_stem, stats)
        else:
            report = ParseReport()
            training, held = split.split(self.parse(task, payload, report, stats))
            train_documents, train_tokens = self.tokenize_documents(training, report, stats)
            held_documents, held_tokens = self.tokenize_documents(held, report, stats)
            stats.skipped = report.skipped
            stats.documents = train_documents.num_documents
            stats.segments = train_documents.num_segments + held_documents.num_segments
            stats.tokens = train_tokens
            files = self._write(train_documents, task.key, task.shard_stem, stats)
            training_instances = stats.instances
            held_files = self._write(held_documents, holdout.task_key(task.key), holdout.stem(task.shard_stem),
                                     stats)
            stats.instances = training_instances
            held_files = [dataclasses.replace(f, split=holdout.SPLIT) for f in held_files]
            stats.holdout = {"documents": held_documents.num_documents, "tokens": held_tokens,
                             "records": sum(f.records for f in held_files)}
            files = files + held_files
        stats.bytes_out = sum(f.bytes for f in files)
        stats.cpu_seconds = time.process_time() - cpu_started
        return ShardResult(files, sum(f.records for f in files if not f.split), stats)


def _per_segment(piece_lengths: np.ndarray, pieces_per_segment: list[int]) -> np.ndarray:
    """Tokens per segment from tokens per piece (most segments are one piece)."""
    counts = np.asarray(pieces_per_segment, dtype=np.int64)
    if len(counts) == len(piece_lengths):
        return piece_lengths
    if not len(counts):
        return np.zeros(0, dtype=np.int64)
    return np.add.reduceat(piece_lengths, np.concatenate(([0], np.cumsum(counts)[:-1])))
