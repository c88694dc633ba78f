"""The backlog seam: where the ventilator says how much work is left, for whatever sizes the fleet.

A publisher is started once the task table is built and closed as the ventilator stops; it observes the
backlog when it likes (``observe()``: pending, leased, workers).  It decides no size.  Publishers are found by
name (ventilator/publishers/ or an installed package's ``mlm_pipeline.publishers`` entry point) and chosen
with ``--backlog-publisher``; one runs only when its own options are given (``wanted``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from ventilator.run_config import RunConfig


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


class BacklogPublisher(ABC):
    name: ClassVar[str]

    def __init__(self, config: RunConfig, observe: Callable[[], Backlog]):
        self.config = config
        self.observe = observe

    @classmethod
    @abstractmethod
    def wanted(cls, config: RunConfig) -> bool:
        """Whether this run asked for it (its options are given): otherwise nothing is published."""

    @abstractmethod
    def start(self) -> None:
        """Begin publishing (in the background: the job never waits for a publisher)."""

    @abstractmethod
    def close(self) -> None:
        """Stop, saying the job is no longer active."""
