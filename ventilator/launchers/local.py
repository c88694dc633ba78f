"""Local processes: the one-machine command's sink (unless --sink points at one) and ``--workers N``
worker processes, children of the ventilator that die with it."""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable

from common.kernels import FORCE_NUMPY
from ventilator.launchers.base import Fleet, Launcher, Role

log = logging.getLogger("ventilator")

_PR_SET_PDEATHSIG = 1

#: MLM_* variables that are not options: they reach the children (the kernels' switch among them: a worker
#: started here runs the kernels this command was told to).
_INHERITED = {"MLM_FAST_WORDPIECE", FORCE_NUMPY}


def _terminated_with_parent() -> Callable[[], None] | None:
    """For Popen's preexec_fn on Linux: the child gets SIGTERM (workers drain,
    the sink flushes) when this command dies, even by kill -9, instead of
    living on and holding the ports the next run needs."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here, not in the forked child
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def set_death_signal() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM))
        if os.getppid() != parent:  # died before the call
            os.kill(os.getpid(), signal.SIGTERM)

    return set_death_signal


class LocalLauncher(Launcher):
    name = "local"

    def __init__(self, params: object = None, fleet: Fleet | None = None,
                 relay: Callable[[str], None] | None = None):
        super().__init__(params, fleet, relay)
        self.children: dict[str, subprocess.Popen] = {}
        self._relays: list[threading.Thread] = []

    def start(self, role: Role) -> None:
        """Start ``python -m module args``."""
        self.spawn(role.name, [sys.executable, "-m", role.module, *role.args])

    def spawn(self, name: str, command: list[str]) -> None:
        """Run ``command`` as the child ``name``; with a relay, its output lines
        go there (the terminal display) instead of straight to the terminal."""
        relay = self.relay
        log.info("starting %s: %s", name, " ".join(command[1:] if command[0] == sys.executable else command))
        # Children get every setting on their command line, and only there:
        # a worker's or sink's own variable (MLM_WORKER_SINK, MLM_SINK_PORT),
        # set for another host's process in a shared environment, would
        # otherwise override what this command hands them.
        env = {key: value for key, value in os.environ.items()
               if not key.startswith("MLM_") or key in _INHERITED}
        preexec = _terminated_with_parent()
        if relay is None:
            self.children[name] = subprocess.Popen(command, env=env, preexec_fn=preexec)
            return
        child = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 errors="replace", bufsize=1, preexec_fn=preexec)
        self.children[name] = child
        thread = threading.Thread(target=_relay_lines, args=(child.stdout, relay), name=f"relay-{name}", daemon=True)
        thread.start()
        self._relays.append(thread)

    def all_exited(self) -> bool:
        return bool(self.children) and all(child.poll() is not None for child in self.children.values())

    def failure(self) -> str | None:
        """A one-line reason if a child has already exited with an error."""
        for name, child in self.children.items():
            code = child.poll()
            if code not in (None, 0):
                return f"the local {name} exited with status {code}"
        return None

    def wait(self, timeout: float) -> dict[str, int | None]:
        """Wait for every child to exit; terminate those that do not."""
        deadline = time.monotonic() + timeout
        for child in self.children.values():
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        self.terminate()
        for thread in self._relays:  # the children's last lines
            thread.join(timeout=5)
        return {name: child.returncode for name, child in self.children.items()}

    def terminate(self, grace: float = 30.0) -> None:
        running = [c for c in self.children.values() if c.poll() is None]
        for child in running:
            child.terminate()
        for child in running:
            try:
                child.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()


def _relay_lines(stream, relay: Callable[[str], None]) -> None:
    """Until the child closes its output; a line that cannot be shown is
    dropped, never left to fill the pipe and stall the child."""
    with stream:
        for line in stream:
            try:
                relay(line.rstrip("\n"))
            except Exception:
                pass
