"""Peak RSS of one worker process over many tasks in a row.

A worker holds one task at a time, so its memory must level off after the
first tasks instead of growing with the corpus.  Run in a fresh process (the
benchmark's own peak would hide the worker's):

    python -m bench.worker_memory CORPUS_DIR VOCAB_FILE [--dupe-factor 1]

Every file of CORPUS_DIR is one task, processed in order as a worker with
--shared-fs does; prints one JSON line: VmHWM in bytes after each task.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path

from bench.procs import vm_hwm
from bench.worker_bench import load_vocabulary, processor, run_task
from common.storage import LocalStorage
from common.tasks import Task


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.worker_memory", description=__doc__.splitlines()[0])
    parser.add_argument("corpus", type=Path)
    parser.add_argument("vocab")
    parser.add_argument("--dupe-factor", type=int, default=1)
    args = parser.parse_args(argv)
    storage = LocalStorage(str(args.corpus))
    tasks = [Task(f.path, 0, f.size, f.size, f.version) for f in sorted(storage.list_inputs(), key=lambda f: f.path)]
    out = Path(tempfile.mkdtemp(prefix="worker-memory-"))
    try:
        proc = processor(load_vocabulary(args.vocab), out, args.dupe_factor)
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
    main()
