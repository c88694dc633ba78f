"""Peak RSS of one worker process over many tasks in a row.

A worker holds one task at a time, so its memory must level off after the
first tasks instead of growing with the corpus.  Run in a fresh process (the
benchmark's own peak would hide the worker's):

    python -m bench.worker_memory CORPUS_DIR VOCAB_FILE [--dupe-factor 1]

Every file of CORPUS_DIR is one task, processed in order as a worker with
--shared-fs does; prints one JSON line: VmHWM in bytes after each task.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import click

from bench.procs import vm_hwm
from bench.worker_bench import load_vocabulary, processor, run_task
from common.job.tasks import Task
from common.storage import LocalStorage


@click.command(help=__doc__.splitlines()[0])
@click.argument("corpus", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("vocab", type=click.Path(exists=True, dir_okay=False))
@click.option("--dupe-factor", type=click.IntRange(min=1), default=1, show_default=True)
def main(corpus: Path, vocab: str, dupe_factor: int) -> None:
    storage = LocalStorage(str(corpus))
    tasks = [Task(f.path, 0, f.size, f.size, f.version) for f in sorted(storage.list_inputs(), key=lambda f: f.path)]
    out = Path(tempfile.mkdtemp(prefix="worker-memory-"))
    try:
        proc = processor(load_vocabulary(vocab), out, dupe_factor)
        peaks = []
        for task in tasks:
            run_task(proc, storage, task)
            for shard in out.iterdir():
                shard.unlink()
            peaks.append(vm_hwm(os.getpid()))
    finally:
        shutil.rmtree(out)
    print(json.dumps(peaks))


if __name__ == "__main__":
    main(prog_name="python -m bench.worker_memory")
