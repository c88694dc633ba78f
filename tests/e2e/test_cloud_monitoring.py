"""The ventilator's backlog in Google Cloud Monitoring, published while a real job runs.

Google's own auth client (google-auth's ``default()`` and ``AuthorizedSession``) finds Compute Engine
credentials on a fake metadata server and posts ``projects.timeSeries.create`` to a fake Monitoring API,
over real HTTP on loopback (tests/support/fake_gcp.py): the values follow the job from every task waiting to none,
the last says the job is no longer active with a backlog of 0 (what scales the group in), and every call
carried a token the metadata server issued."""

from datetime import UTC

import pytest

from tests.support.fake_gcp import FakeCloudMonitoring, FakeGceMetadata
from tests.support.helpers import VOCAB, WIKI, manifest, need_shared, run_ventilator
from ventilator.publishers.base import Backlog
from ventilator.publishers.cloud_monitoring import CloudMonitoringOptions, time_series

pytestmark = pytest.mark.e2e

PREFIX = "custom.googleapis.com/mlm-pipeline/test-fleet"
PROJECT = "mlm-test-project"


def test_time_series_shape():
    from datetime import datetime

    body = time_series(Backlog(5, 3, 4, 2), CloudMonitoringOptions(PROJECT, PREFIX),
                       datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))
    values = {s["metric"]["type"].rsplit("/", 1)[1]: int(s["points"][0]["value"]["int64Value"])
              for s in body["timeSeries"]}
    assert values == {"backlog": 8, "pending_tasks": 5, "leased_tasks": 3, "workers": 4, "worker_hosts": 2,
                      "job_active": 1}
    for series in body["timeSeries"]:
        assert series["metric"]["type"].startswith(PREFIX + "/")
        assert series["resource"] == {"type": "global", "labels": {"project_id": PROJECT}}, "a per-group metric"
        assert series["points"][0]["interval"]["endTime"] == "2026-01-02T03:04:05.000000Z"
    inactive = time_series(Backlog(7, 1, 0, 0, active=False), CloudMonitoringOptions(PROJECT, PREFIX),
                           datetime.now(UTC))
    last = {s["metric"]["type"].rsplit("/", 1)[1]: s["points"][0]["value"]["int64Value"] for s in inactive["timeSeries"]}
    assert last["backlog"] == "0" and last["job_active"] == "0", "a stopped ventilator leaves nothing to do"


def _env(metadata: FakeGceMetadata, tmp_path) -> dict[str, str]:
    """Application Default Credentials as on a VM: no key file, no gcloud configuration, the metadata server."""
    return {**metadata.env(), "GOOGLE_APPLICATION_CREDENTIALS": "", "CLOUDSDK_CONFIG": str(tmp_path / "gcloud"),
            "GOOGLE_CLOUD_PROJECT": ""}


def test_backlog_follows_a_real_job(tmp_path):
    need_shared()
    with FakeGceMetadata(PROJECT) as metadata, FakeCloudMonitoring(metadata) as monitoring:
        result = run_ventilator(WIKI, tmp_path / "out", "--vocab-file", VOCAB, "--dupe-factor", "20",
                                "--task-size", "256K", "--workers", "2", "--backlog-publisher", "cloud-monitoring",
                                "--cloud-monitoring-project", PROJECT, "--cloud-monitoring-prefix", PREFIX,
                                "--cloud-monitoring-endpoint", monitoring.endpoint,
                                "--cloud-monitoring-seconds", "0.2", env=_env(metadata, tmp_path))
        assert result.returncode == 0, result.stderr[-3000:]
        calls = list(monitoring.created)
        assert monitoring.refused == 0, "every call carried a token the metadata server issued"
    tasks = len(manifest(tmp_path / "out"))
    assert len(calls) >= 2, calls
    assert {c["path"] for c in calls} == {f"/v3/projects/{PROJECT}/timeSeries"}
    series = [{s["metric"]["type"].rsplit("/", 1)[1]: int(s["points"][0]["value"]["int64Value"])
               for s in c["body"]["timeSeries"]} for c in calls]
    backlog = [s["backlog"] for s in series]
    assert backlog[0] == tasks, "at the start every task waits"
    assert backlog == sorted(backlog, reverse=True), f"a clean run's backlog only shrinks: {backlog}"
    assert series[-1]["backlog"] == 0 and series[-1]["job_active"] == 0, series[-1]
    assert all(s["job_active"] == 1 for s in series[:-1])
    assert max(s["workers"] for s in series) == 2 and max(s["worker_hosts"] for s in series) == 1
    assert "job_active=0" in result.stderr


def test_unreachable_monitoring_does_not_stop_the_job(tmp_path):
    """The API answering 503 every time: logged once, the job finishes the same."""
    need_shared()
    with FakeGceMetadata(PROJECT) as metadata, FakeCloudMonitoring(metadata) as monitoring:
        monitoring.fail_next = 10**6
        result = run_ventilator(WIKI, tmp_path / "out", "--vocab-file", VOCAB, "--task-size", "1M", "--workers",
                                "1", "--backlog-publisher", "cloud-monitoring", "--cloud-monitoring-project", PROJECT,
                                "--cloud-monitoring-endpoint", monitoring.endpoint, "--cloud-monitoring-seconds",
                                "0.2", env=_env(metadata, tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr.count("cloud monitoring: cannot publish the backlog") == 1, result.stderr[-3000:]


@pytest.mark.parametrize("args, message", [
    (["--cloud-monitoring-project", PROJECT], "--cloud-monitoring-project is for --backlog-publisher cloud-monitoring"),
    (["--backlog-publisher", "cloud-monitoring"], "--backlog-publisher cloud-monitoring needs --cloud-monitoring-project"),
])
def test_a_half_given_publisher_is_refused_in_one_line(tmp_path, args, message):
    result = run_ventilator(tmp_path, tmp_path / "out", "--vocab-file", VOCAB, *args, timeout=60)
    assert result.returncode == 1
    assert result.stderr.strip() == f"ventilator: error: {message}", result.stderr


#: The publisher in a process of its own (google-auth reads GCE_METADATA_HOST once, at import): it publishes
#: once, waits for a line on stdin, closes, and prints how long close() took.
PUBLISHER = """
import logging, sys, time
logging.basicConfig(level=logging.INFO)
from ventilator.publishers.base import Backlog
from ventilator.publishers.cloud_monitoring import CloudMonitoringOptions, CloudMonitoringPublisher
project, prefix, endpoint, spacing = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
options = CloudMonitoringOptions(project, prefix, endpoint, interval_seconds=3600, min_spacing_seconds=spacing,
                                 close_seconds=2)
publisher = CloudMonitoringPublisher(None, lambda: Backlog(5, 3, 2, 1), options)
publisher.start()
sys.stdin.readline()
began = time.monotonic()
publisher.close()
print(f"closed in {time.monotonic() - began:.1f}s", flush=True)
"""


def _publisher(metadata, monitoring, tmp_path, spacing: float):
    import os
    import subprocess
    import sys

    from tests.support.helpers import REPO

    return subprocess.Popen([sys.executable, "-c", PUBLISHER, PROJECT, PREFIX, monitoring.endpoint, str(spacing)], cwd=REPO, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, **_env(metadata, tmp_path), "PYTHONPATH": str(REPO)})


def _wait_for(condition, within: float, what: str) -> None:
    import time

    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, f"not within {within:.0f}s: {what}"
        time.sleep(0.05)


def test_the_last_publication_keeps_googles_spacing(tmp_path):
    """Cloud Monitoring refuses a point closer than 5 s (here 1 s) to its series' last one: a job that ends
    just after a periodic publication must still get its job_active=0, backlog 0 point in."""
    with FakeGceMetadata(PROJECT) as metadata, FakeCloudMonitoring(metadata) as monitoring:
        monitoring.min_spacing_seconds = 1.0
        publisher = _publisher(metadata, monitoring, tmp_path, spacing=1.0)
        _wait_for(lambda: monitoring.created or publisher.poll() is not None, 60, "a first publication")
        out, err = publisher.communicate("close\n", timeout=60)
        assert publisher.returncode == 0, err
        calls = list(monitoring.created)
    assert monitoring.too_frequent == 0, f"a point refused as too frequent: {err}"
    last = {s["metric"]["type"].rsplit("/", 1)[1]: s["points"][0]["value"]["int64Value"]
            for s in calls[-1]["body"]["timeSeries"]}
    assert last["job_active"] == "0" and last["backlog"] == "0", (calls, err)
    assert "job_active=0" in err


def test_a_monitoring_api_that_never_answers_does_not_hold_the_ventilator(tmp_path):
    """Every call held open by the API: close() gives up within its bound, says so, and the process ends."""
    with FakeGceMetadata(PROJECT) as metadata, FakeCloudMonitoring(metadata) as monitoring:
        monitoring.hang.set()
        publisher = _publisher(metadata, monitoring, tmp_path, spacing=0.0)
        _wait_for(lambda: monitoring.held or publisher.poll() is not None, 60, "a call held")
        try:
            out, err = publisher.communicate("close\n", timeout=30)
        except Exception:
            publisher.kill()
            out, err = publisher.communicate()
            raise AssertionError(f"close() waited on a Monitoring API that does not answer: {err[-2000:]}") from None
    assert publisher.returncode == 0, err
    assert "closed in" in out
    assert "got no answer in time" in err and "job_active=0" not in err, "no success claimed for a call unanswered"


@pytest.mark.parametrize("answer", ["{}", '{"access_token": "x", "expires_in": "soon"}', "[1, 2]"])
def test_a_token_answer_google_auth_cannot_use_is_one_warning(tmp_path, answer):
    """A metadata server whose token answer google-auth trips on (KeyError, TypeError, ...: not its own error
    types): one warning, the publisher goes on, and no traceback, as for any failed publication."""
    with FakeGceMetadata(PROJECT) as metadata, FakeCloudMonitoring(metadata) as monitoring:
        metadata.token_answer = answer
        publisher = _publisher(metadata, monitoring, tmp_path, spacing=0.0)
        _wait_for(lambda: any("/token" in p for p in list(metadata.requests)) or publisher.poll() is not None,
                  60, "a token asked for")
        out, err = publisher.communicate("close\n", timeout=60)
    assert publisher.returncode == 0, err
    assert "Traceback" not in err, err[-3000:]
    assert err.count("cloud monitoring: cannot publish the backlog") == 1, err[-3000:]
