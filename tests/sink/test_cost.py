"""The sink's cost accounting, apart from sockets."""

import pytest

from common.protocol import AckStats
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
