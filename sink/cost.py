"""What a run cost: worker CPU-hours, instance-hours and, given a price, dollars.

CPU-hours are the workers' own measure (each acknowledgement's
``stats.cpu_seconds``).  Instance-hours are counted per worker host, over the
widest span seen of it: the ventilator's (``protocol.WorkerHosts``, sent
before Shutdown: from the host's boot when it booted during the job, else
from its first Hello, to the last message it heard from the host) and this
sink's own (from the start of the host's first task it heard of to its last
acknowledgement; all it has when the ventilator did not say, e.g. a job
interrupted).  With ``--instance-hourly-price`` (USD per instance-hour, e.g.
the spot price of the workers' type) it becomes the job's cost, per billion
output tokens and per input GB.  Output tokens are the positions training
reads (records x sequence length, padding included); the tokens without
padding (``stats.output_tokens``: what was computed) are stated beside them.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass, field

from common.output.manifest import Work
from common.wire.protocol import AckStats

log = logging.getLogger("sink")


def worker_host(worker_id: str) -> str:
    """worker-HOST-PID-RANDOM (common.wire.transport.new_identity) -> HOST."""
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
    tokens_without_padding: int = 0
    hosts: dict[str, _Host] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, worker_id: str, stats: AckStats, records: int, now: float | None = None) -> None:
        now = time.time() if now is None else now
        started = now - sum(stats.seconds.values())
        with self._lock:
            self.cpu_seconds += stats.cpu_seconds
            self.bytes_in += stats.bytes_in
            self.records += records
            self.tokens_without_padding += stats.output_tokens
            self._widen(worker_host(worker_id), started, now)

    def add_spans(self, spans: dict[str, list[float]]) -> None:
        """The ventilator's spans of the worker hosts: host -> [billed from, last heard]."""
        with self._lock:
            for host, span in spans.items():
                if len(span) == 2 and all(math.isfinite(t) for t in span) and span[0] <= span[1]:
                    self._widen(host, span[0], span[1])

    def _widen(self, name: str, first: float, last: float) -> None:
        host = self.hosts.get(name)
        if host is None:
            self.hosts[name] = _Host(first, last)
        else:
            host.first, host.last = min(host.first, first), max(host.last, last)

    def summary(self, sequence_length: int | None) -> dict:
        with self._lock:
            instance_hours = sum(h.last - h.first for h in self.hosts.values()) / 3600
            result = {
                "worker_cpu_hours": round(self.cpu_seconds / 3600, 9),
                "instance_hours": round(instance_hours, 9),
                "worker_hosts": len(self.hosts),
                "input_gb": round(self.bytes_in / 1e9, 9),
                "output_tokens": self.records * sequence_length if sequence_length else None,
                "output_tokens_without_padding": self.tokens_without_padding,
                "instance_hourly_price": self.hourly_price,
                "cost": None, "cost_per_billion_output_tokens": None,
                "cost_per_billion_tokens_without_padding": None, "cost_per_input_gb": None,
            }
        if self.hourly_price is not None:
            cost = instance_hours * self.hourly_price
            result["cost"] = round(cost, 9)
            if result["output_tokens"]:
                result["cost_per_billion_output_tokens"] = round(cost / (result["output_tokens"] / 1e9), 6)
            if self.tokens_without_padding:
                result["cost_per_billion_tokens_without_padding"] = round(cost / (self.tokens_without_padding / 1e9),
                                                                          6)
            if self.bytes_in:
                result["cost_per_input_gb"] = round(cost / (self.bytes_in / 1e9), 6)
        return result


#: What a run spent, added over the runs of a job (from the earlier runs' summary.json).
SPENT = ("worker_cpu_hours", "instance_hours")


def earlier_cost(output, job_id: str) -> dict | None:
    """The cost the output's summary.json holds for this job (its earlier runs'), or None: no summary, another
    job's, or one that cannot be read (a run killed before its end leaves none: its spending is not known)."""
    import json

    from common.storage import StorageError

    try:
        data = output.get_bytes("summary.json")
    except (OSError, StorageError) as error:  # not a file (a directory), unreadable: the earlier spending unknown
        log.warning("sink: the earlier runs' cost is not known: summary.json cannot be read (%s)", error)
        return None
    try:
        summary = json.loads(data) if data is not None else None
    except ValueError:
        return None
    if not isinstance(summary, dict) or summary.get("job") != job_id or not isinstance(summary.get("cost"), dict):
        return None
    cost = summary["cost"]
    numbers = {key: cost.get(key) for key in (*SPENT, "cost", "worker_hosts", "runs")}
    checked = {key: float(value) for key, value in numbers.items()
               if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
               and value >= 0}
    checked.setdefault("runs", 1.0)
    return checked


def job_cost(this_run: dict, earlier: dict | None, work: Work | None, sequence_length: int | None,
             hourly_price: float | None) -> dict:
    """The job's cost over its runs: what each run spent (this run's ledger plus the earlier runs'), and what
    the job made, from the manifest (``work``: its tasks' records, tokens and input), so the cost per token
    and per GB are of the whole output, however many runs made it."""
    earlier = earlier or {}
    result = dict(this_run)
    for key in SPENT:
        result[key] = round(this_run[key] + earlier.get(key, 0.0), 9)
    result["worker_hosts"] = max(this_run["worker_hosts"], int(earlier.get("worker_hosts", 0)))
    result["runs"] = int(earlier.get("runs", 0)) + 1
    if work is not None:
        result["input_gb"] = round(work.bytes_in / 1e9, 9)
        result["output_tokens"] = work.records * sequence_length if sequence_length else None
        result["output_tokens_without_padding"] = work.output_tokens
        result["worker_cpu_hours"] = round(max(result["worker_cpu_hours"], work.cpu_seconds / 3600), 9)
    for key in ("cost", "cost_per_billion_output_tokens", "cost_per_billion_tokens_without_padding",
                "cost_per_input_gb"):
        result[key] = None
    if hourly_price is not None:
        before = earlier.get("cost")  # an earlier run without a price: its hours at this one's
        cost = (before if before is not None else earlier.get("instance_hours", 0.0) * hourly_price) \
            + this_run["instance_hours"] * hourly_price
        result["cost"] = round(cost, 9)
        if result["output_tokens"]:
            result["cost_per_billion_output_tokens"] = round(cost / (result["output_tokens"] / 1e9), 6)
        if result["output_tokens_without_padding"]:
            result["cost_per_billion_tokens_without_padding"] = round(
                cost / (result["output_tokens_without_padding"] / 1e9), 6)
        if result["input_gb"]:
            result["cost_per_input_gb"] = round(cost / result["input_gb"], 6)
    return result


def describe(summary: dict) -> str:
    """The final log line's cost part."""
    text = (f"{summary['worker_cpu_hours']:.3f} worker CPU-hours, {summary['instance_hours']:.3f} instance-hours "
            f"on {summary['worker_hosts']} host(s), {summary.get('output_tokens_without_padding', 0):,} output tokens "
            f"without padding")
    if summary["cost"] is not None:
        text += f", ${summary['cost']:.4f} at ${summary['instance_hourly_price']}/instance-hour"
        if summary["cost_per_billion_output_tokens"] is not None:
            text += f" (${summary['cost_per_billion_output_tokens']:.4f} per billion output tokens"
            text += (f", ${summary['cost_per_input_gb']:.4f} per input GB)" if summary["cost_per_input_gb"] is not None
                     else ")")
    return text


def sequence_length(config) -> int | None:
    """The positions each record holds, padding included (its objective's max_seq_length), when its records
    are padded to it; None otherwise: records stored at their own length (the tokens objective's documents
    and chunks of at most --max-seq-length) hold their tokens and no padding."""
    if config is None:
        return None
    from common.objectives import objective_named
    from common.tokenization.vocabulary import described_vocabulary
    try:
        objective_class = objective_named(config.objective.name)
        params = objective_class.make_params(config.objective.params)
        length = getattr(params, "max_seq_length", None)
        if not isinstance(length, int) or not length:
            return None
        features = objective_class(params, described_vocabulary(config.tokenizer_json).special).features
    except (KeyError, TypeError, ValueError):
        return None
    ids = next((f for f in features if f.name == "input_ids"), None)
    return int(length) if ids is not None and ids.length is not None else None
