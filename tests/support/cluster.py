"""A pipeline made of separately started processes, for fault injection:
each role can be killed, signalled and started again with the same command."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support.helpers import REPO, free_ports

#: Short intervals, so expiries and redeliveries happen within seconds.
FAST_LEASES = ["--lease-seconds", "3", "--heartbeat-seconds", "0.5", "--confirm-seconds", "5"]


class Cluster:
    def __init__(self, data, output, job_args: list, workdir: Path, env: dict | None = None, curve_dir=None):
        self.data, self.output, self.job_args = data, output, [str(a) for a in job_args]
        self.workdir = Path(workdir)
        self.env = {**os.environ, **(env or {})}
        self.vport, self.sink_port = free_ports(2)
        self.curve = ["--curve-dir", str(curve_dir)] if curve_dir else []
        self.ventilator: subprocess.Popen | None = None
        self.sink: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen] = []
        self.logs: list[Path] = []
        self.exited_workers: list[int] = []

    def _start(self, name: str, module: str, args: list) -> subprocess.Popen:
        log = self.workdir / f"{name}-{len(self.logs)}.log"
        self.logs.append(log)
        handle = open(log, "w")
        return subprocess.Popen([sys.executable, "-m", module, *map(str, args)], cwd=REPO, env=self.env,
                                stdout=handle, stderr=subprocess.STDOUT)

    def start_ventilator(self) -> None:
        self.ventilator = self._start("ventilator", "ventilator", [
            "--data", self.data, "--output", self.output, "--vport", self.vport, "--bind-host", "127.0.0.1",
            "--sink", f"127.0.0.1:{self.sink_port}", "--report-seconds", "2", *FAST_LEASES, *self.curve,
            *self.job_args])

    def start_sink(self, *extra) -> None:
        self.sink = self._start("sink", "sink", [
            "--ventilator", f"127.0.0.1:{self.vport}", "--port", self.sink_port, "--bind-host", "127.0.0.1",
            "--state-dir", self.workdir / "state", "--publish-seconds", "1", *self.curve, *extra])

    def start_worker(self, *extra) -> subprocess.Popen:
        worker = self._start("worker", "worker", ["--ventilator", f"127.0.0.1:{self.vport}", "--processes", "1",
                                                  *self.curve, *extra])
        self.workers.append(worker)
        return worker

    def start(self, workers: int) -> Cluster:
        self.start_sink()
        for _ in range(workers):
            self.start_worker()
        self.start_ventilator()
        return self

    def live_workers(self) -> list[subprocess.Popen]:
        return [w for w in self.workers if w.poll() is None]

    def kill(self, process: subprocess.Popen, sig=signal.SIGKILL) -> None:
        process.send_signal(sig)
        process.wait(timeout=120)

    def progress(self) -> int:
        """Tasks in the manifest (for an object store's output: in the sink's journal)."""
        if "://" in str(self.output):
            journals = list((self.workdir / "state").glob("*/manifest.jsonl"))
            return len(journals[0].read_text().splitlines()) if journals else 0
        manifest = Path(self.output) / "manifest.jsonl"
        return len(manifest.read_text().splitlines()) if manifest.exists() else 0

    def wait_for_progress(self, tasks: int, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while self.progress() < tasks:
            assert time.monotonic() < deadline, f"no progress to {tasks} tasks: {self.tail()}"
            assert self.ventilator is None or self.ventilator.poll() is None, self.tail()
            time.sleep(0.05)

    def wait(self, timeout: float = 300, others_timeout: float = 180) -> int:
        """The ventilator's exit status; every other process must exit 0 too.  ``others_timeout`` is generous:
        a worker started near the job's end (a replacement) on a loaded machine may spend most of a minute
        importing before its --idle-exit-seconds even start."""
        code = self.ventilator.wait(timeout=timeout)
        for process in [self.sink, *self.workers]:
            if process is not None and process.returncode is None:
                process.wait(timeout=others_timeout)
        return code

    def tail(self, lines: int = 40) -> str:
        return "\n".join(f"== {log.name}\n" + "\n".join(log.read_text().splitlines()[-lines:]) for log in self.logs)

    def log_text(self) -> str:
        return "\n".join(log.read_text() for log in self.logs)

    def close(self) -> None:
        for process in [self.ventilator, self.sink, *self.workers]:
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
