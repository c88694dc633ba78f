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


#: The packages the roles' processes import (tests/conftest.py compiles the same before the suite).
PACKAGES = ("mlm_pipeline", "common", "ventilator", "worker", "sink", "loader", "report", "bench")


def compile_project() -> None:
    """Bytecode for every module the roles import, written before any measured run.  With PYTHONDONTWRITEBYTECODE
    set (this project's development machine) and no current ``__pycache__`` (a new checkout or worktree, or a
    module changed since), every process compiles each module it imports from source: ~0.5 CPU-s a role, which a
    one-document run counts as the job's fixed cost, or not, depending on the tree's state.  Bytecode in
    ``__pycache__`` is read whatever that variable says."""
    import compileall

    for package in PACKAGES:
        compileall.compile_dir(REPO / package, quiet=2, workers=1)

#: Where free_ports looks: below the kernel's ephemeral range (``ip_local_port_range``, 32768-60999 by default),
#: from which it gives every outgoing connection and every bind to port 0 its port.  A port found free there and
#: closed again until a role binds it could be taken meanwhile by any connection of the run (the suite makes
#: thousands, on three xdist workers); below the range only another free_ports can take it.  Each pytest-xdist
#: worker has a block of its own, and each process starts at a random place in its block.
_PORTS_LOW = 10_000
_BLOCKS = 8


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # the kernel's default


class _PortCursor:
    """The next port this process tries, in its xdist worker's block (the ports below the ephemeral range)."""

    def __init__(self) -> None:
        import random

        high = _ephemeral_low()
        self.usable = high - _PORTS_LOW >= 8 * _BLOCKS  # else the range was set low: fall back to bind(0)
        size = max((high - _PORTS_LOW) // _BLOCKS, 1)
        worker = os.environ.get("PYTEST_XDIST_WORKER", "")
        index = int(worker[2:]) if worker[:2] == "gw" and worker[2:].isdigit() else random.randrange(_BLOCKS)
        self.start = _PORTS_LOW + (index % _BLOCKS) * size
        self.size = size
        self.offset = random.randrange(size)
        self.lock = threading.Lock()

    def take(self) -> int:
        with self.lock:
            port = self.start + self.offset
            self.offset = (self.offset + 1) % self.size
            return port


_cursor: _PortCursor | None = None


def free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports free now, for roles started next to bind (see ``_PORTS_LOW``)."""
    global _cursor
    if _cursor is None:
        _cursor = _PortCursor()
    sockets: list[socket.socket] = []
    ports: list[int] = []
    try:
        for _ in range(20 * count + 100):
            if len(ports) == count:
                break
            s = socket.socket()
            sockets.append(s)
            try:
                s.bind(("127.0.0.1", _cursor.take() if _cursor.usable else 0))
            except OSError:  # in use
                continue
            ports.append(s.getsockname()[1])
        if len(ports) < count:
            raise OSError(f"no {count} free ports found between {_PORTS_LOW} and the ephemeral range")
    finally:
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
