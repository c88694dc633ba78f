"""A fake Google Compute Engine metadata server and a fake Cloud Monitoring API, on loopback.

The metadata server answers as Google's does what this project's clients ask: it requires
``Metadata-Flavor: Google`` on every request and sends it back (google-auth's ``ping`` checks it), serves the
VM's project id, its service account and an access token (so ``google.auth.default()`` finds Compute Engine
credentials, as on a real VM), ``instance/preempted`` and ``instance/maintenance-event``.  A test flips
``preempted`` while a worker runs.

The Monitoring API takes ``projects.timeSeries.create`` (``POST /v3/projects/P/timeSeries``) only with a
bearer token the metadata server issued, and keeps every request body.  Both are real HTTP servers:
the clients under test (google-auth's AuthorizedSession, the worker's watcher) are used as they are.
"""

from __future__ import annotations

import json
import secrets
import threading
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Server:
    def __init__(self, handler: type[BaseHTTPRequestHandler], host: str = "127.0.0.1"):
        self.server = ThreadingHTTPServer((host, 0), handler)
        self.server.daemon_threads = True
        self.host = f"{host}:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *_exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def _reply(handler: BaseHTTPRequestHandler, status: int, body: str = "", content_type: str = "text/plain",
           flavor: bool = True) -> None:
    data = body.encode()
    handler.send_response(status)
    if flavor:
        handler.send_header("Metadata-Flavor", "Google")
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


class FakeGceMetadata(_Server):
    """``GCE_METADATA_HOST`` / ``GCE_METADATA_IP`` = ``self.host``."""

    def __init__(self, project: str = "mlm-test-project", email: str = "mlm-worker@mlm-test-project.iam"):
        self.project = project
        self.email = email
        self.preempted = False
        self.maintenance_event = "NONE"
        self.token_answer: str | None = None  # set: served instead of a token (a broken or hostile server)
        self.tokens: set[str] = set()
        self.requests: list[str] = []
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args):
                pass

            def do_GET(self):
                with fake._lock:
                    fake.requests.append(self.path)
                if self.headers.get("Metadata-Flavor") != "Google":
                    return _reply(self, 403, "Missing Metadata-Flavor:Google header.")
                status, body, kind = fake.answer(self.path.split("?", 1)[0])
                _reply(self, status, body, kind)

        super().__init__(Handler)

    def env(self) -> dict[str, str]:
        """What points Google's clients (and the worker's --spot-watch-cloud gce) at this server."""
        return {"GCE_METADATA_HOST": self.host, "GCE_METADATA_IP": self.host, "GCE_METADATA_TIMEOUT": "3"}

    def answer(self, path: str) -> tuple[int, str, str]:
        root = "/computeMetadata/v1/"
        if path in ("", "/"):
            return 200, "computeMetadata/\n", "text/plain"  # google-auth's ping of the server's root
        if not path.startswith(root):
            return 404, "", "text/plain"
        key = path[len(root):]
        with self._lock:
            if key == "instance/preempted":
                return 200, "TRUE" if self.preempted else "FALSE", "text/plain"
            if key == "instance/maintenance-event":
                return 200, self.maintenance_event, "text/plain"
            if key == "project/project-id":
                return 200, self.project, "text/plain"
            if key == "universe/universe-domain":
                return 200, "googleapis.com", "text/plain"
            if key in ("instance/service-accounts/default/", "instance/service-accounts/default"):
                return 200, json.dumps({"email": self.email, "aliases": ["default"],
                                        "scopes": ["https://www.googleapis.com/auth/cloud-platform"]}), \
                    "application/json"
            if key == "instance/service-accounts/default/email":
                return 200, self.email, "text/plain"
            if key == "instance/service-accounts/default/token":
                if self.token_answer is not None:
                    return 200, self.token_answer, "application/json"
                token = secrets.token_urlsafe(16)
                self.tokens.add(token)
                return 200, json.dumps({"access_token": token, "expires_in": 3599, "token_type": "Bearer"}), \
                    "application/json"
        return 404, "", "text/plain"


class FakeCloudMonitoring(_Server):
    """``--cloud-monitoring-endpoint`` = ``self.endpoint``; accepts the tokens ``metadata`` issued."""

    def __init__(self, metadata: FakeGceMetadata):
        self.metadata = metadata
        self.created: list[dict] = []  # request bodies of accepted timeSeries.create calls
        self.refused = 0
        self.fail_next = 0  # answer this many calls 503 first
        #: Google's limit: a point per time series every 5 s at most, else 400 (0: not checked)
        self.min_spacing_seconds = 0.0
        self.too_frequent = 0
        self.hang = threading.Event()  # set: hold every call until released (a Monitoring API that never answers)
        self.release = threading.Event()
        self.held = 0  # calls ``hang`` holds
        self._last_end: dict[str, datetime] = {}
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args):
                pass

            def do_POST(self):
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                token = self.headers.get("Authorization", "").removeprefix("Bearer ")
                with fake._lock:
                    if token not in fake.metadata.tokens:
                        fake.refused += 1
                        return _reply(self, 401, '{"error": {"code": 401}}', "application/json", flavor=False)
                    if fake.fail_next:
                        fake.fail_next -= 1
                        return _reply(self, 503, '{"error": {"code": 503}}', "application/json", flavor=False)
                    if not (self.path.startswith("/v3/projects/") and self.path.endswith("/timeSeries")):
                        return _reply(self, 404, "{}", "application/json", flavor=False)
                if fake.hang.is_set():
                    with fake._lock:
                        fake.held += 1
                    fake.release.wait()
                    return _reply(self, 503, '{"error": {"code": 503}}', "application/json", flavor=False)
                request = json.loads(body)
                with fake._lock:
                    if fake.too_soon(request):
                        fake.too_frequent += 1
                        return _reply(self, 400, '{"error": {"code": 400, "message": "One or more points were written '
                                      'more frequently than the maximum sampling period configured for the '
                                      'metric."}}', "application/json", flavor=False)
                    fake.created.append({"path": self.path, "body": request})
                _reply(self, 200, "{}", "application/json", flavor=False)

        super().__init__(Handler)
        self.endpoint = f"http://{self.host}"

    def __exit__(self, *exc) -> None:
        self.release.set()  # calls held by ``hang`` end before the server does
        super().__exit__(*exc)

    def too_soon(self, request: dict) -> bool:
        """Google's rule, by the points' end times: closer than ``min_spacing_seconds`` to the series' last point
        refuses the call (records the accepted ones' ends)."""
        ends = {series["metric"]["type"]: datetime.fromisoformat(
            series["points"][0]["interval"]["endTime"].replace("Z", "+00:00")) for series in request["timeSeries"]}
        if self.min_spacing_seconds and any(
                metric in self._last_end and (end - self._last_end[metric]).total_seconds() < self.min_spacing_seconds
                for metric, end in ends.items()):
            return True
        self._last_end.update(ends)
        return False

    def latest(self) -> dict[str, int]:
        """The last published value of each metric, by its type."""
        with self._lock:
            values: dict[str, int] = {}
            for call in self.created:
                for series in call["body"]["timeSeries"]:
                    values[series["metric"]["type"]] = int(series["points"][0]["value"]["int64Value"])
            return values
