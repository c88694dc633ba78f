"""The test hosts' own housekeeping (tests/fleet/fleetnet.py): what a crashed run leaves is removed by the next.
The multi-host job over those hosts is tests/fleet/fleet_netns.py, run by scripts/fleet-installs.sh."""

from __future__ import annotations

import subprocess
from pathlib import Path

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


def test_ci_runs_the_install_heavy_fleet_checks_apart_from_the_suite():
    """The multi-host job and the Google Cloud boots are not collected by `python -m pytest` (no test_ prefix):
    .ci/run runs them with scripts/fleet-installs.sh before the suite, and that step fails on a skip."""
    import re

    from tests.support.helpers import REPO

    ci = (REPO / ".ci" / "run").read_text().splitlines()
    (step,) = [i for i, line in enumerate(ci) if line == "bash scripts/fleet-installs.sh"]
    assert step < len(ci) - 1 and ci[-1] == "python -m pytest"
    script = (REPO / "scripts" / "fleet-installs.sh").read_text()
    files = re.findall(r"tests/fleet/\w+\.py", script.split("set -euo pipefail", 1)[1])
    assert sorted(set(files)) == ["tests/fleet/fleet_gcp_boot.py", "tests/fleet/fleet_netns.py"], files
    assert all((REPO / name).is_file() and not Path(name).name.startswith("test_") for name in files)
    assert "passed in " in script, "the step checks that every test passed: a skip is not a pass"
    assert not list((REPO / "tests" / "fleet").glob("test_fleet_netns.py")), "moved to fleet_netns.py"
