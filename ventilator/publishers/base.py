"""The backlog seam: where the ventilator says how much work is left, for whatever sizes the fleet.

A publisher is started once the task table is built and closed as the ventilator stops; it observes the
backlog when it likes (``observe()``: pending, leased, workers).  It decides no size.  Publishers are found by
name (ventilator/publishers/ or an installed package's ``mlm_pipeline.publishers`` entry point) and chosen
with ``--backlog-publisher``.  A publisher owns its flags: its ``Params`` (common/job/params.py, shown under "Metrics
and autoscaling"), given to it alone, and says from them whether it runs (``enabled``: CloudWatch's only with
``--cloudwatch-namespace``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from common.job.params import Configurable, NoParams


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
