"""Input formats: the worker's cost per input MB on Parquet against the same
text as WikiExtractor output, and the ventilator's planning time for many
Parquet files (footers only).

Both worker runs process the same documents (the WikiExtractor task's
documents written as Parquet rows, one row group per ~1 MB of text) with the
same tokenizer and objective, each read from disk as a worker with
``--shared-fs`` reads it; the input MB of both is the WikiExtractor bytes,
so the ratio of their CPU seconds is the Parquet path's overhead.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from common.job.config import JobConfig, standard_steps
from common.job.params import Component
from common.job.tasks import Task
from common.readers import ParseReport, reader_named
from common.readers.wikiextractor import WikiExtractorReader
from common.storage import LocalStorage
from worker.pipeline import TaskProcessor

WIKIEXTRACTOR = WikiExtractorReader()
PARQUET = reader_named("parquet")()


@dataclass
class Inputs:
    wiki: tuple[LocalStorage, Task]
    parquet: tuple[LocalStorage, Task]
    megabytes: float  # of the WikiExtractor text: the denominator of both


def _whole_file_task(path: Path, reader) -> tuple[LocalStorage, Task]:
    storage = LocalStorage(str(path.parent))
    files = [f for f in storage.list_inputs() if f.path == path.name]
    reader.check_inputs(storage, files)
    (task,) = list(reader.plan(files, 1 << 40, storage))
    return storage, task


def make_inputs(content: bytes, directory: Path) -> Inputs:
    """The WikiExtractor bytes, and the same documents as a Parquet file (text, id)."""
    directory.mkdir(parents=True, exist_ok=True)
    wiki = directory / "wiki" / "input.txt"
    wiki.parent.mkdir()
    wiki.write_bytes(content)
    documents = list(WIKIEXTRACTOR.parse(content, 0, ParseReport()))
    texts = ["\n".join(d.lines) for d in documents]
    rows_per_group = max(1, int(len(texts) * 1e6 / max(1, len(content))))  # ~1 MB of text a row group
    parquet = directory / "parquet" / "input.parquet"
    parquet.parent.mkdir()
    pq.write_table(pa.table({"id": [d.id for d in documents], "text": texts}), parquet,
                   row_group_size=rows_per_group)
    return Inputs(_whole_file_task(wiki, WIKIEXTRACTOR), _whole_file_task(parquet, PARQUET), len(content) / 1e6)


def processor(vocabulary, reader: str, output: Path, dupe_factor: int) -> TaskProcessor:
    config = JobConfig(data_uri="", output_uri=str(output), reader=Component(reader),
                       steps=standard_steps({"segment": {"segmenter": "blingfire"}}), tokenizer_json="",
                       objective=Component("bert", {"max_seq_length": 128, "dupe_factor": dupe_factor}),
                       writer=Component("tfrecord", {}))
    return TaskProcessor(config, vocabulary, LocalStorage(str(output)))


def worker_cpu(proc: TaskProcessor, storage: LocalStorage, task: Task) -> tuple[float, int]:
    """CPU seconds to read and process the task (as a worker with --shared-fs), and its documents."""
    cpu = time.process_time()
    result = proc.process(task, proc.reader.read(storage, task))
    return time.process_time() - cpu, result.stats.documents


def read_and_parse_cpu(reader, storage: LocalStorage, task: Task) -> tuple[float, int]:
    """CPU seconds to read a task and parse its documents, nothing else."""
    cpu = time.process_time()
    documents = list(reader.documents(task, reader.read(storage, task), ParseReport()))
    return time.process_time() - cpu, len(documents)


def many_files(directory: Path, count: int, rows: int = 64, row_groups: int = 4) -> Path:
    """``count`` small Parquet files of ``row_groups`` row groups each."""
    directory.mkdir(parents=True, exist_ok=True)
    table = pa.table({"id": [str(i) for i in range(rows)], "text": [f"Document {i}. It has two sentences."
                                                                    for i in range(rows)]})
    for i in range(count):
        pq.write_table(table, directory / f"train-{i:05d}.parquet", row_group_size=max(1, rows // row_groups))
    return directory


def planning_seconds(directory: Path, task_size: int = 8 << 20) -> tuple[float, float, int]:
    """Wall and CPU seconds for a fresh reader to check and plan every file (footers only), and the tasks."""
    storage = LocalStorage(str(directory))
    files = storage.list_inputs()
    reader = reader_named("parquet")()
    wall, cpu = time.perf_counter(), time.process_time()
    reader.check_inputs(storage, files)
    tasks = list(reader.plan(files, task_size, storage))
    return time.perf_counter() - wall, time.process_time() - cpu, len(tasks)
