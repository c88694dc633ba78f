"""Workers that cannot run the job (``protocol.JobDeclined``): how many, why, and when none can.

A worker that lacks a plugin step, a tokenizer family, an output storage or a segmenter the job needs declines
it once, at its Welcome.  It is granted no task of the job, and failing tasks costs nothing: a mixed fleet's bad
worker was a black hole that spent the attempts of tasks its good workers could have done.  What is kept here
is what the run says about it (the progress line, the metric, the Shutdown reason that summary.json records),
and the one decision a fleet where no worker can run the job needs: when to stop waiting for one that can.

No sockets and no clock of its own: the server passes ``now`` (tests/ventilator/test_declines.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from common.wire.transport import printable

#: A reason as the run reports it: at most this many characters of the worker's line (hostile: any length).
MAX_REASON_CHARS = 300
#: Distinct reasons named; workers with others are counted under "other reasons".
MAX_REASONS = 5
#: Workers remembered by name, so one that declines again (it said Hello again) is counted once.
MAX_WORKERS = 100_000


def sanitized(reason: str) -> str:
    """``reason`` as one bounded log line: control characters and the backslash escaped (``printable``), cut
    to MAX_REASON_CHARS (a worker's words come from the wire)."""
    text = printable(" ".join(reason[:4 * MAX_REASON_CHARS].split())) or "no reason given"
    return text if len(text) <= MAX_REASON_CHARS else text[:MAX_REASON_CHARS - 3] + "..."


@dataclass
class Declines:
    """The workers that declined this job, by reason, and how long no live worker could run it."""

    #: How long every live worker must have declined (and one at least) before the job is given up on.
    give_up_after: float
    by_reason: dict[str, int] = field(default_factory=dict)
    other_reasons: int = 0  # workers whose reason came after MAX_REASONS others
    count: int = 0  # workers that declined (each once)
    _workers: set[str] = field(default_factory=set)
    _nobody_since: float | None = None  # since when every live worker has declined

    def add(self, worker: str, reason: str) -> bool:
        """Counts ``worker``'s decline (``reason`` sanitized here); False if it was counted already."""
        if worker in self._workers:
            return False
        if len(self._workers) < MAX_WORKERS:
            self._workers.add(worker)
        self.count += 1
        reason = sanitized(reason)
        if reason in self.by_reason or len(self.by_reason) < MAX_REASONS:
            self.by_reason[reason] = self.by_reason.get(reason, 0) + 1
        else:
            self.other_reasons += 1
        return True

    def line(self) -> str:
        """"N worker(s) cannot run this job: <reason>" ("" while none declined): the progress line's, the
        summary's reason's."""
        if not self.count:
            return ""
        if len(self.by_reason) == 1 and not self.other_reasons:
            why = next(iter(self.by_reason))
        else:
            parts = [f"{reason} ({count})" for reason, count in self.by_reason.items()]
            if self.other_reasons:
                parts.append(f"other reasons ({self.other_reasons})")
            why = "; ".join(parts)
        return f"{self.count} worker(s) cannot run this job: {why}"

    def nobody_can_run(self, live_declined: list[bool], now: float) -> bool:
        """Whether the job is to be given up on: ``live_declined`` says, for each worker heard from within
        three heartbeats, whether it declined.  True once every one of them (one at least) has declined for
        ``give_up_after`` (a worker that can run the job, or none at all, starts the wait again: no worker
        yet is the wait for workers, not a job nobody can run)."""
        if not live_declined or not all(live_declined):
            self._nobody_since = None
            return False
        if self._nobody_since is None:
            self._nobody_since = now
        return now - self._nobody_since >= self.give_up_after
