"""One job has one sink, and only it closes the job's books.

A second ``python -m sink`` started against a running ventilator (an easy mistake with a hand-started fleet) was
welcomed like the first: it read the manifest as it was then, and at the end each sink wrote summary.json and
dataset_info.json from its own view (18 tasks where the manifest held 48), while the ventilator said "done".  Now
it stands by, writing nothing.  A peer that said Hello as a sink could end the job with one SinkClosed; a
forged acknowledgement became a manifest line; a peer without a ZeroMQ identity put a NUL byte in the
ventilator's log.  Real processes over real sockets; the hostile peers are the test's."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import zmq

from common.job.tasks import Task
from common.wire import protocol
from tests.faults.test_faults import JOB
from tests.support.cluster import Cluster
from tests.support.helpers import REPO, WIKI, free_ports, manifest, need_shared

pytestmark = [pytest.mark.e2e, pytest.mark.faults]


def _wait_for(log: Path, *texts: str, process: subprocess.Popen | None = None, timeout: float = 180) -> str:
    """The first of ``texts`` that ``log`` holds (the roles log as they go)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        said = log.read_text(errors="replace") if log.exists() else ""
        for text in texts:
            if text in said:
                return text
        assert process is None or process.poll() is None, said[-3000:]
        time.sleep(0.1)
    raise AssertionError(f"{log.name} said none of {texts}")


def _books_agree(output: Path) -> dict:
    """summary.json and dataset_info.json count what the manifest lists, and mlm-verify finds no problem."""
    lines = manifest(output)
    summary = json.loads((output / "summary.json").read_text())
    assert summary["complete"] is True
    assert summary["tasks"] == len(lines)
    assert summary["records"] == sum(entry["records"] for entry in lines.values())
    assert summary["documents"] == sum(entry["documents"] for entry in lines.values())
    info = (output / "dataset_info.json").read_text()
    assert str(summary["records"]) in info
    verified = subprocess.run([sys.executable, "-m", "sink.verify", str(output)], cwd=REPO, capture_output=True,
                              text=True, timeout=300)
    assert verified.returncode == 0, verified.stderr[-2000:]
    return summary


def test_a_second_sink_on_a_running_job_stands_by_and_writes_nothing(tmp_path):
    need_shared()
    c = Cluster(WIKI, tmp_path / "out", JOB, tmp_path)
    try:
        c.start_sink()
        c.start_ventilator()
        _wait_for(c.logs[1], "ready:", process=c.ventilator)  # the job's sink said what is done
        (port,) = free_ports(1)
        second = c._start("second-sink", "sink", [
            "--ventilator", f"127.0.0.1:{c.vport}", "--port", port, "--bind-host", "127.0.0.1",
            "--state-dir", tmp_path / "state-2", "--publish-seconds", "1"])
        said = _wait_for(c.logs[-1], "standing by", "manifest", process=second)
        assert said == "standing by", c.tail()
        c.start_worker()
        c.start_worker()
        assert c.wait() == 0, c.tail()
        assert second.wait(timeout=120) == 0, c.tail()
    finally:
        c.close()
    second_log = c.logs[2].read_text()
    assert "it wrote nothing" in second_log and "manifest" not in second_log, second_log[-3000:]
    ventilator_log = c.logs[1].read_text()
    assert ventilator_log.count("stands by, writing nothing") == 1, ventilator_log[-3000:]
    assert not list((tmp_path / "state-2").glob("*/manifest.jsonl"))
    _books_agree(c.output)


def test_stray_frames_of_hostile_peers_leave_the_job_and_its_books_alone(tmp_path):
    """While a job runs, a peer without a ZeroMQ identity says Hello as a worker, takes a task and goes silent
    (its lease expires: logged with its identity), then says Hello as a sink and sends SinkClosed with an error
    and TasksDone; a forged acknowledgement reaches the sink.  The job ends 0 with books that agree."""
    need_shared()
    c = Cluster(WIKI, tmp_path / "out", JOB, tmp_path)
    context = zmq.Context()
    stranger = context.socket(zmq.DEALER)  # no identity: the ventilator's ROUTER names it "\0" + 4 bytes
    stranger.setsockopt(zmq.LINGER, 0)
    push = context.socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 0)

    def receive(kind: type, timeout: float = 120):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if stranger.poll(100):
                message = protocol.decode(stranger.recv())
                if isinstance(message, kind):
                    return message
        raise AssertionError(f"no {kind.__name__}: {c.tail()}")

    try:
        c.start_sink()
        c.start_ventilator()
        _wait_for(c.logs[1], "ready:", process=c.ventilator)
        stranger.connect(f"tcp://127.0.0.1:{c.vport}")
        stranger.send(protocol.encode(protocol.Hello("stranger", "nowhere", 1, "worker")))
        welcome = receive(protocol.Welcome)
        stranger.send(protocol.encode(protocol.TaskRequest(1)))
        held = receive(protocol.TaskAssignment)  # never finished: its lease expires into a real worker's hands
        stranger.send(protocol.encode(protocol.Hello("stranger", "nowhere", 1, "sink")))
        standby = receive(protocol.SinkStandby)
        assert standby.sink_id.startswith("sink-") and standby.takeover_seconds > 0
        task_id = Task.from_wire(held.task).task_id
        stranger.send(protocol.encode(protocol.TasksDone([task_id], 10**6)))
        stranger.send(protocol.encode(protocol.SinkClosed("boom: the stranger says the books cannot be kept")))
        push.connect(f"tcp://127.0.0.1:{c.sink_port}")
        forged = protocol.TaskAck("f" * 20, welcome.job_id, "intruder", "forged-source", 0, 1, "v", [], 0,
                                  protocol.AckStats(documents=10**6))
        push.send(protocol.encode(forged))
        c.start_worker()
        c.start_worker()
        assert c.wait() == 0, c.tail()
    finally:
        stranger.close()
        push.close()
        context.term()
        c.close()
    ventilator_log = c.logs[1].read_bytes()
    assert b"\x00" not in ventilator_log
    assert b"lease expired (worker \\x00" in ventilator_log, ventilator_log[-3000:]
    assert b"boom" not in ventilator_log
    lines = manifest(c.output)
    assert "f" * 20 not in lines
    summary = _books_agree(c.output)
    assert summary["documents"] < 10**6
    assert summary["dropped_messages"].get("ack whose task id is not its range's") == 1, summary["dropped_messages"]
