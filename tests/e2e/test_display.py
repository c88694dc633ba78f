"""The one-machine command on a terminal: a progress bar, with the sink's and
workers' log lines relayed above it; plain log lines when not a terminal."""

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time

import pytest

from tests.support.helpers import REPO, VOCAB, WIKI, free_ports, manifest, need_shared, run_ventilator

pytestmark = pytest.mark.e2e

JOB = ["--vocab-file", VOCAB, "--dupe-factor", "1", "--task-size", "256K", "--workers", "2"]
BAR = "━"


def run_on_a_terminal(args: list, timeout: float = 300) -> tuple[int, str]:
    """Run ``args`` with stdin/stdout/stderr on a pseudo-terminal; its exit
    status and what it printed, escape sequences removed."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 160, 0, 0))
    process = subprocess.Popen([str(a) for a in args], stdin=slave, stdout=slave, stderr=slave, cwd=REPO,
                               env={**os.environ, "TERM": "xterm-256color"})
    os.close(slave)
    output = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the terminal closed: every process is gone
                    break
                if not chunk:
                    break
                output += chunk
            elif process.poll() is not None:
                break
        code = process.wait(timeout=30)
    finally:
        os.close(master)
        if process.poll() is None:
            process.kill()
    return code, re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", output.decode(errors="replace"))


def test_progress_bar_on_a_terminal(tmp_path):
    need_shared()
    output = tmp_path / "out"
    vport, sink_port = free_ports(2)
    code, text = run_on_a_terminal([
        sys.executable, "-m", "ventilator", "--data", WIKI, "--output", output, "--vport", vport,
        "--sink-port", sink_port, "--bind-host", "127.0.0.1", "--state-dir", tmp_path / "state", *JOB])
    assert code == 0, text[-3000:]
    tasks = len(manifest(output))
    assert f"{BAR} {tasks}/{tasks} 100%" in text, text[-3000:]  # the bar, finished
    assert "worker: worker-" in text and "sink: sink: job finished" in text  # children's lines, relayed
    assert text.rstrip().endswith("ventilator: done: all tasks done")


def test_no_bar_when_not_a_terminal(tmp_path):
    need_shared()
    result = run_ventilator(WIKI, tmp_path / "out", *JOB)
    assert result.returncode == 0, result.stderr[-3000:]
    assert BAR not in result.stderr and "ventilator: progress:" in result.stderr
    forced = run_ventilator(WIKI, tmp_path / "forced", *JOB, "--progress")
    assert forced.returncode == 0 and f"{BAR}" in forced.stderr


def test_local_processes_output_goes_through_the_relay():
    """What the display shows of the sink and workers: their lines, through
    the relay, even when showing one fails."""
    from ventilator.launchers import Role
    from ventilator.launchers.local import LocalLauncher

    lines = []

    def relay(line: str) -> None:
        if "--ventilator" in line and not lines:
            raise RuntimeError("a display that fails once")
        lines.append(line)

    fleet = LocalLauncher(relay=relay)
    fleet.start(Role("worker-help", "worker", ("--help",)))
    assert fleet.wait(timeout=60) == {"worker-help": 0}
    assert any(line.startswith("Usage:") for line in lines)
    assert any("--idle-exit-seconds" in line for line in lines)
