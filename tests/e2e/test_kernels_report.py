"""Which kernels each worker ran (compiled C or the numpy fallback, common/kernels.py) is in summary.json and the
log, through a real job: once with the kernels switched off, once compiled."""

from __future__ import annotations

import json

import pytest

from common import kernels
from tests.e2e.object_stores import JOB
from tests.support.helpers import WIKI, need_shared, run_ventilator

pytestmark = [pytest.mark.e2e]


@pytest.mark.parametrize("forced", [True, False], ids=["numpy", "compiled"])
def test_summary_and_log_say_which_kernels_each_worker_ran(tmp_path, forced):
    need_shared()
    if not forced and kernels.compiled is None:
        pytest.fail(f"the kernels are not built here ({kernels.status}): python setup.py build_ext --inplace")
    expected = kernels.NUMPY if forced else kernels.COMPILED
    env = {kernels.FORCE_NUMPY: "1" if forced else "0"}
    result = run_ventilator(WIKI / "AA" / "wiki_00", tmp_path / "out", *JOB, "--workers", "2", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["tasks"] > 1
    assert summary["kernels"] == {expected: summary["tasks"]}  # every task, by the kernels that ran it
    by_worker = summary["this_run"]["kernels_by_worker"]
    assert by_worker and all(ran == {expected: ran[expected]} for ran in by_worker.values()), by_worker
    assert sum(ran[expected] for ran in by_worker.values()) == summary["tasks"]
    lines = [json.loads(line) for line in (tmp_path / "out" / "manifest.jsonl").read_text().splitlines()]
    assert all(line["kernels"] == {expected: 1} for line in lines)
    assert f"sink: kernels: {expected} {summary['tasks']}" in result.stderr, result.stderr[-3000:]
    warned = "ran the numpy kernels, several times slower" in result.stderr
    assert warned == forced, result.stderr[-3000:]
    if forced:
        assert all(worker in result.stderr for worker in by_worker)
