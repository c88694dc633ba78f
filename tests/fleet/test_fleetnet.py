"""The test hosts' own housekeeping (tests/fleet/fleetnet.py): what a crashed run leaves is removed by the next.
The multi-host job over those hosts is tests/fleet/fleet_netns.py, run by scripts/fleet-installs.sh."""

from __future__ import annotations

import subprocess

import pytest

from tests.fleet import fleetnet

pytestmark = pytest.mark.fleet


def test_leftovers_of_a_dead_run_are_cleaned(tmp_path):
    """A fleet whose owner died (a crashed test run) is removed by the next run's cleanup."""
    problem = fleetnet.preflight()
    if problem:
        pytest.skip(f"cannot create test hosts: {problem}")
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = fleetnet.up(str(tmp_path / "stale"), 2, owner_pid=dead.pid)
    try:
        assert stale.hosts[0].netns in fleetnet.list_netns()
        with fleetnet.registry_lock():
            removed = fleetnet.cleanup()
        assert stale.tag in removed
        assert not [n for n in fleetnet.list_netns() if n.startswith(stale.tag)]
        assert stale.bridge not in fleetnet.list_bridges()
    finally:
        fleetnet.down(str(tmp_path / "stale"))
