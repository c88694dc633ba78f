"""The processes the one-machine command starts beside the ventilator:
a sink (unless --sink points at one) and ``--workers N`` worker processes."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time

log = logging.getLogger("ventilator")


class LocalFleet:
    def __init__(self):
        self.children: dict[str, subprocess.Popen] = {}

    def start(self, name: str, module: str, args: list[str]) -> None:
        command = [sys.executable, "-m", module, *args]
        log.info("starting %s: %s", name, " ".join(command[1:]))
        # The ventilator's own metrics port is not the children's: two
        # processes cannot listen on it.
        env = {key: value for key, value in os.environ.items() if key != "MLM_METRICS_PORT"}
        self.children[name] = subprocess.Popen(command, env=env)

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
