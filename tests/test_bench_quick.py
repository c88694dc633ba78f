"""The benchmark runs (quick mode, tiny inputs) and reports every row.

No timing is asserted: a slow machine must not fail CI.  What this catches
is the benchmark rotting: a role's command line, the protocol or the
worker's stage names changing under it.
"""

import re
import subprocess
import sys

import pytest

from bench.extras import installed
from bench.run import ROWS, STAGE_NAMES, STAGE_ROWS
from tests.helpers import REPO, need_shared

pytestmark = pytest.mark.bench


def test_quick_benchmark_reports_every_row(tmp_path):
    need_shared()
    markdown = tmp_path / "bench.md"
    result = subprocess.run([sys.executable, "-m", "bench.run", "--quick", "--markdown", str(markdown)], cwd=REPO,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    assert markdown.read_text() in result.stdout
    cells = {}
    for line in result.stdout.splitlines():
        if line.startswith("| ") and not line.startswith(("| Metric", "| Worker |", "| ---")):
            metric, *values = [cell.strip() for cell in line.strip().strip("|").split("|")]
            cells[metric] = values
    number = re.compile(r"^[-+]?[\d,]*\.?\d+")
    for row in ROWS:
        assert row.metric in cells, f"row missing: {row.metric}"
        value = cells[row.metric][0]
        missing = [module for module in row.needs if not installed(module)]
        if missing and value.startswith("n/a"):
            continue  # an optional package is not installed here
        assert number.match(value), f"{row.metric}: no number in {value!r}"
    for tokenizer, _dupe, label in STAGE_ROWS:
        assert label in cells, f"stage row missing: {label}"
        values = cells[label]
        assert len(values) == len(STAGE_NAMES)
        if tokenizer.startswith("fast") and not installed("nanotoken"):
            continue
        assert all(number.match(v) for v in values), f"{label}: {values}"


def test_steady_rate_is_the_slope_after_start_up():
    from bench.roles import steady_rate

    # One worker: the first task carries start-up, then 1 MB every second.
    arrivals = [(5.0, 10**6)] + [(5.0 + i, 10**6) for i in range(1, 6)]
    assert steady_rate(arrivals, workers=1) == pytest.approx(1e6)


def test_steady_rate_is_unknown_for_a_run_too_short_to_tell():
    from bench.roles import steady_rate

    # Every completion seen in one or two polls: no slope, never a zero rate.
    assert steady_rate([(1.0, 100)] * 5, workers=1) is None
    assert steady_rate([(1.0, 100), (1.0, 100), (2.0, 100)], workers=1) is None
    assert steady_rate([], workers=2) is None
