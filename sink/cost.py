"""What a run cost: worker CPU-hours, instance-hours and, given a price, dollars.

CPU-hours are the workers' own measure (each acknowledgement's
``stats.cpu_seconds``).  Instance-hours are seen from here: for each worker
host, from the start of its first task this sink heard of (the ack's time
less that task's wall time) to its last acknowledgement.  That is a lower
bound of the bill (boot, package installation and the idle tail before a
scale-in are not seen); docs/fleet.md says how close it comes.  With
``--instance-hourly-price`` (USD per instance-hour, e.g. the spot price of
the workers' type) it becomes the job's cost, per billion output tokens
(records x sequence length: the positions training reads) and per input GB.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from common.protocol import AckStats


def worker_host(worker_id: str) -> str:
    """worker-HOST-PID-RANDOM (common.transport.new_identity) -> HOST."""
    return worker_id.removeprefix("worker-").rsplit("-", 2)[0]


@dataclass
class _Host:
    first: float
    last: float


@dataclass
class CostLedger:
    hourly_price: float | None = None  # USD per worker instance-hour
    cpu_seconds: float = 0.0
    bytes_in: int = 0
    records: int = 0
    hosts: dict[str, _Host] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, worker_id: str, stats: AckStats, records: int, now: float | None = None) -> None:
        now = time.time() if now is None else now
        started = now - sum(stats.seconds.values())
        with self._lock:
            self.cpu_seconds += stats.cpu_seconds
            self.bytes_in += stats.bytes_in
            self.records += records
            host = self.hosts.get(worker_host(worker_id))
            if host is None:
                self.hosts[worker_host(worker_id)] = _Host(started, now)
            else:
                host.first, host.last = min(host.first, started), max(host.last, now)

    def summary(self, sequence_length: int | None) -> dict:
        with self._lock:
            instance_hours = sum(h.last - h.first for h in self.hosts.values()) / 3600
            result = {
                "worker_cpu_hours": round(self.cpu_seconds / 3600, 9),
                "instance_hours": round(instance_hours, 9),
                "worker_hosts": len(self.hosts),
                "input_gb": round(self.bytes_in / 1e9, 9),
                "output_tokens": self.records * sequence_length if sequence_length else None,
                "instance_hourly_price": self.hourly_price,
                "cost": None, "cost_per_billion_output_tokens": None, "cost_per_input_gb": None,
            }
        if self.hourly_price is not None:
            cost = instance_hours * self.hourly_price
            result["cost"] = round(cost, 9)
            if result["output_tokens"]:
                result["cost_per_billion_output_tokens"] = round(cost / (result["output_tokens"] / 1e9), 6)
            if self.bytes_in:
                result["cost_per_input_gb"] = round(cost / (self.bytes_in / 1e9), 6)
        return result


def describe(summary: dict) -> str:
    """The final log line's cost part."""
    text = (f"{summary['worker_cpu_hours']:.3f} worker CPU-hours, {summary['instance_hours']:.3f} instance-hours "
            f"on {summary['worker_hosts']} host(s)")
    if summary["cost"] is not None:
        text += f", ${summary['cost']:.4f} at ${summary['instance_hourly_price']}/instance-hour"
        if summary["cost_per_billion_output_tokens"] is not None:
            text += f" (${summary['cost_per_billion_output_tokens']:.4f} per billion output tokens"
            text += (f", ${summary['cost_per_input_gb']:.4f} per input GB)" if summary["cost_per_input_gb"] is not None
                     else ")")
    return text


def sequence_length(config) -> int | None:
    """The job's sequence length (its objective's max_seq_length), if it has one."""
    if config is None:
        return None
    from common.objectives import objective_named
    try:
        params = objective_named(config.objective.name).make_params(config.objective.params)
    except (KeyError, TypeError, ValueError):
        return None
    length = getattr(params, "max_seq_length", None)
    return int(length) if isinstance(length, int) else None
