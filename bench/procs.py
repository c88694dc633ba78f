"""Starting the real roles as processes, and watching their CPU and memory.

Every process the benchmark starts is a child of it, started here, and
ended here by its own pid if it outlives its run.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]


def free_ports(count: int) -> list[int]:
    sockets, ports = [], []
    for _ in range(count):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        sockets.append(s)
        ports.append(s.getsockname()[1])
    for s in sockets:
        s.close()
    return ports


def start_module(module: str, *args, log: Path | None = None, stdout: Path | None = None) -> subprocess.Popen:
    """``python -m module args`` from the repository; output to ``log`` (or
    discarded), or standard output alone to ``stdout`` and errors to ``log``."""
    err = open(log, "ab") if log else subprocess.DEVNULL
    out = open(stdout, "wb") if stdout else None
    try:
        return subprocess.Popen([sys.executable, "-m", module, *map(str, args)], cwd=REPO,
                                stdout=out or err, stderr=err if out else subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    finally:
        for handle in (err, out):
            if handle is not None and not isinstance(handle, int):  # an opened file, not DEVNULL
                handle.close()


def stop(processes: list[subprocess.Popen], timeout: float = 10.0) -> None:
    """Wait for our children; terminate, then kill, the ones still running."""
    deadline = time.monotonic() + timeout
    for process in processes:
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_all(processes: list[subprocess.Popen], timeout: float, what: str, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    for process in processes:
        remaining = deadline - time.monotonic()
        try:
            process.wait(timeout=max(0.1, remaining))
        except subprocess.TimeoutExpired:
            stop(processes, timeout=0)
            tail = log.read_text(errors="replace")[-3000:] if log and log.exists() else ""
            raise RuntimeError(f"{what}: still running after {timeout:.0f}s\n{tail}") from None
    bad = [p.returncode for p in processes if p.returncode not in (0,)]
    if bad:
        tail = log.read_text(errors="replace")[-3000:] if log and log.exists() else ""
        raise RuntimeError(f"{what}: exit status {bad}\n{tail}")


def vm_hwm(pid: int) -> int:
    """Peak resident set (VmHWM) of a live process, in bytes; 0 if gone."""
    try:
        with open(f"/proc/{pid}/status", "rb") as handle:
            for line in handle:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def role_of(cmdline: list[str]) -> str | None:
    """Which role a process of the pipeline plays, from its command line."""
    text = " ".join(cmdline)
    if "resource_tracker" in text:
        return None
    if "spawn_main" in text:
        return "worker"  # a worker process of `python -m worker --processes N`
    for module in ("ventilator", "sink", "bench.null_worker", "bench.flood"):
        if f"-m {module}" in text:
            return module
    if "-m worker" in text:
        return "worker" if "--processes 1" in text else "worker supervisor"
    return None


@dataclass
class _Watched:
    process: psutil.Process
    role: str
    hwm: int = 0
    cpu: list[tuple[float, float]] = field(default_factory=list)  # (monotonic, user+system seconds)


class Watcher:
    """Samples peak RSS (VmHWM) and CPU time of processes and their
    descendants in a background thread.

    VmHWM is the kernel's own high-water mark, so a peak between two
    samples is not missed (only the memory of a process's very last
    moments after the last sample is).
    """

    def __init__(self, interval: float = 0.02, tree_every: float = 0.5):
        self.interval = interval
        self.tree_every = tree_every
        self.watched: dict[int, _Watched] = {}
        self.roots: list[int] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="watcher", daemon=True)

    def add(self, pid: int, role: str | None = None, tree: bool = False) -> None:
        with self._lock:
            self._track(pid, role)
            if tree:
                self.roots.append(pid)

    def _track(self, pid: int, role: str | None) -> None:
        if pid in self.watched:
            return
        try:
            process = psutil.Process(pid)
            role = role or role_of(process.cmdline())
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return
        if role:
            self.watched[pid] = _Watched(process, role)

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        last_tree = 0.0
        while not self._stop.is_set():
            now = time.monotonic()
            if self.roots and now - last_tree > self.tree_every:
                last_tree = now
                for root in list(self.roots):
                    try:
                        children = psutil.Process(root).children(recursive=True)
                    except psutil.NoSuchProcess:
                        continue
                    with self._lock:
                        for child in children:
                            self._track(child.pid, None)
            with self._lock:
                items = list(self.watched.items())
            for pid, watched in items:
                hwm = vm_hwm(pid)
                if hwm:
                    watched.hwm = max(watched.hwm, hwm)
                try:
                    times = watched.process.cpu_times()
                    watched.cpu.append((time.monotonic(), times.user + times.system))
                except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                    pass
            self._stop.wait(self.interval)

    def peak_rss(self, role: str) -> int:
        return max((w.hwm for w in self.watched.values() if w.role == role), default=0)

    def processes(self, role: str) -> list[_Watched]:
        return [w for w in self.watched.values() if w.role == role]

    def cpu_at(self, pid: int, moment: float) -> float:
        """CPU seconds of ``pid`` at monotonic time ``moment``, interpolated between samples."""
        samples = self.watched[pid].cpu
        if not samples:
            return 0.0
        if moment <= samples[0][0]:
            return samples[0][1]
        for (t0, c0), (t1, c1) in zip(samples, samples[1:]):
            if t0 <= moment <= t1:
                return c0 + (c1 - c0) * (moment - t0) / max(t1 - t0, 1e-9)
        return samples[-1][1]

    def cpu_total(self, pid: int) -> float:
        samples = self.watched[pid].cpu
        return samples[-1][1] if samples else 0.0
