"""Google Compute Engine notices: the pure classification, and the client against a real HTTP server that
answers as the metadata server does (Metadata-Flavor both ways)."""

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.support.fake_gcp import FakeGceMetadata
from worker.gce_metadata import MAINTENANCE_EVENT, PREEMPTED, GceMetadata, GceNotices, classify, metadata_host
from worker.interruption import InterruptionWatcher, MetadataError

NOW = 1_000_000.0


def test_no_notice_while_running():
    assert classify("FALSE", "NONE", NOW, 90) is None
    assert classify(None, None, NOW, 90) is None
    assert classify("FALSE", "MIGRATE_ON_HOST_MAINTENANCE", NOW, 90) is None, "a live migration stops nothing"


def test_preemption_drains_within_its_thirty_seconds():
    notice = classify("TRUE", "NONE", NOW, drain_seconds=90)
    assert notice.kind == "spot-preemption" and notice.release_at == NOW + 25
    assert classify("TRUE\n", None, NOW, drain_seconds=10).release_at == NOW + 10


def test_a_terminating_maintenance_event_drains_within_its_minute():
    notice = classify("FALSE", "TERMINATE_ON_HOST_MAINTENANCE", NOW, drain_seconds=90)
    assert notice.kind == "host-maintenance" and notice.release_at == NOW + 55


def test_host_as_googles_clients_find_it(monkeypatch):
    monkeypatch.delenv("GCE_METADATA_HOST", raising=False)
    assert metadata_host() == "metadata.google.internal"
    monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:8080")
    assert metadata_host() == "127.0.0.1:8080"
    assert metadata_host("10.0.0.1") == "10.0.0.1"


def test_the_watcher_calls_back_once_when_preempted():
    with FakeGceMetadata() as metadata:
        client = GceMetadata(metadata.host)
        assert client.get(PREEMPTED) == "FALSE" and client.get(MAINTENANCE_EVENT) == "NONE"
        assert client.get("instance/no-such-key") is None
        seen = []
        done = threading.Event()
        watcher = InterruptionWatcher(GceNotices(client), lambda n: (seen.append(n), done.set()), interval=0.05)
        watcher.start()
        metadata.preempted = True
        assert done.wait(30), "no notice"
        watcher.join(30)
    assert [n.kind for n in seen] == ["spot-preemption"]


def test_a_server_that_is_not_the_metadata_server_is_refused():
    """An answer without Metadata-Flavor: Google (a captive proxy, another service on the port) is no notice."""
    class Plain(BaseHTTPRequestHandler):
        def log_message(self, *_args):
            pass

        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", "4")
            self.end_headers()
            self.wfile.write(b"TRUE")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Plain)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(MetadataError, match="not a metadata server"):
            GceMetadata(f"127.0.0.1:{server.server_address[1]}").get(PREEMPTED)
    finally:
        server.shutdown()
        server.server_close()


def test_unreachable_is_an_error_not_a_notice():
    with pytest.raises(MetadataError):
        GceMetadata("127.0.0.1:9", timeout=0.5).get(PREEMPTED)
