"""The worker supervisor (``--processes N``) under a drain that arrives while it restarts a crashed process.

A shutdown script's SIGUSR1 (terraform/gcp) or systemd's SIGTERM can come at any moment, also while the
supervisor waits to replace a process that died.  No process may be started after the drain began, and one
started just as it began must drain too: otherwise it takes tasks the VM cannot finish, and the supervisor
waits for it until systemd kills everything.  Real processes, no ventilator (the workers wait for one)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from bench.procs import free_ports
from tests.support.helpers import REPO

#: A restart delay no test waits out: a supervisor that sleeps through it fails the test.
LONG_DELAY = 600


def _children(pid: int) -> list[int]:
    """The worker processes a supervisor spawned."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                spawned = b"spawn_main" in cmdline.read()  # a worker process, not multiprocessing's resource tracker
        except OSError:
            continue
        if int(fields[1]) == pid and spawned:
            found.append(int(entry))
    return found


def _wait_for(condition, within: float, what: str):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"not within {within:.0f}s: {what}")


@pytest.mark.parametrize("drain", [signal.SIGUSR1, signal.SIGTERM])
def test_a_drain_during_a_restart_starts_no_process_and_ends_the_supervisor(drain):
    (port,) = free_ports(1)
    script = (f"import sys, worker.cli as cli; cli.RESTART_DELAY_SECONDS = {LONG_DELAY}; "
              f"sys.argv = ['worker', '--ventilator', '127.0.0.1:{port}', '--processes', '2']; cli.main()")
    supervisor = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stderr=subprocess.PIPE, text=True,
                                  env={**os.environ, "PYTHONPATH": str(REPO)})
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(supervisor.stderr), daemon=True).start()
    try:
        first, _second = _wait_for(lambda: sorted(_children(supervisor.pid)) if len(_children(supervisor.pid)) == 2
                                   else None, 60, "two worker processes")
        os.kill(first, signal.SIGKILL)
        _wait_for(lambda: any("starting another in" in line for line in lines), 30, "the restart announced")
        supervisor.send_signal(drain)
        try:
            code = supervisor.wait(timeout=45)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{drain.name} during a restart: the supervisor did not end (it starts a process "
                                 "after the drain began, or sleeps through it)\n" + "".join(lines)) from None
        assert code == 0, "".join(lines)
        assert not _children(supervisor.pid)
    finally:
        for pid in _children(supervisor.pid):
            os.kill(pid, signal.SIGKILL)
        supervisor.kill()
        supervisor.wait()


def test_a_process_started_after_the_notice_drains_at_once():
    """The supervisor's notice is in shared memory before any signal: a process that starts (or installs its
    handler) after the SIGUSR1 was sent still sees it, and exits 0 instead of taking tasks."""
    from worker.cli import _run_one
    from worker.runtime import WorkerOptions

    (port,) = free_ports(1)
    context = multiprocessing.get_context("spawn")
    release_at = context.Value("d", time.time() + 300)
    process = context.Process(target=_run_one, args=(WorkerOptions(ventilator=f"127.0.0.1:{port}"), 0, release_at))
    process.start()
    process.join(timeout=30)
    if process.is_alive():
        process.kill()
        process.join()
        raise AssertionError("a worker process started after the notice did not drain")
    assert process.exitcode == 0
