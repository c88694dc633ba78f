"""The launcher seam: what starts the sink and the workers a ventilator runs with, watches and stops them.

The ventilator hands a launcher :class:`Role` s (a name, the module to run, its argv written from the role's
settings by common/job/cli_settings.to_argv) and asks it, while the job runs, whether one failed or all exited.
Local processes are one launcher (local.py); a batch scheduler or a cluster is another, found by name the
same way (ventilator/launchers/ or an installed package's ``mlm_pipeline.launchers`` entry point).  A launcher
owns its flags: its ``Params`` (common/job/params.py, shown under "Fleet", given only with ``--launcher`` its name),
and is handed those and the little it needs of the run (:class:`Fleet`), not the whole command line.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from common.job.cli_settings import to_argv
from common.job.params import Configurable, NoParams


class LaunchError(ValueError):
    """A one-line reason a launcher cannot run here (raised when it is made, before any work)."""


@dataclass(frozen=True)
class Role:
    """One thing to start: ``python -m module *args``, called ``name`` in logs and failures."""

    name: str  # "sink", "workers"
    module: str  # "sink", "worker"
    args: tuple[str, ...] = ()

    @classmethod
    def of(cls, name: str, module: str, settings) -> Role:
        """The role that runs ``module`` with ``settings`` (its settings dataclass)."""
        return cls(name, module, tuple(to_argv(settings)))


@dataclass(frozen=True)
class Fleet:
    """What a launcher is told of the run beside its own flags."""

    workers: int = 0  # --workers: worker processes per worker host (0: none started here)


class Launcher(Configurable, ABC):
    """Starts roles, reports the first failure, waits for them and stops them."""

    name: ClassVar[str]
    Params: ClassVar[type] = NoParams
    #: The host the processes it starts reach the ventilator (and the sink it started) at.
    ventilator_host: str = "127.0.0.1"  # a launcher may find it when made (Slurm's head node)

    def __init__(self, params: object = None, fleet: Fleet | None = None,
                 relay: Callable[[str], None] | None = None):
        """``params``: its own Params (its defaults if None).  LaunchError if it cannot run here."""
        self.params = params if params is not None else self.Params()
        self.fleet = fleet if fleet is not None else Fleet()
        self.relay = relay  # where the roles' output lines go (the terminal display); None: the terminal

    @abstractmethod
    def start(self, role: Role) -> None:
        """Start ``role``; it runs until its job is done or it is stopped."""

    @abstractmethod
    def failure(self) -> str | None:
        """A one-line reason if a role has already ended with an error."""

    @abstractmethod
    def all_exited(self) -> bool:
        """Every role started has ended (the ventilator then has nobody left to wait for)."""

    @abstractmethod
    def wait(self, timeout: float) -> dict[str, int | None]:
        """Wait for every role to end (stopping those that do not): each role's exit status."""

    @abstractmethod
    def terminate(self) -> None:
        """Ask every role to stop (SIGTERM: workers drain, the sink flushes) and wait for it."""
