"""The worker's compute, in this process: one task through TaskProcessor.

The worker's TaskStats times each stage in wall-clock seconds; on a shared
machine wall time includes time other processes ran, so for the benchmark
the stage timer is wrapped to also record CPU seconds (time.process_time)
per stage.  Nothing else of the worker changes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from common.job.config import JobConfig, standard_steps
from common.job.params import Component
from common.job.tasks import Task
from common.readers import ParseReport
from common.readers.wikiextractor import WikiExtractorReader
from common.segmenters.sentences import Segmenter, split_segments
from common.storage import LocalStorage
from common.tokenization import Vocabulary, load_tokenizer
from worker import pipeline
from worker.heap import keep_freed_heap
from worker.pipeline import TaskProcessor, TaskStats

STAGES = pipeline.TIMERS  # read, parse, split, tokenize, build, write
WIKIEXTRACTOR = WikiExtractorReader()


@dataclass
class TaskRun:
    cpu_seconds: float  # read + process, CPU
    stage_cpu: dict[str, float]
    bytes_in: int
    instances: int
    bytes_out: int
    sha256: str
    extra: dict = field(default_factory=dict)


@contextlib.contextmanager
def cpu_per_stage():
    """TaskStats.timed also records CPU seconds per stage (in stats.cpu_by_timer)."""
    original = TaskStats.timed

    @contextlib.contextmanager
    def stage(self, name):
        cpu = time.process_time()
        try:
            with original(self, name):
                yield
        finally:
            self.__dict__.setdefault("cpu_by_timer", defaultdict(float))[name] += time.process_time() - cpu

    TaskStats.timed = stage
    try:
        yield
    finally:
        TaskStats.timed = original


def load_vocabulary(vocab_file: str, do_lower_case: bool = True) -> Vocabulary:
    return Vocabulary.from_tokenizer(load_tokenizer(vocab_file=vocab_file, do_lower_case=do_lower_case))


def processor(vocabulary: Vocabulary, output: Path, dupe_factor: int, compression: str = "",
              segmenter: Segmenter = Segmenter.BLINGFIRE, objective: str = "bert", objective_params: dict | None = None,
              output_format: str = "tfrecord", writer_params: dict | None = None) -> TaskProcessor:
    """A worker's TaskProcessor for WikiExtractor input; BERT at seq 128 unless told otherwise.  This process's
    malloc is set as a worker process's is (worker/heap.py), so its tasks cost what they cost there."""
    keep_freed_heap()
    if objective_params is None:
        objective_params = {"max_seq_length": 128, "dupe_factor": dupe_factor}
    if writer_params is None:
        writer_params = {"gzip": compression == "gzip"} if output_format == "tfrecord" else {}
    config = JobConfig(data_uri="", output_uri=str(output), reader=Component("wikiextractor"),
                       steps=standard_steps({"segment": {"segmenter": segmenter.value}}), tokenizer_json="",
                       objective=Component(objective, objective_params), writer=Component(output_format, writer_params))
    return TaskProcessor(config, vocabulary, LocalStorage(str(output)))


def task_of(path: Path) -> tuple[LocalStorage, Task]:
    """The whole file as one task (the benchmark's input file is one task's worth)."""
    storage = LocalStorage(str(path.parent))
    (listed,) = [f for f in storage.list_inputs() if f.path == path.name]
    return storage, Task(listed.path, 0, listed.size, listed.size, listed.version)


def run_task(proc: TaskProcessor, storage: LocalStorage, task: Task) -> TaskRun:
    """Read the task from disk and process it, as a worker with --shared-fs does."""
    with cpu_per_stage():
        cpu = time.process_time()
        wall = time.perf_counter()
        content = WIKIEXTRACTOR.read(storage, task)
        read_cpu = time.process_time() - cpu
        result = proc.process(task, content, time.perf_counter() - wall)
        total = time.process_time() - cpu
    stage_cpu = dict.fromkeys(STAGES, 0.0)
    stage_cpu.update(getattr(result.stats, "cpu_by_timer", {}))
    stage_cpu["read"] = read_cpu
    return TaskRun(total, stage_cpu, len(content), result.stats.instances, result.stats.bytes_out,
                   result.files[0].sha256 if result.files else "")


def documents_of(content: bytes) -> list[list[str]]:
    """Each document's lines, as the worker parses them."""
    return [document.lines for document in WIKIEXTRACTOR.parse(content, 0, ParseReport())]


def split_all(documents: list[list[str]], segmenter: Segmenter = Segmenter.BLINGFIRE) -> list[str]:
    """The texts the worker hands the tokenizer for these documents."""
    return [segment for lines in documents for segment in split_segments(lines, segmenter)]


def joined_paragraphs(lines: list[str]) -> str:
    """A document's text as common/segmenters/sentences.py hands it to Bling Fire: its non-empty paragraphs,
    stripped, joined by newlines."""
    return "\n".join(paragraph for paragraph in map(str.strip, lines) if paragraph)


def blingfire_alone(texts: list[str]) -> None:
    """Bling Fire's sentence split alone, one call per document: the split stage's reference."""
    import blingfire

    for text in texts:
        blingfire.text_to_sentences(text)


def hf_encoder(tokenizer, batch: int = 2048):
    """Vocabulary.encode_many on HF tokenizers, as the worker had it when
    this benchmark was written: the "hf" variant, whatever encode_many
    becomes."""

    def encode_many(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        chunks: list[np.ndarray] = []
        lengths = np.zeros(len(texts), dtype=np.int64)
        for start in range(0, len(texts), batch):
            for i, encoding in enumerate(tokenizer.encode_batch(texts[start:start + batch], add_special_tokens=False)):
                ids = encoding.ids
                lengths[start + i] = len(ids)
                if ids:
                    chunks.append(np.asarray(ids, dtype=np.int32))
        return (np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int32)), lengths

    return encode_many


def with_encoder(vocabulary: Vocabulary, encoder) -> Vocabulary:
    """A copy of ``vocabulary`` whose encode_many is ``encoder``."""
    copy = dataclasses.replace(vocabulary)
    copy.encode_many = encoder
    return copy


def cpu_of(function, *args, before=None) -> float:
    if before is not None:
        before()
    cpu = time.process_time()
    function(*args)
    return time.process_time() - cpu
