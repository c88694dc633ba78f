"""``kill -9`` of ``python -m worker --processes 2`` left its compute processes running for good (seen 40
minutes later at 110-150 MB each).  Now they drain and exit with their supervisor (PR_SET_PDEATHSIG, and a
parent-pid check where that is missing)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests.support.helpers import REPO, VOCAB, WIKI, free_ports, need_shared

pytestmark = pytest.mark.e2e


def _wait(condition, timeout: float, what: str, tail) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} within {timeout:.0f} s:\n{tail()}"
        time.sleep(0.2)


def _alive(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE  # exited, not yet reaped by its new parent
    except psutil.NoSuchProcess:
        return False


def test_compute_processes_die_with_their_supervisor(tmp_path):
    need_shared()
    vport, absent_sink = free_ports(2)
    # A real ventilator whose sink never comes: it welcomes the workers and serves their heartbeats, and the
    # job stays open for as long as the test needs.
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    ventilator = subprocess.Popen(
        [sys.executable, "-m", "ventilator", "--data", str(WIKI), "--output", str(tmp_path / "out"), "--vport",
         str(vport), "--bind-host", "127.0.0.1", "--sink", f"127.0.0.1:{absent_sink}", "--vocab-file", str(VOCAB),
         "--workers", "0", "--heartbeat-seconds", "1"], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    log = tmp_path / "worker.log"
    with open(log, "w") as handle:
        supervisor = subprocess.Popen([sys.executable, "-m", "worker", "--ventilator", f"127.0.0.1:{vport}",
                                       "--processes", "2"], cwd=REPO, env=env, stdout=handle, stderr=subprocess.STDOUT)
    try:
        # Both compute processes have the job: each says so once it is past its start.
        _wait(lambda: log.read_text().count("writing to") == 2, 180, "two compute processes with the job",
              log.read_text)
        children = psutil.Process(supervisor.pid).children()
        assert len(children) >= 2
        workers = [c for c in children if "spawn" in " ".join(c.cmdline())]
        assert len(workers) == 2, [c.cmdline() for c in children]
        supervisor.send_signal(signal.SIGKILL)
        supervisor.wait(timeout=30)
        _wait(lambda: not any(map(_alive, workers)), 120,
              "the compute processes exit after their supervisor's kill -9", log.read_text)
        assert "draining" in log.read_text()
    finally:
        for process in (supervisor, ventilator):
            process.kill()
            process.wait()
        for child in workers if "workers" in locals() else []:  # left running by a failed run
            try:
                child.kill()
            except psutil.Error:
                pass
