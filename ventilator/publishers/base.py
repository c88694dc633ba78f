"""The backlog seam: where the ventilator says how much work is left, for whatever sizes the fleet.

A publisher is started once the task table is built and closed as the ventilator stops; it observes the
backlog when it likes (``observe()``: pending, leased, workers).  It decides no size.  Publishers are found by
name (ventilator/publishers/ or an installed package's ``mlm_pipeline.publishers`` entry point) and chosen
with ``--backlog-publisher``.  A publisher owns its flags: its ``Params`` (common/job/params.py, shown under "Metrics
and autoscaling"), given to it alone, and says from them whether it runs (``enabled``: CloudWatch's only with
``--cloudwatch-namespace``).
"""

from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from common.job.params import Configurable, NoParams

log = logging.getLogger("ventilator")


@dataclass(frozen=True)
class Backlog:
    """The ventilator's view of the work, at one moment."""

    pending: int  # waiting for a worker
    leased: int  # being computed
    workers: int  # worker processes heard from recently
    worker_hosts: int  # distinct hosts among them
    active: bool = True  # False once, as the ventilator stops (job over, or stopped)

    @property
    def backlog(self) -> int:
        return self.pending + self.leased


class PublisherError(Exception):
    """The publisher cannot publish from what it was given (no region, no project): one line, before any work."""


class BacklogPublisher(Configurable, ABC):
    name: ClassVar[str]
    Params: ClassVar[type] = NoParams

    def __init__(self, params: object, observe: Callable[[], Backlog]):
        """``params``: its own Params (``make_params`` of its flags given); it needs nothing else of the run."""
        self.params = params
        self.observe = observe

    @classmethod
    def enabled(cls, params: object) -> bool:
        """Whether this run asked for it (its options are given): otherwise nothing is published."""
        return True

    @classmethod
    def check(cls, params: object) -> None:
        """PublisherError (one line) if it could not publish with these params: called before any work, so
        what it would find out only when made (after the sink and the workers started) is refused first."""

    @abstractmethod
    def start(self) -> None:
        """Begin publishing (in the background: the job never waits for a publisher)."""

    @abstractmethod
    def close(self) -> None:
        """Stop, saying the job is no longer active."""


class PeriodicPublisher(BacklogPublisher):
    """A publisher that sends the backlog every ``interval_seconds`` from one thread of its own, and, as it
    closes, the last word (backlog 0, inactive) from that same thread: one client, points in order, and
    close() bounded by ``close_seconds`` (+ ``spacing_seconds``) however slowly the service answers.

    A subclass says where it publishes (``label``, ``destination``), sends one observation (``send``, raising
    one of ``failures()`` when the service refuses or cannot be reached) and names its inactive point in the
    closing log line (``last_word``).  A failure is logged once, then retried on the next tick: the job never
    waits for a publisher."""

    label: ClassVar[str]  # how its log lines start: "cloudwatch"
    last_word: ClassVar[str]  # the inactive point, as its log line says: "JobActive=0"

    def __init__(self, params: object, observe: Callable[[], Backlog], *, interval_seconds: float,
                 close_seconds: float = 10.0, spacing_seconds: float = 0.0):
        super().__init__(params, observe)
        self.interval_seconds = interval_seconds
        self.close_seconds = close_seconds
        self.spacing_seconds = spacing_seconds  # the least time the service takes between two points
        self.published = 0
        self._thread = threading.Thread(target=self._run, name=self.label, daemon=True)
        self._stopped = threading.Event()
        self._failing = False
        self._last_accepted = float("-inf")  # time.monotonic() of the last point the service took
        self._last_word_taken = False

    @property
    @abstractmethod
    def destination(self) -> str:
        """Where the points go, for the log: a namespace, ``project P``."""

    @abstractmethod
    def send(self, backlog: Backlog) -> None:
        """Publish one observation; raise one of :meth:`failures` if it was not taken."""

    @abstractmethod
    def failures(self) -> tuple[type[BaseException], ...]:
        """The errors that mean "not published this time" (imported when first asked: the client's own)."""

    def publish(self, backlog: Backlog) -> bool:
        try:
            self.send(backlog)
        except self.failures() as error:
            if not self._failing:
                log.warning("%s: cannot publish the backlog to %s: %s (trying again every %.0fs)", self.label,
                            self.destination, error, self.interval_seconds)
            self._failing = True
            return False
        if self._failing:
            log.info("%s: publishing again", self.label)
        self._failing = False
        self.published += 1
        self._last_accepted = time.monotonic()  # taken by now: the next point waits from here (conservative)
        return True

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped.is_set():
            self.publish(self.observe())
            self._stopped.wait(self.interval_seconds)
        # A service that refuses a point too close to the series' last one: a job ending just after a tick waits.
        wait = self._last_accepted + self.spacing_seconds - time.monotonic()
        if self.spacing_seconds and wait > 0:
            time.sleep(wait + 0.1)
        last = self.observe()
        self._last_word_taken = self.publish(Backlog(last.pending, last.leased, 0, 0, active=False))

    def close(self) -> None:
        """Stop, and say the job is no longer active (the group scales to its minimum)."""
        self._stopped.set()
        if self._thread.ident is None:  # never started: the last word only
            self._thread.start()
        self._thread.join(timeout=self.spacing_seconds + self.close_seconds)
        if self._last_word_taken:
            log.info("%s: %d backlog publications to %s, the last one %s", self.label, self.published,
                     self.destination, self.last_word)
        else:
            log.warning("%s: the last publication to %s (backlog 0, %s) %s; the group scales on the last value it "
                        "has", self.label, self.destination, self.last_word.replace("=", " "),
                        "got no answer in time" if self._thread.is_alive() else "failed")
