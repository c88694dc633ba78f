"""A run stopped while its job is planned keeps the output's lock until the plan has ended: the plan writes to the
output (dedup's plan file), and once the lock is released another job may write there."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from common.output.lock import LOCK_NAME, Holder
from common.steps.dedup.stages import PLAN_NAME
from tests.support.helpers import REPO, VOCAB, WIKI, free_ports, need_shared

#: The ventilator's command (its own process: it sets the signal handlers), its plan held: it says it started
#: (argv[1] made), waits for argv[2] (at most 120 s), then writes to the output what a plan writes, noting whether
#: the output's lock was held then.  The rest of argv is the command's.
HELD_PLAN = """
import os, sys, time
from common.output.lock import LOCK_NAME
from ventilator import cli
started, go = sys.argv[1], sys.argv[2]
if os.environ.get("RENEW_SECONDS"):  # the output lock's renewal, which finds a lock taken over, sooner
    from common.output import lock
    lock.OutputLock.__init__.__defaults__ = (lock.LEASE_SECONDS, float(os.environ["RENEW_SECONDS"]), time.time)
plan = cli.plan
def held(run, checked, job_config):
    open(started, "w").close()
    deadline = time.monotonic() + 120
    while not os.path.exists(go) and time.monotonic() < deadline:
        time.sleep(0.05)
    output = run.job.output
    held = os.path.exists(os.path.join(output, LOCK_NAME))
    with open(os.path.join(output, "written-by-the-plan"), "w") as file:
        file.write(f"lock held: {held}")
    return plan(run, checked, job_config)
cli.plan = held
sys.argv = ["ventilator", *sys.argv[3:]]
cli.main()
"""

WAITING = "waiting for the plan to end before the output is released"


def start(tmp_path: Path, *job: str, env: dict[str, str] | None = None
          ) -> tuple[subprocess.Popen, Path, Path, Path]:
    need_shared()
    output, started, go = tmp_path / "out", tmp_path / "started", tmp_path / "go"
    vport, sink_port = free_ports(2)
    process = subprocess.Popen([
        sys.executable, "-c", HELD_PLAN, str(started), str(go),
        "--data", str(WIKI), "--output", str(output), "--vocab-file", str(VOCAB), "--workers", "0",
        "--vport", str(vport), "--sink-port", str(sink_port), "--bind-host", "127.0.0.1", "--no-progress",
        "--state-dir", str(tmp_path / "state"), *job],
        cwd=REPO, stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})
    deadline = time.monotonic() + 120
    while not started.exists():
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()[1][-3000:]
        time.sleep(0.05)
    return process, output, started, go


def stderr_until(process: subprocess.Popen, needle: str) -> str:
    """What the process writes to stderr up to a line with ``needle`` (all of it, if it exits first)."""
    assert process.stderr is not None
    seen = []
    for line in process.stderr:
        seen.append(line)
        if needle in line:
            break
    return "".join(seen)


def test_a_run_interrupted_while_planned_releases_the_output_only_after_the_plan(tmp_path):
    """Ctrl-C while a dedup job's plan runs: the ventilator says it waits, the plan ends and writes (dedup's plan
    file, after what the held plan writes) with the lock still held, then the run exits as interrupted and the
    lock is gone."""
    process, output, _, go = start(tmp_path, "--dedup", "exact", "--dedup-partitions", "2")
    try:
        process.send_signal(signal.SIGINT)
        said = stderr_until(process, WAITING)
        assert WAITING in said, said[-3000:]
        assert process.poll() is None and (output / LOCK_NAME).exists()
        go.touch()
        rest = process.communicate(timeout=120)[1]
    finally:
        process.kill()
    assert process.returncode == 130, (said + rest)[-3000:]
    assert (output / "written-by-the-plan").read_text() == "lock held: True"
    assert (output / PLAN_NAME).stat().st_size > 0  # the real plan's write, done before the run ended
    assert not (output / LOCK_NAME).exists()
    assert "it may still write" not in rest


def test_a_second_ctrl_c_stops_waiting_for_the_plan(tmp_path):
    """A plan that does not end (here: held) does not hold the run: a second Ctrl-C ends the wait, with a warning
    that the plan may still write."""
    process, output, _, _ = start(tmp_path)
    try:
        process.send_signal(signal.SIGINT)
        said = stderr_until(process, WAITING)
        assert WAITING in said, said[-3000:]
        process.send_signal(signal.SIGINT)
        rest = process.communicate(timeout=120)[1]
    finally:
        process.kill()
    assert process.returncode == 130, (said + rest)[-3000:]
    assert "stopped before the plan ended; it may still write to the output" in rest
    assert not (output / "written-by-the-plan").exists()


@pytest.mark.parametrize("interrupted", [False, True], ids=["while-planned", "while-waiting-for-the-plan"])
def test_a_run_whose_lock_was_taken_over_during_the_plan_does_not_wait_for_it(tmp_path, interrupted):
    """Another run took the output over (this run's lease lapsed) while the plan ran, or while a run stopped by
    Ctrl-C waited for it: the output is that run's now, so this run stops without waiting to let its plan write
    there, exits 1 with that reason (not 130's "run the same command to resume"), and leaves the other run's lock
    as it is."""
    process, output, _, _ = start(tmp_path, "--dedup", "exact", env={"RENEW_SECONDS": "0.2"})
    try:
        if interrupted:
            process.send_signal(signal.SIGINT)
            said = stderr_until(process, WAITING)
            assert WAITING in said, said[-3000:]
        ours = Holder.decode((output / LOCK_NAME).read_bytes())
        theirs = Holder("another-host", 4242, ours.job, "their-token", "", ours.started, ours.expires + 600)
        deadline = time.monotonic() + 60
        while process.poll() is None and time.monotonic() < deadline:
            # written again if a renewal read the lock just before and wrote ours back after (not atomic)
            if Holder.decode((output / LOCK_NAME).read_bytes()).token != theirs.token:
                (output / LOCK_NAME).write_bytes(theirs.encode())
            time.sleep(0.05)
        rest = process.communicate(timeout=60)[1]
    finally:
        process.kill()
    assert process.returncode == 1, rest[-3000:]
    assert "was taken by another run" in rest and "not waiting for the plan" in rest, rest[-3000:]
    assert WAITING not in rest and "it may still write" not in rest
    assert Holder.decode((output / LOCK_NAME).read_bytes()).token == "their-token"
    assert not (output / "written-by-the-plan").exists()
