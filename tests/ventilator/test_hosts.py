"""ventilator/hosts.py: each worker host's billed span, from boot or Hello to the last word heard."""

import pytest

from ventilator.hosts import HostLedger


def test_a_host_booted_during_the_job_is_billed_from_its_boot():
    ledger = HostLedger(started=1000.0)
    ledger.joined("a", booted_at=1010.0, now=1100.0)
    ledger.heard("a", 1500.0)
    assert ledger.message_parts() == [{"a": [1010.0, 1500.0]}]


@pytest.mark.parametrize("booted_at", [0.0, 500.0, 2000.0])  # unknown, before the job, after the Hello (a bad clock)
def test_otherwise_from_its_first_hello(booted_at):
    ledger = HostLedger(started=1000.0)
    ledger.joined("a", booted_at=booted_at, now=1100.0)
    ledger.joined("a", booted_at=booted_at, now=1200.0)  # a second process on the same host
    ledger.heard("a", 1150.0)  # an earlier time heard late changes nothing
    assert ledger.message_parts() == [{"a": [1100.0, 1200.0]}]


def test_a_host_never_introduced_is_not_billed_and_parts_are_bounded():
    ledger = HostLedger(started=0.0)
    ledger.heard("stranger", 5.0)
    assert ledger.message_parts() == []
    for index in range(12):
        ledger.joined(f"h{index}", booted_at=0.0, now=1.0)
    parts = ledger.message_parts(per_message=5)
    assert [len(part) for part in parts] == [5, 5, 2]
    assert set().union(*parts) == {f"h{index}" for index in range(12)}
