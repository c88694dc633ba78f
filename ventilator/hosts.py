"""When each worker host was billed for the job: from boot or registration to the last word heard.

The sink counts a host's hours from its acknowledgements alone: from the start of its first task to its last
acknowledgement.  A bill runs longer: an instance started for the job is paid from its boot (package
installation, the first Hello), and until it goes (a drain, the idle tail to the job's end).  Only the
ventilator hears every worker from its Hello to its last heartbeat, so it keeps the spans and hands them to
the sink before Shutdown (``protocol.WorkerHosts``); the sink takes, per host, the widest span either saw.

A host that booted while this ventilator was running was started for the job: its span begins at its boot
(the worker's Hello says when that was).  One that was up before (a workstation, a Slurm node, an instance
kept from an earlier job) begins at its first worker's Hello: its earlier hours were not this job's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass
class Span:
    since: float  # wall clock
    last: float


class HostLedger:
    def __init__(self, started: float | None = None):
        self.started = time.time() if started is None else started  # this ventilator's start, wall clock
        self.spans: dict[str, Span] = {}

    def joined(self, host: str, booted_at: float, now: float | None = None) -> None:
        """A worker on ``host`` said Hello (its host booted at ``booted_at``; 0 when it could not tell)."""
        now = time.time() if now is None else now
        since = booted_at if self.started <= booted_at <= now else now
        span = self.spans.get(host)
        if span is None:
            self.spans[host] = Span(since, now)
        else:
            span.since, span.last = min(span.since, since), max(span.last, now)

    def heard(self, host: str, now: float) -> None:
        """Any other message from a worker on ``host``."""
        span = self.spans.get(host)
        if span is not None and now > span.last:
            span.last = now

    def message_parts(self, per_message: int = 5000) -> list[dict[str, list[float]]]:
        """The spans as WorkerHosts payloads of at most ``per_message`` hosts (a frame well under 1 MB)."""
        items = [(host, [round(span.since, 3), round(span.last, 3)]) for host, span in self.spans.items()]
        return [dict(items[start:start + per_message]) for start in range(0, len(items), per_message)]
