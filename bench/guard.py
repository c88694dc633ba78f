"""``python -m bench.guard``: the quick benchmark as CI's own step, outside pytest's clock.

It runs ``python -m bench.run --quick`` and fails when the benchmark rots (a row missing or without a number) or
a worker stage's cost moved against its reference measured in the same run (bench/ratios.py).  No figure is
judged by time.

Inside pytest the run met pytest-timeout's 600 s on a loaded machine: a fixed limit let the machine's load
decide the verdict.  Here the only limit stops a hang, and it runs on a clock scaled by the machine's speed: every
``POLL`` seconds a fixed piece of work (``calibrate``) is timed, and the wall time since the last poll counts
divided by its slowdown against ``CALIBRATION_QUIET`` (what it takes on a quiet machine of this kind).  The run
is a hang when those quiet-equivalent seconds pass ``BUDGET_QUIET``.
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


#: Seconds between two measures of the machine's speed while the benchmark runs.
POLL = 10.0


def quiet_seconds(wall: float, calibration: float) -> float:
    """What ``wall`` seconds on a machine that runs ``calibrate`` in ``calibration`` seconds are worth on a quiet
    one: a loaded machine's seconds count for less, a faster machine's never for more."""
    return wall / max(1.0, calibration / CALIBRATION_QUIET)


def run_scaled(command: list[str], out: Path, budget: float = BUDGET_QUIET, poll: float = POLL) -> int | None:
    """Run ``command`` with its output in ``out``; its exit status, or None once it has used ``budget``
    quiet-equivalent seconds (it is then killed)."""
    used = 0.0
    with out.open("w") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, text=True)
        try:
            while True:
                start = time.perf_counter()
                calibration = calibrate(rounds=1)
                try:
                    return process.wait(timeout=poll)
                except subprocess.TimeoutExpired:
                    used += quiet_seconds(time.perf_counter() - start, calibration)
                    if used > budget:
                        return None
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()


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
    (unless a package it needs is not installed), a stage row incomplete, a fast encoder's row measured on
    another encoder, a stage's ratio out of its band."""
    from bench import encoder_ratios
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
    for needed in ("ratio_fast1_split", "ratio_fast10_build", "ratio_fastalbert10_build", *encoder_ratios.KEYS):
        if needed not in ratios:
            out.append(f"ratio not measured: {needed}")
    metrics = {row.key: row.metric for row in ROWS}
    for name, expected in encoder_ratios.EXPECTED.items():
        value = table.cells.get(metrics[name], [""])[0]
        if NUMBER.match(value) and f"({expected})" not in value:
            out.append(f"{name}: {value!r} was not measured on {expected}, the encoder it is recorded with "
                       "(the worker fell back to another)")
    drifted = drifts(ratios, load())
    if drifted:
        out.append(failure_message(drifted))
    return out


@click.command()
@click.option("--keep", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Keep the run's table, ratios and output in this directory (default: a temporary one).")
def main(keep: Path | None) -> None:
    """Run the quick benchmark and check it; exit 1 naming each problem."""
    with tempfile.TemporaryDirectory() as tmp:
        where = keep or Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        markdown, measured, output = where / "bench.md", where / "ratios.json", where / "output.txt"
        command = [sys.executable, "-m", "bench.run", "--quick", "--markdown", str(markdown), "--ratios", str(measured)]
        start = time.perf_counter()
        status = run_scaled(command, output)
        stdout = output.read_text()
        print(stdout)
        if status is None:
            sys.exit(f"bench.guard: the quick benchmark ran past {BUDGET_QUIET:.0f} s of a quiet machine's time "
                     "(a hang: it takes ~200 s there)")
        if status != 0:
            sys.exit(f"bench.guard: the quick benchmark exited {status}")
        found = problems(Table.parse(stdout), json.loads(measured.read_text()))
        if markdown.read_text() not in stdout:
            found.append("the --markdown file differs from the printed table")
    print(f"bench.guard: {time.perf_counter() - start:.0f} s")
    if found:
        sys.exit("bench.guard: " + "\n  ".join(found))
    print("bench.guard: every row measured, every stage within its band")


if __name__ == "__main__":
    main()
