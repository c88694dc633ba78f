"""What the loader's tests share: one small real output per session, and loader servers as real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.procs import free_ports
from tests.support.factories import finished_job
from tests.support.helpers import REPO, VOCAB, WIKI, need_shared

#: ~4,300 records in 11 shards: the whole wiki sample with one dupe pass.
DATASET_ARGS = ["--vocab-file", VOCAB, "--dupe-factor", "1", "--task-size", "192K", "--workers", "2"]


@pytest.fixture(scope="session")
def loader_dataset(tmp_path_factory) -> Path:
    return finished_job(tmp_path_factory.mktemp("loader-data"), *DATASET_ARGS)


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

    def __enter__(self) -> LoaderProcess:
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


class CuttableProxy:
    """A TCP forwarder on loopback whose connections can all be cut at once
    (a network blip between a rank and the server)."""

    def __init__(self, upstream_port: int):
        import socket
        import threading

        self.upstream_port = upstream_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections: list = []
        self.cuts = 0
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket
        import threading

        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            with self._lock:
                self.connections += [client, upstream]
            for source, target in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, target), daemon=True).start()

    @staticmethod
    def _pump(source, target) -> None:
        try:
            while data := source.recv(1 << 16):
                target.sendall(data)
        except OSError:
            pass
        for sock in (source, target):
            try:
                sock.close()
            except OSError:
                pass

    def cut(self) -> None:
        import socket

        with self._lock:
            connections, self.connections = self.connections, []
            self.cuts += 1
        for sock in connections:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        self.listener.close()
        self.cut()


def write_paragraph_corpus(path: Path, seed: int = 0, max_words: int = 250) -> Path:
    """The wiki sample's paragraphs grouped into documents of log-normally many paragraphs, cut at ``max_words``
    words (a text file, blank lines between documents): ~2,500 documents of 4 to ~450 tokens, short ones most
    common, as on the web."""
    import random

    paragraphs = [line.strip() for file in sorted(Path(WIKI).rglob("*")) if file.is_file()
                  for line in file.read_text(encoding="utf-8").splitlines()
                  if line.strip() and not line.startswith("<") and len(line.split()) > 3]
    rng, documents, at = random.Random(seed), [], 0
    while at < len(paragraphs):
        count = max(1, int(rng.lognormvariate(0.3, 0.9)))
        documents.append(" ".join(" ".join(paragraphs[at:at + count]).split()[:max_words]))
        at += count
    path.write_text("\n\n".join(documents) + "\n", encoding="utf-8")
    return path


def make_token_dataset(work: Path) -> Path:
    """``--objective tokens --output-format parquet`` of :func:`write_paragraph_corpus`: one sample per document."""
    need_shared()
    work.mkdir(parents=True, exist_ok=True)
    corpus = write_paragraph_corpus(work / "corpus.txt")
    return finished_job(work, "--vocab-file", VOCAB, "--objective", "tokens", "--output-format", "parquet",
                        "--task-size", "256K", "--workers", "2", data=corpus)
