"""A TCP listener on loopback that accepts every connection and never answers: the store that held a job for the
clients' timeouts times the retries (docs/reliability.md, "A store that never answers").

``python -m tests.support.silent_endpoint 10 120`` measures, in this process, how long one read of gs:// and of
s3:// waits on it with each --storage-timeout given (the figures in docs/reliability.md)."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator


@contextlib.contextmanager
def silent_endpoint() -> Iterator[tuple[str, list[socket.socket]]]:
    """(its http:// URL, the connections it accepted so far)."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            with contextlib.suppress(OSError):
                held.append(server.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}", held
    finally:
        stop.set()
        thread.join()
        for connection in held:
            connection.close()
        server.close()


def main(bounds: list[float]) -> None:
    from common.storage import GCSStorage, RetryPolicy, S3Storage, StorageError

    os.environ.update(AWS_ACCESS_KEY_ID="k", AWS_SECRET_ACCESS_KEY="s", AWS_DEFAULT_REGION="us-east-1",
                      NO_PROXY="127.0.0.1", no_proxy="127.0.0.1")
    for bound in bounds:
        for store in ("gs", "s3"):
            with silent_endpoint() as (url, _held):
                os.environ["STORAGE_EMULATOR_HOST"] = url
                storage = (GCSStorage("gs://bucket/out", RetryPolicy(timeout=bound)) if store == "gs"
                           else S3Storage("s3://bucket/out", url, RetryPolicy(timeout=bound)))
                started = time.monotonic()
                try:
                    storage.get_bytes("manifest.jsonl")
                except StorageError as error:
                    said = str(error)
                    print(f"{store}:// --storage-timeout {bound:g}: failed after {time.monotonic() - started:.1f} s "
                          f"({said[said.rfind('(gave up') + 1:].rstrip(')')})", flush=True)


if __name__ == "__main__":
    main([float(bound) for bound in sys.argv[1:]] or [10.0])
