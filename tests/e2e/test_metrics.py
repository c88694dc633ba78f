"""Prometheus metrics of the ventilator and the sink, scraped over HTTP from
the real processes during a run and compared with the manifest."""

import signal
import socket
import subprocess
import sys
import time

import pytest

from tests.support.cluster import Cluster
from tests.support.helpers import REPO, VOCAB, WIKI, free_ports, manifest, need_shared, scrape
from ventilator.dispatcher import REQUEUE_REASONS

pytestmark = pytest.mark.e2e

JOB = ["--vocab-file", VOCAB, "--dupe-factor", "2", "--task-size", "64K"]


def wait_for(condition, what: str, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = condition()
        except OSError:  # not listening yet
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def test_metrics_follow_the_run(tmp_path):
    need_shared()
    ventilator_port, sink_port = free_ports(2)
    output = tmp_path / "out"
    cluster = Cluster(WIKI, output, [*JOB, "--metrics-port", ventilator_port], tmp_path)
    try:
        cluster.start_sink("--metrics-port", sink_port)
        cluster.start_ventilator()
        # No worker yet: every task is pending, and the sink has nothing.
        before = wait_for(lambda: (m := scrape(ventilator_port)).get(("mlm_ventilator_sink_ready", ())) and m,
                          "the sink to be ready")
        tasks = sum(v for (name, _), v in before.items() if name == "mlm_ventilator_tasks")
        assert tasks > 5
        assert before[("mlm_ventilator_tasks", (("state", "pending"),))] == tasks
        assert before[("mlm_ventilator_workers", ())] == 0
        assert before[("mlm_ventilator_input_bytes", ())] == sum(p.stat().st_size for p in WIKI.rglob("wiki_*"))
        assert scrape(sink_port)[("mlm_sink_tasks_total", ())] == 0

        # One worker does some of the job, then is frozen: the metrics must
        # come to agree with the manifest.
        worker = cluster.start_worker()
        cluster.wait_for_progress(2)
        worker.send_signal(signal.SIGSTOP)
        try:
            time.sleep(0.5)  # let acknowledgements in flight arrive
            entries = manifest(output)
            done = len(entries)
            assert 2 <= done < tasks

            def agreed():
                vent, sink = scrape(ventilator_port), scrape(sink_port)
                if vent[("mlm_ventilator_tasks", (("state", "done"),))] != done:
                    return None
                return vent, sink
            vent, sink = wait_for(agreed, "the ventilator to count the manifest's tasks done")
        finally:
            worker.send_signal(signal.SIGCONT)
        assert vent[("mlm_ventilator_workers", ())] == 1
        assert all(vent[("mlm_ventilator_requeued_total", (("reason", reason),))] == 0 for reason in REQUEUE_REASONS)
        assert vent[("mlm_ventilator_documents_total", ())] == sum(e["documents"] for e in entries.values())
        assert vent[("mlm_ventilator_input_bytes_done", ())] == sum(e["end"] - e["start"] for e in entries.values())
        assert sink[("mlm_sink_tasks_total", ())] == done
        assert sink[("mlm_sink_records_total", ())] == sum(e["records"] for e in entries.values())
        assert sink[("mlm_sink_tokens_total", ())] == sum(e["tokens"] for e in entries.values())
        assert sink[("mlm_sink_output_bytes_total", ())] == sum(e["bytes"] for e in entries.values())
        assert sink[("mlm_sink_worker_stage_seconds_total", (("stage", "tokenize"),))] > 0
        assert sink[("mlm_sink_rate", (("quantity", "documents"),))] > 0
        assert sink[("mlm_sink_duplicate_acks_total", ())] == 0

        assert cluster.wait(timeout=300) == 0, cluster.tail()
        assert len(manifest(output)) == tasks
    finally:
        cluster.close()


@pytest.mark.parametrize("role", ["ventilator", "sink"])
def test_a_busy_port_is_a_one_line_error(tmp_path, role):
    need_shared()
    vport, sink_port, metrics_port = free_ports(3)
    taken = socket.socket()
    taken.bind(("127.0.0.1", metrics_port))
    taken.listen()
    try:
        if role == "ventilator":
            args = ["--data", WIKI, "--output", tmp_path / "out", "--vocab-file", VOCAB, "--vport", vport,
                    "--sink", f"127.0.0.1:{sink_port}", "--bind-host", "127.0.0.1", "--metrics-port", metrics_port]
        else:
            args = ["--ventilator", f"127.0.0.1:{vport}", "--port", sink_port, "--bind-host", "127.0.0.1",
                    "--metrics-port", metrics_port]
        result = subprocess.run([sys.executable, "-m", role, *map(str, args)], cwd=REPO, capture_output=True,
                                text=True, timeout=120)
    finally:
        taken.close()
    assert result.returncode == 1
    assert f"cannot serve metrics on 127.0.0.1:{metrics_port}" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_sink_started_here_serves_its_metrics(tmp_path):
    """--sink-metrics-port reaches the sink the one-machine command starts
    (on --bind-host); with --sink it is refused, not ignored."""
    need_shared()
    vport, sink_port, metrics_port = free_ports(3)
    ventilator = subprocess.Popen([sys.executable, "-m", "ventilator", *map(str, [
        "--data", WIKI, "--output", tmp_path / "out", "--vocab-file", VOCAB, "--vport", vport, "--sink-port",
        sink_port, "--bind-host", "127.0.0.1", "--state-dir", tmp_path / "state", "--sink-metrics-port",
        metrics_port])], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:  # no worker: the job waits, and the sink's metrics say so
        sink = wait_for(lambda: scrape(metrics_port), "the sink's metrics")
        assert sink[("mlm_sink_tasks_total", ())] == 0
    finally:
        ventilator.send_signal(signal.SIGINT)
        out, _ = ventilator.communicate(timeout=120)
    assert ventilator.returncode == 130, out[-2000:]

    refused = subprocess.run([sys.executable, "-m", "ventilator", "--data", str(WIKI), "--output",
                              str(tmp_path / "other"), "--vocab-file", str(VOCAB), "--sink", "127.0.0.1:1",
                              "--sink-metrics-port", str(metrics_port)], cwd=REPO, capture_output=True, text=True,
                             timeout=120)
    assert refused.returncode == 1 and "--sink-metrics-port is for the sink this command starts" in refused.stderr


@pytest.mark.parametrize("role", ["ventilator", "sink"])
def test_a_port_out_of_range_is_a_usage_error(role):
    required = ["--data", "x", "--output", "y"] if role == "ventilator" else ["--ventilator", "127.0.0.1:1"]
    result = subprocess.run([sys.executable, "-m", role, *required, "--metrics-port", "70000"], cwd=REPO,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "70000 is not in the range" in result.stderr
