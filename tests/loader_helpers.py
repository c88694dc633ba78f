"""What the loader's tests share: one small real output per session, and loader servers as real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.procs import free_ports
from tests.helpers import REPO, VOCAB, WIKI, need_shared, run_ventilator

#: ~4,300 records in 11 shards: the whole wiki sample with one dupe pass.
DATASET_ARGS = ["--vocab-file", VOCAB, "--dupe-factor", "1", "--task-size", "192K", "--workers", "2"]


@pytest.fixture(scope="session")
def loader_dataset(tmp_path_factory) -> Path:
    need_shared()
    output = tmp_path_factory.mktemp("loader-data") / "out"
    result = run_ventilator(WIKI, output, *DATASET_ARGS)
    assert result.returncode == 0, result.stderr[-3000:]
    return output


class LoaderProcess:
    """``python -m loader`` on a free loopback port; stopped by its own pid."""

    def __init__(self, data, *args, port: int | None = None, env: dict | None = None):
        self.port = port or free_ports(1)[0]
        self.env = {**os.environ, **(env or {})}
        self.args = [sys.executable, "-m", "loader", "--data", str(data), "--port", str(self.port),
                     "--bind-host", "127.0.0.1", *map(str, args)]
        self.process: subprocess.Popen | None = None
        self.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        self.process = subprocess.Popen(self.args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True, env=self.env)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)

    def wait(self, timeout: float = 30.0) -> str:
        """Its output once it exits by itself."""
        return self.process.communicate(timeout=timeout)[0] or ""

    def stop(self) -> str:
        """Ends it (SIGTERM, then SIGKILL); its output."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
        return self.process.communicate()[0] or ""

    def __enter__(self) -> "LoaderProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def vocab_args() -> list[str]:
    return ["--vocab-file", str(VOCAB)]


def wait_for(predicate, timeout: float = 20.0, interval: float = 0.05):
    """Polls until ``predicate()`` is truthy (returns it); fails the test at the timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(interval)
