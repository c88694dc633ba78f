"""What the format tests share: a small real job per format, and its files read back through the axis."""

from __future__ import annotations

from pathlib import Path

from common.output.manifest import read_entries, shard_files, stage_files
from common.storage import LocalStorage
from common.writers import writer_for_file
from tests.support.factories import finished_run, wiki_prefix
from tests.support.helpers import VOCAB


def small_corpus(root: Path, size: int = 60_000) -> Path:
    """The first ``size`` characters of wiki_00, whole documents: a few 24 KB tasks."""
    return wiki_prefix(root, size)


def run_job(corpus: Path, output: Path, *args) -> Path:
    return finished_run(corpus, output, "--vocab-file", VOCAB, "--task-size", "24K", "--workers", "2", *args,
                        timeout=180).output


def listed_files(output: Path, finish: bool = False) -> list[dict]:
    """The manifest's files in serving order (task id): the normal tasks', or the finish stage's."""
    entries = sorted(read_entries(LocalStorage(str(output))), key=lambda e: e["task"])
    if finish:
        return [f for e in entries if e.get("stage") == "finish" for f in stage_files(e)]
    return [f for e in entries if not e.get("stage") for f in shard_files(e)]


def read_through_axis(output: Path, name: str):
    """(the format, its columns of file ``name``, its records one by one) as the axis reads them."""
    storage = LocalStorage(str(output))
    data = storage.get_bytes(name)
    writer = writer_for_file(name)
    return writer, writer.read_columns(name, data, storage.get_bytes), list(writer.read_records(name, data,
                                                                                              storage.get_bytes))
