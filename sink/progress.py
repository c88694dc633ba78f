"""Live throughput over a sliding window, overall and per worker.

Read by the sink's loop (log lines) and by the metrics thread (scrapes), so
every access holds the lock.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict, deque

from common import kernels
from common.wire.protocol import AckStats

_FIELDS = ("documents", "tokens", "instances", "bytes_in")


class Throughput:
    def __init__(self, window_seconds: float = 30.0):
        self.window = window_seconds
        self._events: deque[tuple[float, str, tuple]] = deque()
        self._lock = threading.Lock()
        self.totals = dict.fromkeys(_FIELDS, 0)
        self.timer_seconds: dict[str, float] = defaultdict(float)  # workers' time per timer (TaskStats.timed), summed
        self.tasks = 0
        self.started = time.monotonic()
        #: worker -> kernels ("compiled", "numpy") -> its tasks this run (the task counters kernels.COUNTER)
        self.kernels: dict[str, Counter[str]] = defaultdict(Counter)

    def add(self, worker: str, stats: AckStats, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        values = tuple(getattr(stats, name) for name in _FIELDS)
        with self._lock:
            self._events.append((now, worker, values))
            for name, value in zip(_FIELDS, values):
                self.totals[name] += value
            for stage, value in stats.seconds.items():
                self.timer_seconds[stage] += value
            for ran, tasks in stats.counters.get(kernels.COUNTER, {}).items():
                if ran in (kernels.COMPILED, kernels.NUMPY):  # nothing else is a kernels' name
                    self.kernels[worker][ran] += tasks
            self.tasks += 1

    def rates(self, now: float | None = None) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
        """Per-second rates over the window: overall, and per worker."""
        now = time.monotonic() if now is None else now
        with self._lock:
            while self._events and self._events[0][0] < now - self.window:
                self._events.popleft()
            events = list(self._events)
        span = max(min(self.window, now - self.started), 1e-9)
        overall = dict.fromkeys(_FIELDS, 0.0)
        per_worker: dict[str, dict[str, float]] = defaultdict(lambda: dict.fromkeys(_FIELDS, 0.0))
        for _, worker, values in events:
            for name, value in zip(_FIELDS, values):
                overall[name] += value / span
                per_worker[worker][name] += value / span
        return overall, dict(per_worker)

    def kernels_by_worker(self) -> dict[str, dict[str, int]]:
        """Which kernels each worker ran this run: worker -> kernels -> tasks."""
        with self._lock:
            return {worker: dict(sorted(counts.items())) for worker, counts in sorted(self.kernels.items())}

    def snapshot(self) -> tuple[int, dict[str, int], dict[str, float]]:
        """Tasks, totals and stage seconds, consistent with each other."""
        with self._lock:
            return self.tasks, dict(self.totals), dict(self.timer_seconds)

    def line(self, now: float | None = None) -> str:
        overall, per_worker = self.rates(now)
        # Worker ids are worker-HOST-PID-RANDOM: show HOST-PID.
        workers = ", ".join(f"{name.removeprefix('worker-').rsplit('-', 1)[0]} {rates['documents']:.0f} doc/s "
                            f"{rates['bytes_in'] / 1e6:.2f} MB/s" for name, rates in sorted(per_worker.items()))
        return (f"throughput: {overall['documents']:.0f} documents/s, {overall['tokens']:.0f} tokens/s, "
                f"{overall['instances']:.0f} instances/s, {overall['bytes_in'] / 1e6:.2f} MB/s in; "
                f"{self.tasks} tasks acknowledged; per worker: {workers or '-'}")
