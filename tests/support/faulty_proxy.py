"""An HTTP proxy in front of an S3 endpoint that fails a share of requests
with S3's own throttling and server errors, for fault-injection tests.

Requests are forwarded unchanged (the Host header included, so SigV4
signatures still verify upstream); every ``fail_every``-th request is
answered instead with ``503 SlowDown`` or ``500 InternalError`` (and so is
each request numbered in ``fail_requests``).
"""

from __future__ import annotations

import http.client
import itertools
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

_ERRORS = [(503, "SlowDown", "Please reduce your request rate."),
           (500, "InternalError", "We encountered an internal error. Please try again.")]


class FaultyProxy:
    def __init__(self, upstream: str, fail_every: int = 3, fail_requests: frozenset[int] = frozenset(),
                 errors: list[tuple[int, str, str]] | None = None):
        """``fail_requests``: these requests (numbered from 1) fail too, so several in a row can (more than
        botocore's own retries absorb).  ``errors``: the (status, code, message) answers to take turns
        with (S3's 503 SlowDown and 500 InternalError unless given)."""
        answers = errors or _ERRORS
        target = urlsplit(upstream)
        counter = itertools.count(1)
        self.failed = 0
        self.requests = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _handle(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                number = next(counter)
                proxy.requests = number
                if (fail_every and number % fail_every == 0) or number in fail_requests:
                    proxy.failed += 1
                    status, code, text = answers[(number // (fail_every or 1)) % len(answers)]
                    payload = f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code><Message>{text}</Message></Error>".encode()
                    self.send_response(status)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                connection = http.client.HTTPConnection(target.hostname, target.port, timeout=60)
                try:
                    connection.request(self.command, self.path, body=body or None, headers=dict(self.headers.items()))
                    response = connection.getresponse()
                    data = response.read()
                    self.send_response(response.status)
                    for name, value in response.getheaders():
                        if name.lower() not in ("transfer-encoding", "connection", "content-length"):
                            self.send_header(name, value)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(data)
                finally:
                    connection.close()

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FaultyProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
