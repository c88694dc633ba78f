"""``python -m bench.stage_breakdown [--dupe-factor 10] [--runs 3]``: where the worker's build and write
stages spend their CPU, function by function.

One task of ../shared's corpus (2.06 MB, every file as one input) through the worker's TaskProcessor with
nanotoken, BERT at seq 128; CPU seconds (time.process_time) around each named function, per input MB,
the least of ``--runs`` runs.  For the rest of issue #33: which numpy kernels a faster build or write must
beat (docs/benchmarks.md).  With the compiled kernels built (common/kernels.py) the encoder is one C call:
``_example_layout`` and ``_masked_crc`` are then not called; ``MLM_PIPELINE_NUMPY_KERNELS=1`` times the numpy code.
"""

from __future__ import annotations

import functools
import shutil
import tempfile
import time
from pathlib import Path

import click

from bench.run import VOCAB, WIKI
from bench.worker_bench import load_vocabulary, processor, run_task, task_of, with_encoder

#: (module, function) pairs timed: the BERT objective's per-pass steps, the TFRecord encoder's parts.
TIMED = [("common.objectives.bert", "plan_instances"), ("common.objectives.bert", "lay_out_pairs"),
         ("common.objectives.bert", "select_masked"), ("common.objectives.bert", "apply_masks"),
         ("common.writers.tfrecord", "encode_records"), ("common.writers.tfrecord", "_example_layout"),
         ("common.writers.tfrecord", "_masked_crc")]


def _timed(spent: dict[str, float], module, name: str) -> None:
    function = getattr(module, name)

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        started = time.process_time()
        try:
            return function(*args, **kwargs)
        finally:
            spent[name] = spent.get(name, 0.0) + time.process_time() - started

    setattr(module, name, wrapper)


@click.command()
@click.option("--dupe-factor", type=click.IntRange(min=1), default=10, show_default=True)
@click.option("--runs", type=click.IntRange(min=1), default=3, show_default=True)
def main(dupe_factor: int, runs: int) -> None:
    import importlib

    from common.tokenization.fast_wordpiece import make_fast_encoder

    spent: dict[str, float] = {}
    for module, name in TIMED:
        _timed(spent, importlib.import_module(module), name)
    vocabulary = load_vocabulary(str(VOCAB))
    encoder = make_fast_encoder(vocabulary.to_json())
    if encoder is not None:
        vocabulary = with_encoder(vocabulary, encoder)
    with tempfile.TemporaryDirectory(prefix="mlm-breakdown-") as tmp:
        data = b"".join(path.read_bytes() for path in sorted(WIKI.rglob("*")) if path.is_file())
        (Path(tmp) / "in").mkdir()
        (Path(tmp) / "in" / "input.txt").write_bytes(data)
        storage, task = task_of(Path(tmp) / "in" / "input.txt")
        megabytes = len(data) / 1e6
        best: dict[str, float] = {}
        for run in range(runs):
            spent.clear()
            result = run_task(processor(vocabulary, Path(tmp) / f"out{run}", dupe_factor), storage, task)
            shutil.rmtree(Path(tmp) / f"out{run}")
            row = {**result.stage_cpu, **spent}
            best = {name: min(best.get(name, value), value) for name, value in row.items()}
    print(f"d={dupe_factor}, {megabytes:.2f} MB, least of {runs} runs: CPU-s per input MB")
    for name, value in best.items():
        print(f"  {name:16s} {value / megabytes:.4f}")


if __name__ == "__main__":
    main()
