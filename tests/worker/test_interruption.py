"""The interruption watch: which IMDS answers are notices, and the IMDSv2
client against a fake IMDS on loopback (token flow, 404s, an unreachable
endpoint that must not slow a worker off EC2)."""

import json
import logging
import socket
import time
from datetime import UTC, datetime

import pytest

from tests.support.fake_imds import FakeImds
from worker.interruption import (
    LIFECYCLE_STATE,
    REBALANCE,
    SPOT_ACTION,
    SPOT_SAFETY_SECONDS,
    Imds,
    ImdsError,
    InterruptionWatcher,
    classify,
)

NOW = 1_800_000_000.0


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_nothing_is_no_notice():
    assert classify(None, None, "InService", NOW) is None
    assert classify(None, None, None, NOW) is None


def test_spot_notice_deadline_is_its_time_less_a_margin_capped_by_the_drain():
    action = json.dumps({"action": "terminate", "time": _iso(NOW + 120)})
    notice = classify(action, None, "InService", NOW, drain_seconds=300)
    assert notice.kind == "spot-interruption" and notice.release_at == NOW + 120 - SPOT_SAFETY_SECONDS
    assert classify(action, None, None, NOW, drain_seconds=30).release_at == NOW + 30
    past = json.dumps({"action": "stop", "time": _iso(NOW - 5)})
    assert classify(past, None, None, NOW).release_at == NOW  # already late: hand back at once
    assert classify("not json", None, None, NOW, drain_seconds=60).release_at == NOW + 60


def test_scale_in_and_rebalance_use_the_drain_time_spot_wins():
    assert classify(None, None, "Terminated", NOW, 90) == classify(None, None, "Terminated\n", NOW, 90)
    assert classify(None, None, "Terminated", NOW, 90).kind == "scale-in"
    rebalance = classify(None, json.dumps({"noticeTime": _iso(NOW)}), "InService", NOW, 90)
    assert rebalance.kind == "rebalance-recommendation" and rebalance.release_at == NOW + 90
    action = json.dumps({"action": "terminate", "time": _iso(NOW + 120)})
    assert classify(action, "{}", "Terminated", NOW, 90).kind == "spot-interruption"


def test_client_takes_a_token_and_reads_404_as_nothing():
    with FakeImds() as imds:
        client = Imds(imds.endpoint)
        assert client.get(SPOT_ACTION) is None and client.get(REBALANCE) is None
        assert client.get(LIFECYCLE_STATE) == "InService"
        assert client.identity()["instanceId"] == imds.instance_id
        assert len(imds.tokens) == 1, "one session token, reused"
        assert all(valid for method, _path, valid in imds.requests if method == "GET")
        imds.tokens.clear()  # the token is no longer valid (instance stopped and started)
        assert client.get(LIFECYCLE_STATE) == "InService"
        assert len(imds.tokens) == 1


def test_watcher_reports_the_first_notice_once():
    with FakeImds() as imds:
        seen = []
        watcher = InterruptionWatcher(Imds(imds.endpoint), seen.append, interval=0.05, drain_seconds=60)
        watcher.start()
        deadline = time.monotonic() + 10
        while imds.polled(SPOT_ACTION) < 2:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert not seen
        imds.spot_action = {"action": "terminate", "time": _iso(time.time() + 120)}
        watcher.join(timeout=10)
        assert not watcher.is_alive() and [n.kind for n in seen] == ["spot-interruption"]
        assert 0 < seen[0].release_at - time.time() <= 60


def test_unreachable_imds_fails_fast_and_the_watcher_keeps_going():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = Imds(f"http://127.0.0.1:{port}", timeout=1.0)
    started = time.monotonic()
    with pytest.raises(ImdsError, match="instance metadata service"):
        client.get(SPOT_ACTION)
    assert time.monotonic() - started < 2
    watcher = InterruptionWatcher(client, lambda n: None, interval=0.05)
    watcher.start()
    time.sleep(0.3)
    assert watcher.is_alive() and watcher.notice is None
    watcher.stop()
    watcher.join(timeout=5)


def test_an_unparsable_answer_from_auto_scaling_is_a_warning_not_a_crash(monkeypatch, caplog):
    """An HTML 500 from the Auto Scaling API (a page that is not XML: &nbsp;) makes botocore raise ResponseParserError,
    which is no BotoCoreError: completing the hook fails with one warning, and the hook's timeout is the
    fallback, as for any other failure."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from worker.lifecycle import LifecycleHook, complete_after_drain

    class Html500(BaseHTTPRequestHandler):
        def log_message(self, *_args):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = b"<!DOCTYPE html><html><body>Internal&nbsp;Server&nbsp;Error</body></html>"
            self.send_response(500)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Html500)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    for name, value in {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{server.server_port}", "AWS_ACCESS_KEY_ID": "test",
                        "AWS_SECRET_ACCESS_KEY": "test", "AWS_MAX_ATTEMPTS": "1", "AWS_RETRY_MODE": "standard"}.items():
        monkeypatch.setenv(name, value)
    try:
        with FakeImds() as imds:
            imds.lifecycle_state = "Terminated"
            with caplog.at_level(logging.WARNING, logger="worker"):
                assert complete_after_drain(Imds(imds.endpoint), LifecycleHook("drain", "group", 5, 0.05)) is False
    finally:
        server.shutdown()
        server.server_close()
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "lifecycle: could not complete drain" in warning and "the hook will time out instead" in warning
