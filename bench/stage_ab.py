"""``python -m bench.stage_ab A=CHECKOUT B=CHECKOUT [--dupe-factor 1] [--alternations 10] [--rounds 3]``: the
worker's CPU per input MB, stage by stage, of two (or more) checkouts measured alternately in the same minutes.

On a shared machine a CPU-second is not a fixed amount of work from one hour to the next, so a before/after figure
is only worth its alternation: each checkout runs in its own process, ``--rounds`` tasks, then the next checkout,
and so on ``--alternations`` times (A B A B ...).  A task is ../shared's corpus (2.06 MB) through the checkout's own
TaskProcessor as bench.stage_breakdown runs it (nanotoken, BERT at seq 128, after one task to warm up); besides
its stages, each round times Bling Fire's own C (``TextToSentencesWithOffsets``) on the same documents, so the
split's cost outside it shows.  Printed: each stage's least over all of a checkout's rounds, the differences from
the first checkout, and whether every round of every checkout wrote the same shard (its sha256).  Each checkout
needs its kernels built in place (``python setup.py build_ext --inplace``).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import click

#: One checkout's rounds, run by ``python -c`` inside the checkout (its code on the path, not this one's): only
#: what every checkout of bench/worker_bench.py has.  Prints one JSON line of per-round rows.
CHILD = """
import json, shutil, sys, tempfile, time
from pathlib import Path
import common
from common import kernels
from common.segmenters import sentence_offsets
from bench.run import VOCAB, WIKI
from bench.worker_bench import documents_of, joined_paragraphs, load_vocabulary, processor, run_task, task_of
from bench.worker_bench import with_encoder
from common.tokenization.fast_wordpiece import make_fast_encoder
rounds, dupe = int(sys.argv[1]), int(sys.argv[2])
vocabulary = load_vocabulary(str(VOCAB))
vocabulary = with_encoder(vocabulary, make_fast_encoder(vocabulary.to_json()))
tmp = Path(tempfile.mkdtemp(prefix="mlm-stage-ab-"))
data = b"".join(p.read_bytes() for p in sorted(WIKI.rglob("*")) if p.is_file())
(tmp / "in").mkdir()
(tmp / "in" / "input.txt").write_bytes(data)
storage, task = task_of(tmp / "in" / "input.txt")
mb = len(data) / 1e6
encoded = [text.encode() for text in map(joined_paragraphs, documents_of(data)) if text]
sentence_offsets._entry_point()
run_task(processor(vocabulary, tmp / "warm", dupe), storage, task)
shutil.rmtree(tmp / "warm")
rows = []
for r in range(rounds):
    started = time.process_time()
    for utf8 in encoded:
        sentence_offsets._byte_offsets(utf8, False)
    bling = (time.process_time() - started) / mb
    result = run_task(processor(vocabulary, tmp / f"o{r}", dupe), storage, task)
    shutil.rmtree(tmp / f"o{r}")
    rows.append({**{k: v / mb for k, v in result.stage_cpu.items()}, "total": result.cpu_seconds / mb,
                 "bling_fire_c": bling, "sha256": result.sha256})
shutil.rmtree(tmp)
print(json.dumps({"where": common.__file__, "kernels": kernels.status, "rows": rows}))
"""


def run_side(tree: Path, rounds: int, dupe_factor: int) -> dict:
    environment = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-c", CHILD, str(rounds), str(dupe_factor)], cwd=tree, env=environment,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise click.ClickException(f"{tree}: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else '?'}")
    got = json.loads(done.stdout.strip().splitlines()[-1])
    if not Path(got["where"]).resolve().is_relative_to(tree.resolve()):
        raise click.ClickException(f"{tree}: ran {got['where']}, not the checkout's code")
    if got["kernels"] != "compiled":
        raise click.ClickException(f"{tree}: the kernels are {got['kernels']}")
    return got


@click.command(help=__doc__.splitlines()[0])
@click.argument("checkouts", nargs=-1, required=True)
@click.option("--dupe-factor", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--alternations", type=click.IntRange(min=1), default=10, show_default=True)
@click.option("--rounds", type=click.IntRange(min=1), default=3, show_default=True)
def main(checkouts: tuple[str, ...], dupe_factor: int, alternations: int, rounds: int) -> None:
    sides: dict[str, Path] = {}
    for spec in checkouts:
        name, _, path = spec.partition("=")
        if not name or not path or not Path(path).is_dir():
            raise click.BadParameter(f"{spec!r}: NAME=CHECKOUT (a directory)")
        sides[name] = Path(path)
    best: dict[str, dict[str, float]] = {name: {} for name in sides}
    totals: dict[str, list[float]] = {name: [] for name in sides}
    shards: set[str] = set()
    loads = []
    started = time.time()
    for _ in range(alternations):
        for name, tree in sides.items():
            for row in run_side(tree, rounds, dupe_factor)["rows"]:
                shards.add(row.pop("sha256"))
                totals[name].append(row["total"])
                for stage, value in row.items():
                    best[name][stage] = min(best[name].get(stage, value), value)
            loads.append(os.getloadavg()[0])
    names = list(sides)
    first = names[0]
    print(f"d={dupe_factor}: {alternations} alternations x {rounds} rounds per checkout, "
          f"{time.time() - started:.0f} s, load average {min(loads):.1f}-{max(loads):.1f}; "
          f"CPU-s per input MB, least of {alternations * rounds} rounds")
    for name in best:
        best[name]["split - bling_fire_c"] = best[name]["split"] - best[name]["bling_fire_c"]
        best[name]["total - bling_fire_c"] = best[name]["total"] - best[name]["bling_fire_c"]
    print("| stage | " + " | ".join(names) + " | " + " | ".join(f"{n} - {first}" for n in names[1:]) + " |")
    print("| --- " * (2 * len(names)) + "|")
    for stage in best[first]:
        if stage != "total" and not stage.startswith("split") and best[first][stage] < 0.00005:
            continue  # a timer this job does not run (words, dedup)
        cells = [f"{best[n][stage]:.4f}" for n in names]
        cells += [f"{best[n][stage] - best[first][stage]:+.4f}" for n in names[1:]]
        print(f"| {stage} | " + " | ".join(cells) + " |")
    print("median total: " + ", ".join(f"{n} {statistics.median(totals[n]):.4f}" for n in names))
    print(f"every round's shard the same: {len(shards) == 1}")
    if len(shards) != 1:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
