"""The sink's cost accounting, apart from sockets."""

import pytest

from common.wire.protocol import AckStats
from sink.cost import CostLedger, describe, worker_host


def _stats(cpu: float, wall: float, bytes_in: int = 1_000_000, output_tokens: int = 0) -> AckStats:
    return AckStats(cpu_seconds=cpu, seconds={"tokenize": wall / 2, "build": wall / 2}, bytes_in=bytes_in,
                    output_tokens=output_tokens)


def test_host_of_a_worker_id():
    assert worker_host("worker-ip-10-42-0-7-1234-ab12cd") == "ip-10-42-0-7"
    assert worker_host("worker-vm-99-c0ffee") == "vm"


def test_hours_per_host_from_first_task_start_to_last_ack():
    ledger = CostLedger(hourly_price=0.5)
    # host a: a task that ran 0..100 s, another acknowledged at 3600 s; host b: one task 1800..1900 s.
    ledger.add("worker-a-1-aaaaaa", _stats(90, 100), records=1000, now=100)
    ledger.add("worker-a-2-bbbbbb", _stats(80, 100), records=1000, now=3600)
    ledger.add("worker-b-1-cccccc", _stats(100, 100), records=2000, now=1900)
    summary = ledger.summary(sequence_length=128)
    assert summary["worker_hosts"] == 2
    assert summary["instance_hours"] == pytest.approx((3600 + 100) / 3600)
    assert summary["worker_cpu_hours"] == pytest.approx(270 / 3600)
    assert summary["output_tokens"] == 4000 * 128
    assert summary["cost"] == pytest.approx(0.5 * 3700 / 3600)
    assert summary["cost_per_billion_output_tokens"] == pytest.approx(summary["cost"] / (512_000 / 1e9), rel=1e-5)
    assert summary["cost_per_input_gb"] == pytest.approx(summary["cost"] / 0.003, rel=1e-5)
    assert "$" in describe(summary) and "per billion output tokens" in describe(summary)


def test_without_a_price_only_hours():
    ledger = CostLedger()
    ledger.add("worker-a-1-aaaaaa", _stats(1, 2), records=10, now=10)
    summary = ledger.summary(sequence_length=None)
    assert summary["cost"] is None and summary["output_tokens"] is None and summary["instance_hours"] > 0
    assert "$" not in describe(summary)


def test_the_ventilators_spans_widen_each_hosts_hours():
    """Acks alone see a's tasks from 0 to 100 s; the ventilator saw a from its boot at -240 s to 400 s, and a
    host c that acknowledged nothing (it only idled): the bill counts both whole."""
    ledger = CostLedger(hourly_price=1.0)
    ledger.add("worker-a-1-aaaaaa", _stats(90, 100, output_tokens=700), records=10, now=100)
    assert ledger.summary(None)["instance_hours"] == pytest.approx(100 / 3600)
    ledger.add_spans({"a": [-240.0, 400.0], "c": [0.0, 60.0], "bad": [10.0, 5.0], "short": [1.0],
                      "long": [1.0, 2.0, 3.0], "nan": [float("nan"), 1.0], "inf": [0.0, float("inf")]})
    summary = ledger.summary(sequence_length=128)
    assert summary["worker_hosts"] == 2
    assert summary["instance_hours"] == pytest.approx((640 + 60) / 3600)
    assert summary["output_tokens"] == 1280 and summary["output_tokens_without_padding"] == 700
    assert summary["cost_per_billion_tokens_without_padding"] == pytest.approx(summary["cost"] / 700e-9, rel=1e-5)
    assert "700 output tokens without padding" in describe(summary)
    ledger.add_spans({"a": [0.0, 50.0]})  # narrower: changes nothing
    assert ledger.summary(None)["instance_hours"] == pytest.approx(700 / 3600)


def test_the_jobs_cost_adds_its_runs():
    """Spent: this run's plus what the earlier runs' summary says; made: the manifest's tasks (issue 34,
    item 13).  An earlier run without a price is priced at this one's."""
    from common.output.manifest import Work
    from sink.cost import job_cost

    ledger = CostLedger(hourly_price=2.0)
    ledger.add("worker-a-1-aaaaaa", _stats(360, 3600), records=10, now=3600)
    this_run = ledger.summary(sequence_length=128)
    earlier = {"worker_cpu_hours": 0.5, "instance_hours": 2.0, "worker_hosts": 3.0, "runs": 1.0}
    work = Work(records=30, bytes_in=2_000_000_000, cpu_seconds=1800.0, output_tokens=3000)
    cost = job_cost(this_run, earlier, work, 128, 2.0)
    assert cost["runs"] == 2 and cost["worker_hosts"] == 3
    assert cost["worker_cpu_hours"] == pytest.approx(0.6) and cost["instance_hours"] == pytest.approx(3.0)
    assert cost["input_gb"] == 2.0 and cost["output_tokens"] == 30 * 128
    assert cost["output_tokens_without_padding"] == 3000
    assert cost["cost"] == pytest.approx(6.0) and cost["cost_per_input_gb"] == pytest.approx(3.0)
    assert job_cost(this_run, {**earlier, "cost": 1.0}, work, 128, 2.0)["cost"] == pytest.approx(3.0)
    first = job_cost(this_run, None, work, None, None)
    assert first["runs"] == 1 and first["cost"] is None and first["output_tokens"] is None


def test_an_earlier_summary_is_read_only_for_the_same_job_and_its_numbers_checked(tmp_path):
    import json

    from common.storage import LocalStorage
    from sink.cost import earlier_cost

    storage = LocalStorage(str(tmp_path))
    assert earlier_cost(storage, "j") is None
    storage.put_bytes("summary.json", json.dumps({"job": "other", "cost": {"instance_hours": 1}}).encode())
    assert earlier_cost(storage, "j") is None
    storage.put_bytes("summary.json", b'{"job": "j", "cost": {"instance_hours": 1e999, "worker_cpu_hours": -1, '
                                      b'"cost": true, "runs": 2, "worker_hosts": 4}}')
    assert earlier_cost(storage, "j") == {"runs": 2.0, "worker_hosts": 4.0}
    storage.put_bytes("summary.json", b"not json")
    assert earlier_cost(storage, "j") is None
