"""The benchmark runs (quick mode, tiny inputs) and reports every row, and no worker stage's cost moved.

No time is asserted: a slow machine must not fail CI.  What this catches
is the benchmark rotting (a role's command line, the protocol or the
worker's stage names changing under it), and a worker stage getting much
dearer or cheaper against a reference measured in the same run
(bench/ratios.py: ratios, not times, with a band measured under load).
"""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.extras import installed
from bench.ratios import FLOOR, RECORD_COMMAND, TOLERANCE, drifts, failure_message, load
from bench.run import ROWS, STAGE_NAMES, STAGE_ROWS
from tests.support.helpers import REPO, need_shared

pytestmark = pytest.mark.bench


def test_quick_benchmark_reports_every_row(tmp_path):
    need_shared()
    markdown = tmp_path / "bench.md"
    measured = tmp_path / "ratios.json"
    # ~2-3 minutes on a quiet machine, 4-6 when other work shares the 2 cores: the limit only stops a hang
    result = subprocess.run([sys.executable, "-m", "bench.run", "--quick", "--markdown", str(markdown),
                             "--ratios", str(measured)], cwd=REPO, capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    ratios = json.loads(measured.read_text())
    assert {"ratio_fast1_split", "ratio_fast10_build"} <= set(ratios)
    drifted = drifts(ratios, load())
    assert not drifted, failure_message(drifted)
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


def test_the_guard_fails_on_issue_33s_split_regression():
    """Deterministic, from figures: issue #33 measured the split, through text_to_sentences_and_offsets'
    per-byte loop, at 0.165-0.171 CPU-s/MB against 0.031 for text_to_sentences alone on the same text."""
    recorded = load()
    regressed = dict(recorded, ratio_fast1_split=0.165 / 0.031, ratio_fast10_split=0.165 / 0.031)
    found = drifts(regressed, recorded)
    assert {drift.key for drift in found} == {"ratio_fast1_split", "ratio_fast10_split"}
    assert RECORD_COMMAND in failure_message(found)
    assert not drifts(recorded, recorded)


def test_the_band_is_a_factor_each_way_and_small_stages_are_bounded_above():
    recorded = {"a": 1.0, "tiny": 0.01}
    assert not drifts({"a": TOLERANCE * 0.99, "tiny": 0.0}, recorded)
    assert not drifts({"a": 1 / TOLERANCE * 1.01, "tiny": FLOOR * TOLERANCE * 0.99}, recorded)
    assert [d.key for d in drifts({"a": TOLERANCE * 1.01, "tiny": 0.01}, recorded)] == ["a"]
    assert [d.key for d in drifts({"a": 1 / TOLERANCE * 0.99}, recorded)] == ["a"]
    assert [d.key for d in drifts({"a": 1.0, "tiny": FLOOR * TOLERANCE * 1.01}, recorded)] == ["tiny"]
    assert [d.key for d in drifts({"a": float("nan")}, recorded)] == ["a"]
    assert not drifts({"unrecorded": 50.0}, recorded)  # measured only: nothing to compare with


def test_without_the_compiled_kernels_the_guard_says_build_them_not_re_record(monkeypatch):
    """The ratios are recorded with common/_kernels.c; where it is not in use (no C compiler at install,
    MLM_PIPELINE_NUMPY_KERNELS=1) the build stage is several times dearer.  The guard still fails (CI must notice a
    build that lost the kernels), but says why, and recording such a run is refused."""
    from bench import ratios
    from common import kernels
    recorded = load()
    found = drifts(dict(recorded, ratio_fast10_build=recorded["ratio_fast10_build"] * 3.5), recorded)
    assert "common/_kernels.c" not in failure_message(found) or kernels.compiled is None
    monkeypatch.setattr(kernels, "compiled", None)
    message = failure_message(found)
    assert "common/_kernels.c is not in use here" in message and "do not re-record" in message
    with pytest.raises(ratios.RecordRefused, match="common/_kernels.c"):
        ratios.save({"ratio_fast10_build": 1.0}, "now", path=Path("/nonexistent/never-written.json"))
