"""worker/runtime.py on its own: a real WorkerProcess (in a thread) against a ventilator and a sink played by
the test over real ZeroMQ sockets.  It introduces itself, asks for work within its credit, writes the task's
files and acknowledges to the sink before telling the ventilator, drops a hostile frame and goes on, hands
back what it has not started when draining, and says Hello again to a ventilator that forgot it."""

from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path

import pytest
import zmq

from common.wire import protocol
from tests.support.helpers import VOCAB, WIKI, free_ports, need_shared
from worker.runtime import WorkerOptions, WorkerProcess


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """A real job over wiki_00 in 64K tasks (planned by the ventilator's own code): (config, tasks, payloads)."""
    from tests.support.run_configs import run_config
    from ventilator.job import prepare_job

    need_shared()
    output = tmp_path_factory.mktemp("runtime") / "out"
    prepared = prepare_job(run_config(data=str(WIKI), output=str(output), vocab_file=str(VOCAB),
                                      task_size=64 * 1024, params={"dupe_factor": 1}))
    tasks = prepared.tasks[:3]
    return prepared.config, tasks, [prepared.reader.read(prepared.input_storage, t) for t in tasks], output


class Peers:
    """The ventilator's ROUTER and the sink's PULL, as the test drives them."""

    def __init__(self, sink_port: int):
        self.context = zmq.Context()
        self.router = self.context.socket(zmq.ROUTER)
        self.vport = self.router.bind_to_random_port("tcp://127.0.0.1")
        self.pull = self.context.socket(zmq.PULL)
        self.pull.bind(f"tcp://127.0.0.1:{sink_port}")
        self.worker: bytes | None = None

    def receive(self, kind: type, timeout: float = 30.0):
        """The next message of ``kind`` from the worker (others it sends meanwhile are skipped)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.router.poll(100):
                self.worker, frame = self.router.recv_multipart()
                message = protocol.decode(frame)
                if isinstance(message, kind):
                    return message
        raise AssertionError(f"no {kind.__name__} within {timeout}s")

    def send(self, message) -> None:
        self.router.send_multipart([self.worker, protocol.encode(message)])

    def ack(self, timeout: float = 60.0) -> protocol.TaskAck:
        assert self.pull.poll(int(timeout * 1000)), "no TaskAck reached the sink"
        return protocol.decode(self.pull.recv())

    def close(self) -> None:
        self.router.close(linger=0)
        self.pull.close(linger=0)
        self.context.term()


@pytest.fixture
def peers_and_worker(job):
    config, *_ = job
    (sink_port,) = free_ports(1)
    peers = Peers(sink_port)
    worker = WorkerProcess(WorkerOptions(ventilator=f"127.0.0.1:{peers.vport}", sink=f"127.0.0.1:{sink_port}",
                                         credit=2, drain_seconds=30))
    exit_code = []
    thread = threading.Thread(target=lambda: exit_code.append(worker.run()), daemon=True)
    thread.start()
    yield peers, worker, exit_code, thread
    if thread.is_alive() and peers.worker is not None:
        peers.send(protocol.Shutdown("the test is over"))  # holding nothing, it exits at once
    thread.join(timeout=60)
    peers.close()
    assert not thread.is_alive()


def test_a_task_is_written_acknowledged_to_the_sink_then_finished(job, peers_and_worker):
    config, tasks, payloads, output = job
    peers, worker, exit_code, thread = peers_and_worker
    hello = peers.receive(protocol.Hello)
    assert hello.role == "worker" and hello.peer_id == worker.worker_id
    peers.send(config.welcome("vent-1"))
    request = peers.receive(protocol.TaskRequest)
    assert request.credit == 2  # its credit, no more
    peers.send(protocol.TaskAssignment(tasks[0].to_wire(), 60.0, 1, payloads[0]))
    ack = peers.ack()
    assert (ack.task_id, ack.job_id, ack.worker_id) == (tasks[0].task_id, config.job_id, worker.worker_id)
    assert ack.records > 0 and ack.stats.documents > 0 and ack.stats.cpu_seconds > 0
    for shard in ack.shards:  # on disk, whole, as acknowledged
        data = (Path(output) / shard.name).read_bytes()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (shard.bytes, shard.sha256)
    finished = peers.receive(protocol.TaskFinished)
    assert finished.task_id == tasks[0].task_id

    # A hostile but well-formed frame (a message it never receives) is dropped and counted; work goes on.
    peers.send(protocol.TasksDone([tasks[0].task_id]))
    peers.router.send_multipart([peers.worker, b"\x93\x01\x02\x03"])  # not a message at all
    peers.send(protocol.TaskAssignment(tasks[1].to_wire(), 60.0, 1, payloads[1]))
    assert peers.ack().task_id == tasks[1].task_id
    assert worker.dropped.total == 2 and any("TasksDone" in reason for reason in worker.dropped.dropped)


def test_draining_hands_back_what_it_has_not_started(job, peers_and_worker):
    config, tasks, payloads, _ = job
    peers, worker, exit_code, thread = peers_and_worker
    peers.receive(protocol.Hello)
    peers.send(config.welcome("vent-1"))
    peers.receive(protocol.TaskRequest)
    worker.draining = True
    peers.send(protocol.TaskAssignment(tasks[2].to_wire(), 60.0, 1, payloads[2]))
    returned = peers.receive(protocol.TaskReturned)
    assert returned.task_ids == [tasks[2].task_id]
    # It exits once the ventilator has answered its heartbeats up to the one that said it wants nothing more.
    deadline = time.monotonic() + 30
    while thread.is_alive():
        assert time.monotonic() < deadline, "the drained worker did not exit"
        try:
            beat = peers.receive(protocol.Heartbeat, timeout=2)
        except AssertionError:
            continue
        assert beat.awaiting == 0 and beat.held == []  # it wants nothing more
        peers.send(protocol.HeartbeatReply("vent-1"))
    assert exit_code == [0]


def test_a_ventilator_that_forgot_it_gets_hello_again(job, peers_and_worker):
    config, *_ = job
    peers, worker, exit_code, thread = peers_and_worker
    peers.receive(protocol.Hello)
    peers.send(config.welcome("vent-1"))
    peers.receive(protocol.Heartbeat)
    peers.send(protocol.HeartbeatReply("vent-2", known=False))  # a restarted ventilator
    again = peers.receive(protocol.Hello)
    assert again.peer_id == worker.worker_id


def test_a_job_it_cannot_run_is_declined_in_one_line_and_it_takes_the_next(job, peers_and_worker, caplog):
    """Every field of a Welcome is hostile: a tokenizer that is not JSON ended the worker with a
    JSONDecodeError, a plugin step it lacks with "unknown step" (and the job waited forever); then it failed
    each of the job's tasks it asked for at once, a black hole in a fleet of workers that can run it.  Now
    each is one line, and the worker declines the job (JobDeclined, with why): it asks for none of its
    tasks, hands back one granted anyway (TaskReturned: not an attempt), and takes the next job."""
    import dataclasses
    import logging

    from common.job.params import Component

    config, tasks, payloads, _ = job
    peers, worker, exit_code, thread = peers_and_worker
    hostile = {
        "not JSON": dataclasses.replace(config, tokenizer_json="{not json"),
        "JSON, not a tokenizer": dataclasses.replace(config, tokenizer_json='{"model": [1, 2]}'),
        "unknown step 'demo-drop-digits'": dataclasses.replace(
            config, steps=(*config.steps, Component("demo-drop-digits", {"max_digits": 3}))),
        "segment": dataclasses.replace(config, steps=tuple(
            Component(s.name, {"segmenter": 7}) if s.name == "segment" else s for s in config.steps)),
        "output": dataclasses.replace(config, output_uri="s3://"),
    }
    peers.receive(protocol.Hello)
    declines = []
    with caplog.at_level(logging.ERROR, logger="worker"):
        for number, (_says, welcome) in enumerate(hostile.items()):
            # Sent as a hostile ventilator would: its id is not computed (a step this process lacks has none).
            peers.send(protocol.Welcome(welcome.encoded(), config.job_id, f"vent-{number}"))
            declines.append(peers.receive(protocol.JobDeclined))
            peers.send(protocol.TaskAssignment(tasks[0].to_wire(), 60.0, 1, payloads[0]))  # granted anyway
            seen = []
            while not seen or not isinstance(seen[-1], protocol.TaskReturned):
                seen.append(peers.receive(object))
            assert seen[-1].task_ids == [tasks[0].task_id]
            assert not any(isinstance(m, (protocol.TaskRequest, protocol.TaskFailed)) for m in seen), seen
            beat = peers.receive(protocol.Heartbeat)  # it stays, asking for nothing
            assert beat.awaiting == 0 and beat.held == []
            assert thread.is_alive()
    lines = [record.getMessage() for record in caplog.records if "cannot run this job" in record.getMessage()]
    assert len(lines) == len(hostile) and all("\n" not in line for line in lines), lines
    assert "unknown step 'demo-drop-digits'" in lines[2] and "JSON" in lines[0] + lines[1], lines
    assert all(decline.job_id == config.job_id for decline in declines)
    assert "unknown step 'demo-drop-digits'" in declines[2].reason and "JSON" in declines[0].reason, declines
    assert all(decline.reason in line for decline, line in zip(declines, lines))

    # The same ventilator welcomes it again (it said Hello again): it declines again, and says so only once.
    peers.send(protocol.Welcome(hostile["output"].encoded(), config.job_id, "vent-again"))
    assert peers.receive(protocol.JobDeclined).reason == declines[-1].reason
    assert len([r for r in caplog.records if "cannot run this job" in r.getMessage()]) == len(hostile)

    peers.send(config.welcome("vent-good"))  # a job it can run: done as ever
    peers.receive(protocol.TaskRequest)
    peers.send(protocol.TaskAssignment(tasks[0].to_wire(), 60.0, 1, payloads[0]))
    assert peers.ack().task_id == tasks[0].task_id


def test_tasks_it_holds_are_finished_when_welcomed_to_a_job_it_cannot_run(job, peers_and_worker, caplog):
    """A worker running job A's tasks, welcomed to a job B it cannot run (a new ventilator), declines B and
    still finishes A's tasks, acknowledged to A's sink."""
    import dataclasses
    import logging

    config, tasks, payloads, _ = job
    peers, worker, exit_code, thread = peers_and_worker
    peers.receive(protocol.Hello)
    peers.send(config.welcome("vent-a"))
    assert peers.receive(protocol.TaskRequest).credit == 2
    with caplog.at_level(logging.INFO, logger="worker"):
        for task, payload in zip(tasks[:2], payloads[:2]):  # the second waits behind the first
            peers.send(protocol.TaskAssignment(task.to_wire(), 60.0, 1, payload))
        unusable = dataclasses.replace(config, tokenizer_json="{not json")
        peers.send(protocol.Welcome(unusable.encoded(), "0123456789abcdef", "vent-b"))
        assert peers.receive(protocol.JobDeclined).job_id == "0123456789abcdef"
        acks = {peers.ack().task_id, peers.ack().task_id}
    assert acks == {tasks[0].task_id, tasks[1].task_id}
    assert any("of the earlier job" in record.getMessage() for record in caplog.records)
    assert thread.is_alive()


def test_a_ventilator_of_another_version_is_said_not_waited_for_in_silence(monkeypatch, caplog):
    """A ventilator of another wire protocol answers in frames this worker drops: it waited for a Welcome that
    never came, saying nothing.  Past the silence it says so, naming the ventilator and its own protocol, once
    (then once a minute), and its idle exit still ends the wait."""
    from common import logs
    from common.wire import envelope

    monkeypatch.setattr(logs, "SILENCE_WARNING_SECONDS", 1.0)
    peers = Peers(free_ports(1)[0])
    worker = WorkerProcess(WorkerOptions(ventilator=f"127.0.0.1:{peers.vport}", idle_exit_seconds=4.0))
    exit_code = []
    thread = threading.Thread(target=lambda: exit_code.append(worker.run()), daemon=True)
    try:
        with caplog.at_level("WARNING", logger="worker"):
            thread.start()
            deadline = time.monotonic() + 60
            while thread.is_alive() and time.monotonic() < deadline:
                if peers.router.poll(100):
                    identity, _hello = peers.router.recv_multipart()
                    newer = protocol.Shutdown("speaks a newer protocol")
                    peers.router.send_multipart([identity, envelope.encode(newer, protocol.PROTOCOL_VERSION + 1)])
            thread.join(timeout=10)
    finally:
        peers.close()
    assert exit_code == [0]
    said = [r.getMessage() for r in caplog.records if "no answer from the ventilator" in r.getMessage()]
    assert len(said) == 1, said
    assert f"127.0.0.1:{peers.vport}" in said[0] and f"wire protocol {protocol.PROTOCOL_VERSION}" in said[0]
    assert worker.dropped.total > 0  # the other version's frames: counted and dropped, not acted on



def test_heartbeats_minutes_apart_answered_at_once_are_not_silence(job, monkeypatch, caplog):
    """A job's --heartbeat-seconds may be far longer than the silence the worker warns after: between two
    answered heartbeats nothing comes, and that is not a silent ventilator.  Only a Hello or Heartbeat left
    unanswered is (a reviewer's case: --heartbeat-seconds 45 warned once a minute all job long)."""
    import dataclasses

    from common import logs

    monkeypatch.setattr(logs, "SILENCE_WARNING_SECONDS", 1.0)
    config, *_ = job
    config = dataclasses.replace(config, heartbeat_seconds=3.0)  # three silences between two heartbeats
    peers = Peers(free_ports(1)[0])
    worker = WorkerProcess(WorkerOptions(ventilator=f"127.0.0.1:{peers.vport}", credit=1))
    thread = threading.Thread(target=worker.run, daemon=True)
    answered = 0
    try:
        with caplog.at_level("WARNING", logger="worker"):
            thread.start()
            end = time.monotonic() + 8.0
            while time.monotonic() < end:
                if peers.router.poll(100):
                    peers.worker, frame = peers.router.recv_multipart()
                    message = protocol.decode(frame)
                    if isinstance(message, protocol.Hello):
                        peers.send(config.welcome("vent-1"))
                    elif isinstance(message, protocol.Heartbeat):
                        peers.send(protocol.HeartbeatReply("vent-1"))
                        answered += 1
            peers.send(protocol.Shutdown("the test is over"))
            thread.join(timeout=30)
    finally:
        peers.close()
    assert answered >= 2  # heartbeats 3 s apart did come and were answered
    assert not [r for r in caplog.records if "from the ventilator at" in r.getMessage()]
