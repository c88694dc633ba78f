"""A fake EC2 instance metadata service (IMDSv2 only) on loopback.

It answers what the worker's interruption watch asks, the way IMDS does:
a session token from ``PUT /latest/api/token`` (a GET without a valid token
gets 401), 404 for a spot notice or rebalance recommendation that is not
there, ``autoscaling/target-lifecycle-state``, the instance id and the
identity document.  A test sets the notices while a worker runs.
"""

from __future__ import annotations

import json
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeImds:
    def __init__(self, instance_id: str = "i-0123456789abcdef0", region: str = "us-east-1", host: str = "127.0.0.1"):
        self.instance_id = instance_id
        self.region = region
        self.spot_action: dict | None = None
        self.rebalance: dict | None = None
        self.lifecycle_state = "InService"
        self.tokens: set[str] = set()
        self.requests: list[tuple[str, str, bool]] = []  # (method, path, had a valid token)
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args):
                pass

            def _send(self, status: int, body: str = "") -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_PUT(self):
                ttl = self.headers.get("X-aws-ec2-metadata-token-ttl-seconds", "")
                with fake._lock:
                    fake.requests.append(("PUT", self.path, False))
                if self.path != "/latest/api/token" or not ttl.isdigit() or not 1 <= int(ttl) <= 21600:
                    return self._send(400)
                token = secrets.token_urlsafe(16)
                with fake._lock:
                    fake.tokens.add(token)
                self._send(200, token)

            def do_GET(self):
                with fake._lock:
                    valid = self.headers.get("X-aws-ec2-metadata-token", "") in fake.tokens
                    fake.requests.append(("GET", self.path, valid))
                if not valid:
                    return self._send(401)
                status, body = fake.answer(self.path)
                self._send(status, body)

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://{host}:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def answer(self, path: str) -> tuple[int, str]:
        with self._lock:
            if path == "/latest/meta-data/spot/instance-action":
                return (200, json.dumps(self.spot_action)) if self.spot_action else (404, "")
            if path == "/latest/meta-data/events/recommendations/rebalance":
                return (200, json.dumps(self.rebalance)) if self.rebalance else (404, "")
            if path == "/latest/meta-data/autoscaling/target-lifecycle-state":
                return 200, self.lifecycle_state
            if path == "/latest/meta-data/instance-id":
                return 200, self.instance_id
            if path == "/latest/dynamic/instance-identity/document":
                return 200, json.dumps({"instanceId": self.instance_id, "region": self.region,
                                        "instanceType": "c6i.2xlarge"})
        return 404, ""

    def polled(self, path: str) -> int:
        """GETs of ``path`` with a valid token so far."""
        with self._lock:
            return sum(1 for method, p, valid in self.requests if method == "GET" and p == path and valid)

    def __enter__(self) -> FakeImds:
        self._thread.start()
        return self

    def __exit__(self, *_exc) -> None:
        self.server.shutdown()
        self.server.server_close()
