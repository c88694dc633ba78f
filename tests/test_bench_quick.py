"""The quick benchmark's guard (bench/guard.py) and the figures it judges.

The quick benchmark itself runs as CI's own step, ``python -m bench.guard`` in .ci/run, outside pytest's clock: a
benchmark inside pytest-timeout's limit let the machine's load decide the verdict.  These tests hold what the
guard decides from a run's table and ratios: the benchmark rotting (a row missing or without a number), and a
worker stage getting much dearer or cheaper against a reference measured in the same run (bench/ratios.py:
ratios, not times, with a band measured under load).
"""

import sys
from pathlib import Path

import pytest

from bench.guard import CALIBRATION_QUIET, Table, calibrate, problems, quiet_seconds, run_scaled
from bench.ratios import FLOOR, RECORD_COMMAND, TOLERANCE, drifts, failure_message, load
from bench.run import ROWS, STAGE_NAMES, STAGE_ROWS


def table_of(rows: dict[str, list[str]]) -> str:
    lines = ["| Metric | Value |", "| --- | --- |"]
    return "\n".join(lines + [f"| {metric} | {' | '.join(values)} |" for metric, values in rows.items()])


def a_full_run() -> dict[str, list[str]]:
    """Every row and stage row the benchmark prints, each with a number (the fast encoders' rows naming theirs)."""
    from bench.encoder_ratios import EXPECTED

    rows = {row.metric: [f"1.5 ({EXPECTED[row.key]})" if row.key in EXPECTED else "1.5", "target"] for row in ROWS}
    rows.update({label: ["0.01"] * len(STAGE_NAMES) for _tokenizer, _dupe, label in STAGE_ROWS})
    return rows


def test_the_guard_passes_a_complete_run_within_its_bands():
    assert problems(Table.parse(table_of(a_full_run())), load()) == []


def test_the_guard_names_a_missing_row_a_row_without_a_number_and_a_short_stage_row():
    rows = a_full_run()
    first, second = ROWS[0].metric, ROWS[1].metric
    del rows[first]
    rows[second] = ["fast", "target"]
    label = STAGE_ROWS[0][2]
    rows[label] = rows[label][:-1]
    found = problems(Table.parse(table_of(rows)), load())
    assert f"row missing: {first}" in found
    assert any(line.startswith(f"{second}: no number") for line in found)
    assert any(line.startswith(f"{label}: ") for line in found)


def test_the_guard_fails_a_stage_out_of_its_band_and_a_ratio_not_measured():
    recorded = load()
    found = problems(Table.parse(table_of(a_full_run())), dict(recorded, ratio_fast1_split=recorded["ratio_fast1_split"] * 5))
    assert any("ratio_fast1_split" in line and RECORD_COMMAND in line for line in found)
    missing = {k: v for k, v in recorded.items() if k != "ratio_fast10_build"}
    assert "ratio not measured: ratio_fast10_build" in problems(Table.parse(table_of(a_full_run())), missing)


def test_a_loaded_machines_seconds_count_for_less_and_a_fast_machines_never_for_more():
    assert quiet_seconds(10.0, CALIBRATION_QUIET) == 10.0
    assert quiet_seconds(10.0, CALIBRATION_QUIET / 3) == 10.0
    assert quiet_seconds(10.0, CALIBRATION_QUIET * 5) == pytest.approx(2.0)  # load 8-14 on 2 cores: ~5x slower
    assert 0 < calibrate(rounds=1) < 60


def test_the_scaled_clock_stops_a_hang_and_returns_a_finished_commands_status(tmp_path):
    out = tmp_path / "out.txt"
    assert run_scaled([sys.executable, "-c", "print('done'); raise SystemExit(3)"], out, budget=60, poll=0.2) == 3
    assert out.read_text() == "done\n"
    hang = [sys.executable, "-c", "import time; time.sleep(600)"]
    assert run_scaled(hang, out, budget=0.5, poll=0.2) is None  # killed: the call returned long before 600 s


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


#: The fast encoders' rows (bench/encoder_ratios.py) measured with each encoder gone back to HF, the least figure of
#: 5 runs at load average 3-7: ``MLM_FAST_BPE=0 MLM_FAST_UNIGRAM=0 python -m bench.encoder_ratios --runs N`` (both
#: turned off), and ``MLM_PIPELINE_NUMPY_KERNELS=1 python -m bench.encoder_ratios --runs 2`` (the kernels not in
#: use: the word cache needs them, and kitoken refuses ModernBERT's added tokens, so HF encodes the BPE).
FALLEN_BACK_TO_HF = {"ratio_modernbert_cold": 0.739, "ratio_modernbert_warm": 0.764, "ratio_unigram_cold": 1.001,
                     "ratio_unigram_warm": 0.908}
WITHOUT_KERNELS = {"ratio_modernbert_cold": 1.137, "ratio_modernbert_warm": 1.145}
#: ... and with each encoder's cache emptied whenever it is used (``python -m bench.encoder_ratios --runs N
#: --no-cache``, the least of 5 runs): the warm figure is the cold one.
CACHE_LOST = {"ratio_modernbert_cold": 0.234, "ratio_modernbert_warm": 0.199, "ratio_unigram_cold": 0.822,
              "ratio_unigram_warm": 0.775}


def test_the_guard_fails_when_the_fast_bpe_or_unigram_encoder_falls_back_to_hf_or_loses_its_cache(monkeypatch):
    """Deterministic, from figures: a regression that sends either fast encoder back to HF, or empties its cache,
    passes the encoders' own tests (they check ids) but not the guard.  The warm rows carry it: fast_unigram cold
    on the quick task is only ~2x HF, about the band, while either encoder warm is 15-40x."""
    from bench import encoder_ratios
    from common import kernels

    recorded = load()
    assert set(encoder_ratios.KEYS) <= set(recorded)
    assert not drifts(recorded, recorded)
    fallen = {drift.key for drift in drifts(dict(recorded, **FALLEN_BACK_TO_HF), recorded)}
    assert {"ratio_modernbert_cold", "ratio_modernbert_warm", "ratio_unigram_warm"} <= fallen
    lost = {drift.key for drift in drifts(dict(recorded, **CACHE_LOST), recorded)}
    assert {"ratio_modernbert_warm", "ratio_unigram_warm"} <= lost
    # The guard names them, and a run without them is not a pass.
    table = Table.parse(table_of(a_full_run()))
    assert any("ratio_unigram_warm" in line for line in problems(table, dict(recorded, **FALLEN_BACK_TO_HF)))
    unmeasured = {k: v for k, v in recorded.items() if k not in encoder_ratios.KEYS}
    assert {f"ratio not measured: {name}" for name in encoder_ratios.KEYS} <= set(problems(table, unmeasured))
    # Whatever the figure, a row measured on another encoder than its record's is named.
    rows = a_full_run()
    metric = next(row.metric for row in ROWS if row.key == "ratio_unigram_cold")
    rows[metric] = ["0.567 (HF)", ""]
    assert [line for line in problems(Table.parse(table_of(rows)), recorded) if "was not measured on" in line] == [
        "ratio_unigram_cold: '0.567 (HF)' was not measured on unigram-cache, the encoder it is recorded with "
        "(the worker fell back to another)"]
    # Without the compiled kernels the BPE goes to HF, and the guard says to build them.
    found = drifts(dict(recorded, **WITHOUT_KERNELS), recorded)
    assert {drift.key for drift in found} == set(WITHOUT_KERNELS)
    monkeypatch.setattr(kernels, "compiled", None)
    assert "common/_kernels.c is not in use here" in failure_message(found)


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


def test_scaling_counts_double_up_to_the_machines_cores():
    from bench.run import scaling_counts

    assert scaling_counts(1) == [1]
    assert scaling_counts(2) == [1, 2]
    assert scaling_counts(6) == [1, 2, 4, 6]
    assert scaling_counts(8) == [1, 2, 4, 8]


def test_the_scaling_table_states_speed_ups_cpu_shares_and_the_ventilators_ceiling():
    from bench.run import ScalingPoint, scaling_table

    points = [ScalingPoint(1, 10.0, 1.0, {"ventilator": 1.0, "sink": 1.0, "worker": 8.0}),
              ScalingPoint(2, 5.5, 1.9, {"ventilator": 1.0, "sink": 1.0, "worker": 18.0})]
    table = scaling_table(points, vent_cpu_ms_task=0.5, task_bytes=256 * 1024)
    rows = [line for line in table.splitlines() if line.startswith("| 1 ") or line.startswith("| 2 ")]
    assert rows[0].split(" | ")[1:] == ["10.0", "1.00×", "1.00", "1.00×", "10.0%", "10.0%", "80.0% |"]
    assert rows[1].split(" | ")[1:] == ["5.5", "1.82×", "1.90", "1.90×", "5.0%", "5.0%", "90.0% |"]
    # 2,000 tasks/s of ventilator CPU; one worker finishes 1e6 / 262,144 = 3.81 tasks/s: ~524 workers.
    assert "2,000 tasks/s" in table and "~524 such workers" in table
    assert "Projected ceiling of one ventilator: run the scale section" in scaling_table(points, None, 1)


def test_an_output_too_small_to_split_into_a_mixture_is_refused(tmp_path):
    import json

    from bench.loader_bench import split_output

    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "manifest.jsonl").write_text(
        "".join(json.dumps({"records": n, "shards": []}) + "\n" for n in (5, 0, 7)))
    with pytest.raises(ValueError, match="2 task\\(s\\): too few to split into 3"):
        split_output(tmp_path / "out", tmp_path / "parts")


def test_the_loader_bench_stops_at_once_when_the_server_exits(tmp_path):
    """The loader refusing its flags left the bench's client waiting 600 s, which ended CI's guard."""
    from bench.loader_bench import measure

    with pytest.raises(RuntimeError, match="the loader server exited"):
        measure(tmp_path / "no-such-output", tmp_path / "work", 1, 1, False, "unused", timeout=300)


def test_the_quick_benchmark_runs_one_and_two_workers_on_any_machine(monkeypatch):
    """CI's guard (``--quick``) runs the pipeline at 1 and 2 workers: on a 64-core runner the scaling table's
    1, 2, 4 ... 64 workers would be six more whole jobs under the hang limit.  The full run counts the cores this
    process may use (a cpuset or ``taskset`` leaves fewer than ``os.cpu_count()``)."""
    import os

    from bench.run import pipeline_worker_counts, usable_cores

    assert pipeline_worker_counts(quick=True, cores=64) == [1, 2]
    assert pipeline_worker_counts(quick=False, cores=64) == [1, 2, 4, 8, 16, 32, 64]
    assert pipeline_worker_counts(quick=False, cores=1) == [1, 2]  # the p_scaling rows need 2
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert usable_cores() == len(os.sched_getaffinity(0))
