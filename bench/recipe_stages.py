"""``python -m bench.recipe_stages [--runs 3] [--copies 3]``: the worker's CPU by stage for each recipe of the job
section (BERT and ALBERT at d=10 and d=1, seq 128; ELECTRA at its defaults), CPU-s per input MB, least of
``--runs``: where each recipe's whole-job bound comes from (docs/benchmarks.md, "Every recipe against its own
reference").  In-process, as the objectives section runs the worker: ``TaskProcessor`` on ``--copies`` copies of
../shared's sample as one task, nanotoken, its word cache cleared before each run."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import click

from bench import corpus as corpora
from bench.run import MB, STAGE_NAMES, VOCAB, WIKI

#: name: (objective, its parameters, the segmenter its job resolves to).
RECIPES = {"bert10": ("bert", {"max_seq_length": 128, "dupe_factor": 10}, "blingfire"),
           "bert1": ("bert", {"max_seq_length": 128, "dupe_factor": 1}, "blingfire"),
           "albert10": ("albert", {"max_seq_length": 128, "dupe_factor": 10}, "blingfire"),
           "albert1": ("albert", {"max_seq_length": 128, "dupe_factor": 1}, "blingfire"),
           "electra": ("electra", {}, "line")}


@click.command(help=__doc__.split("\n\n")[0])
@click.option("--runs", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--copies", type=click.IntRange(min=1), default=3, show_default=True)
def main(runs: int, copies: int) -> None:
    from bench.worker_bench import load_vocabulary, processor, run_task, task_of, with_encoder
    from common.segmenters.sentences import Segmenter
    from common.tokenization.fast_wordpiece import make_fast_encoder

    vocabulary = load_vocabulary(str(VOCAB))
    fast = make_fast_encoder(vocabulary.to_json())
    if fast is not None:
        vocabulary = with_encoder(vocabulary, fast)
    content = corpora.replicated_bytes(corpora.load_sources(WIKI), copies)
    least: dict[tuple[str, str], float] = {}
    with tempfile.TemporaryDirectory(prefix="mlm-recipe-stages-") as tmp:
        path = Path(tmp) / "in" / "input.txt"
        path.parent.mkdir()
        path.write_bytes(content)
        storage, task = task_of(path)
        megabytes = len(content) / MB
        for _ in range(runs):
            for name, (objective, params, segmenter) in RECIPES.items():
                if fast is not None and hasattr(fast, "clear_cache"):  # the fast encoder's own cache
                    fast.clear_cache()
                out = Path(tmp) / "out" / name
                proc = processor(vocabulary, out, 1, segmenter=Segmenter(segmenter), objective=objective,
                                 objective_params=params)
                run = run_task(proc, storage, task)
                shutil.rmtree(out, ignore_errors=True)
                cells = {"all": run.cpu_seconds, **{stage: run.stage_cpu.get(stage, 0.0) for stage in STAGE_NAMES}}
                for key, value in cells.items():
                    least[(name, key)] = min(least.get((name, key), float("inf")), value / megabytes)
    print(f"{megabytes:.2f} MB, least of {runs} run(s), CPU-s per input MB")
    print("| worker | all | " + " | ".join(STAGE_NAMES.values()) + " |")
    print("| --- | --- |" + " --- |" * len(STAGE_NAMES))
    for name in RECIPES:
        print(f"| {name} | {least[(name, 'all')]:.3f} | "
              + " | ".join(f"{least[(name, stage)]:.3f}" for stage in STAGE_NAMES) + " |")


if __name__ == "__main__":
    main(prog_name="python -m bench.recipe_stages")
