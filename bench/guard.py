"""``python -m bench.guard``: the quick benchmark as CI's own step, outside pytest's clock.

It runs ``python -m bench.run --quick`` and fails when the benchmark rots (a row missing or without a number) or
a worker stage's cost moved against its reference measured in the same run (bench/ratios.py).  No figure is
judged by time.

Inside pytest the run met pytest-timeout's 600 s on a loaded machine: a fixed limit let the machine's load
decide the verdict.  Here the only limit stops a hang, and it is scaled by the machine's speed measured in this
run: a fixed piece of work (``calibrate``) is timed before the benchmark, and the budget is ``BUDGET_QUIET``
times its slowdown against ``CALIBRATION_QUIET`` (what it takes on a quiet machine of this kind), never below
the quiet budget.
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import click

#: Wall seconds of ``calibrate()`` on a quiet 2-core machine of this project's kind (measured: 0.26-0.29 s).
CALIBRATION_QUIET = 0.28
#: Wall seconds the quick benchmark may take on that quiet machine before it counts as a hang (it takes ~200).
BUDGET_QUIET = 900.0
#: Rows of the table that are not measurements.
HEADERS = ("| Metric", "| Worker |", "| ---")
NUMBER = re.compile(r"^[-+]?[\d,]*\.?\d+")


def calibrate(rounds: int = 5) -> float:
    """The least wall time of a fixed CPU-bound piece of work (8 MB through zlib's C, 2M steps of a Python loop):
    how fast this machine runs now, load included.  Wall time, not CPU time, because a hang limit is wall time;
    the median of a few rounds, so neither one lucky nor one preempted round sets the scale."""
    data = bytes(range(256)) * 32_768
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        total = 0
        for i in range(0, len(data), 4096):
            total += len(zlib.compress(data[i:i + 4096], 6))
        for i in range(2_000_000):
            total += i & 7
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def budget(calibration: float) -> float:
    """The hang limit for this run: the quiet budget scaled by how much slower the machine is now."""
    return BUDGET_QUIET * max(1.0, calibration / CALIBRATION_QUIET)


@dataclass(frozen=True)
class Table:
    """The cells of a markdown table the benchmark printed: metric -> the row's other cells."""
    cells: dict[str, list[str]]

    @classmethod
    def parse(cls, stdout: str) -> Table:
        cells = {}
        for line in stdout.splitlines():
            if line.startswith("| ") and not line.startswith(HEADERS):
                metric, *values = [cell.strip() for cell in line.strip().strip("|").split("|")]
                cells[metric] = values
        return cls(cells)


def problems(table: Table, ratios: dict[str, float]) -> list[str]:
    """Everything wrong with a quick run's table and ratios, one line each: a row missing or without a number
    (unless a package it needs is not installed), a stage row incomplete, a stage's ratio out of its band."""
    from bench.extras import installed
    from bench.ratios import drifts, failure_message, load
    from bench.run import ROWS, STAGE_NAMES, STAGE_ROWS

    out = []
    for row in ROWS:
        if row.metric not in table.cells:
            out.append(f"row missing: {row.metric}")
            continue
        value = table.cells[row.metric][0]
        missing = [module for module in row.needs if not installed(module)]
        if not (missing and value.startswith("n/a")) and not NUMBER.match(value):
            out.append(f"{row.metric}: no number in {value!r}")
    for tokenizer, _dupe, label in STAGE_ROWS:
        values = table.cells.get(label)
        if values is None:
            out.append(f"stage row missing: {label}")
        elif len(values) != len(STAGE_NAMES):
            out.append(f"{label}: {len(values)} cells, {len(STAGE_NAMES)} stages")
        elif not (tokenizer.startswith("fast") and not installed("nanotoken")) and not all(map(NUMBER.match, values)):
            out.append(f"{label}: {values}")
    for needed in ("ratio_fast1_split", "ratio_fast10_build"):
        if needed not in ratios:
            out.append(f"ratio not measured: {needed}")
    drifted = drifts(ratios, load())
    if drifted:
        out.append(failure_message(drifted))
    return out


@click.command()
@click.option("--keep", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Keep the run's table and ratios in this directory (default: a temporary one).")
def main(keep: Path | None) -> None:
    """Run the quick benchmark and check it; exit 1 naming each problem."""
    calibration = calibrate()
    limit = budget(calibration)
    print(f"bench.guard: calibration {calibration:.3f} s (quiet {CALIBRATION_QUIET} s): hang limit {limit:.0f} s",
          flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        where = keep or Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        markdown, measured = where / "bench.md", where / "ratios.json"
        command = [sys.executable, "-m", "bench.run", "--quick", "--markdown", str(markdown), "--ratios", str(measured)]
        start = time.perf_counter()
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=limit)
        except subprocess.TimeoutExpired:
            sys.exit(f"bench.guard: the quick benchmark ran past {limit:.0f} s (a hang: it takes ~200 s quiet)")
        print(result.stdout)
        if result.returncode != 0:
            print(result.stderr[-5000:], file=sys.stderr)
            sys.exit(f"bench.guard: the quick benchmark exited {result.returncode}")
        found = problems(Table.parse(result.stdout), json.loads(measured.read_text()))
        if markdown.read_text() not in result.stdout:
            found.append("the --markdown file differs from the printed table")
    print(f"bench.guard: {time.perf_counter() - start:.0f} s")
    if found:
        sys.exit("bench.guard: " + "\n  ".join(found))
    print("bench.guard: every row measured, every stage within its band")


if __name__ == "__main__":
    main()
