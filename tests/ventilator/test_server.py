"""ventilator/server.py on its own: a real VentilatorServer (in a thread) serving a real job, its sink and
workers played by the test over real ZeroMQ sockets.  Nothing is leased before the sink has said which tasks
are done; leases go out within a worker's credit and expire into another worker's hands; hostile frames are
counted and dropped; the run completes when the sink has every task."""

from __future__ import annotations

import threading
import time

import pytest
import zmq

from common.job.config import JobConfig
from common.wire import protocol
from tests.support.helpers import VOCAB, WIKI, free_ports, need_shared
from ventilator.server import ServerOptions, VentilatorServer


@pytest.fixture
def job(tmp_path):
    """A real job over wiki_00 in 256K tasks, with short leases (planned by the ventilator's own code)."""
    from tests.support.run_configs import run_config
    from ventilator.job import prepare_job

    need_shared()
    return prepare_job(run_config(data=str(WIKI), output=str(tmp_path / "out"), vocab_file=str(VOCAB),
                                  task_size=256 * 1024, lease_seconds=1.5, heartbeat_seconds=0.5))


class Peer:
    """A DEALER to the server: a worker or a sink as the test plays it."""

    def __init__(self, context, port: int, name: str):
        self.socket = context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.IDENTITY, name.encode())
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.connect(f"tcp://127.0.0.1:{port}")
        self.name = name

    def send(self, message) -> None:
        self.socket.send(protocol.encode(message))

    def receive(self, kind: type, timeout: float = 20.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.socket.poll(100):
                message = protocol.decode(self.socket.recv())
                if isinstance(message, kind):
                    return message
        raise AssertionError(f"{self.name}: no {kind.__name__} within {timeout}s")

    def nothing_of(self, kind: type, seconds: float) -> bool:
        try:
            self.receive(kind, seconds)
        except AssertionError:
            return True
        return False


@pytest.fixture
def served(job):
    (port,) = free_ports(1)
    server = VentilatorServer(job, ServerOptions(bind_host="127.0.0.1", port=port, report_seconds=3600,
                                                 confirm_seconds=5))
    results = []
    thread = threading.Thread(target=lambda: results.append(server.run()), daemon=True)
    thread.start()
    context = zmq.Context()
    peers = []

    def peer(name: str) -> Peer:
        peers.append(Peer(context, port, name))
        return peers[-1]

    yield server, peer, results, thread
    server.interrupted = True
    thread.join(timeout=30)
    for each in peers:
        each.socket.close(linger=0)
    context.term()


def introduce(peer: Peer, role: str, job_id: str, done: dict | None = None) -> protocol.Welcome:
    peer.send(protocol.Hello(peer.name, "test-host", 1, role))
    if role == "sink":
        peer.send(protocol.SinkHello(peer.name, job_id, done or {}))
    return peer.receive(protocol.Welcome)


def test_leases_wait_for_the_sink_then_follow_credit_and_the_run_completes(job, served):
    server, peer, results, thread = served
    worker, sink = peer("worker-a"), peer("sink-a")
    welcome = introduce(worker, "worker", job.config.job_id)
    assert welcome.job_id == job.config.job_id and JobConfig.from_welcome(welcome) == job.config
    worker.send(protocol.TaskRequest(2))
    assert worker.nothing_of(protocol.TaskAssignment, 1.5), "a task was leased before the sink said what is done"

    total = len(job.tasks)
    done_already = {job.tasks[0].task_id: job.tasks[0].version}
    introduce(sink, "sink", job.config.job_id, done_already)
    leased = [worker.receive(protocol.TaskAssignment) for _ in range(2)]
    assert worker.nothing_of(protocol.TaskAssignment, 0.5), "more than its credit"
    ids = set()
    while len(ids) < total - 1:
        for assignment in leased:
            task_id = protocol_task_id(assignment)
            assert task_id not in done_already and task_id not in ids
            ids.add(task_id)
            worker.send(protocol.TaskFinished(task_id))
            sink.send(protocol.TasksDone([task_id]))
        worker.send(protocol.TaskRequest(len(leased)))
        leased = [] if len(ids) == total - 1 else [worker.receive(protocol.TaskAssignment)]
    sink.receive(protocol.Shutdown)
    assert sink.nothing_of(protocol.Shutdown, 1.0) and thread.is_alive(), "it must wait for the sink's books"
    sink.send(protocol.SinkClosed())  # manifest and summary.json published
    thread.join(timeout=30)
    assert results and results[0].completed, results
    assert not results[0].quarantined and not results[0].error


def protocol_task_id(assignment: protocol.TaskAssignment) -> str:
    from common.job.tasks import Task

    return Task.from_wire(assignment.task).task_id


def test_an_expired_lease_goes_to_another_worker_as_its_next_attempt(job, served):
    server, peer, results, thread = served
    slow, other, sink = peer("worker-slow"), peer("worker-b"), peer("sink-a")
    introduce(sink, "sink", job.config.job_id)
    introduce(slow, "worker", job.config.job_id)
    slow.send(protocol.TaskRequest(1))
    first = slow.receive(protocol.TaskAssignment)
    assert first.attempt == 1
    introduce(other, "worker", job.config.job_id)  # the slow worker never heartbeats: its lease runs out
    other.send(protocol.TaskRequest(len(job.tasks)))
    seen = {}
    deadline = time.monotonic() + 20
    while protocol_task_id(first) not in seen:
        assert time.monotonic() < deadline, "the expired task never came back"
        assignment = other.receive(protocol.TaskAssignment)
        seen[protocol_task_id(assignment)] = assignment.attempt
        other.send(protocol.Heartbeat(sorted(seen), len(job.tasks) - len(seen)))  # still awaiting the rest
    assert seen[protocol_task_id(first)] == 2


def test_hostile_frames_are_counted_and_dropped_and_the_server_goes_on(job, served):
    server, make_peer, results, thread = served
    peer = make_peer("worker-x")
    peer.socket.send(b"\x00not msgpack")
    peer.socket.send_multipart([b"two", b"frames"])
    peer.send(protocol.TaskFinished("0" * 20))  # before any Hello
    peer.send(protocol.Hello("sink?", "h", 1, "stranger"))  # an unknown role
    welcome = introduce(peer, "worker", job.config.job_id)  # and it still serves
    assert welcome.job_id == job.config.job_id and JobConfig.from_welcome(welcome) == job.config
    deadline = time.monotonic() + 10
    while server.dropped.total < 4:
        assert time.monotonic() < deadline, server.dropped.dropped
        time.sleep(0.05)
    assert thread.is_alive()


def test_the_sink_hears_each_worker_hosts_span_before_shutdown(job, served):
    """Host A booted during the job (billed from its boot), host B was up before it (billed from its Hello):
    the sink gets both spans, to the last message heard from each, before the Shutdown that ends its books."""
    server, peer, results, thread = served
    sink, a, b = peer("sink-a"), peer("worker-a"), peer("worker-b")
    introduce(sink, "sink", job.config.job_id)
    booted = server.hosts.started + 0.05
    time.sleep(0.3)
    a.send(protocol.Hello(a.name, "host-a", 1, "worker", booted))
    a.receive(protocol.Welcome)
    hello_b = time.time()
    b.send(protocol.Hello(b.name, "host-b", 2, "worker", server.hosts.started - 3600))
    b.receive(protocol.Welcome)
    a.send(protocol.TaskRequest(len(job.tasks)))
    done = []
    for _ in job.tasks:
        done.append(protocol_task_id(a.receive(protocol.TaskAssignment)))
        time.sleep(0.02)
        a.send(protocol.TaskFinished(done[-1]))
    last_a = time.time()
    sink.send(protocol.TasksDone(done))
    spans = sink.receive(protocol.WorkerHosts).hosts
    sink.receive(protocol.Shutdown)
    sink.send(protocol.SinkClosed("could not publish summary.json: the store is down"))
    thread.join(timeout=30)
    assert results and not results[0].completed  # every task done, but an output without its summary is no success
    assert results[0].error == "the sink could not finish the job: could not publish summary.json: the store is down"
    assert set(spans) == {"host-a", "host-b"}
    assert spans["host-a"][0] == pytest.approx(booted, abs=0.01), "booted during the job: billed from its boot"
    assert spans["host-a"][1] == pytest.approx(last_a, abs=0.5) and spans["host-a"][1] >= spans["host-a"][0] + 0.3
    assert hello_b - 0.01 <= spans["host-b"][0] <= spans["host-b"][1], "up before the job: billed from its Hello"


def test_a_ventilator_without_a_sink_says_so_once_a_minute(served, caplog):
    """A ventilator restarted after its job ended (the sink gone) hands out nothing and waited in silence, its
    progress line saying only "0 workers": past NO_SINK_WARNING_SECONDS it warns, then once a minute (checked
    with the housekeeping, whatever --report-seconds).  A sink that has joined but not yet sent its done list
    (a large manifest being read) is named instead of being called unreachable."""
    from ventilator.server import NO_SINK_WARNING_SECONDS

    server, peer, _results, _thread = served
    deadline = time.monotonic() + 60
    while server._dispatcher is None:  # its task table built: serving since then
        assert time.monotonic() < deadline, "the ventilator never started serving"
        time.sleep(0.05)
    start = server._serving_since

    def warnings_at(seconds: range) -> list[str]:
        caplog.clear()
        with caplog.at_level("WARNING", logger="ventilator.server"):
            for second in seconds:
                server._warn_without_sink(start + second)
        return [r.getMessage() for r in caplog.records if "tasks are done" in r.getMessage()]

    limit = int(NO_SINK_WARNING_SECONDS)
    assert warnings_at(range(0, limit)) == [], "warned before the sink had time to come"
    said = warnings_at(range(limit + 1, limit + 131, 2))
    assert len(said) == 3 and all("no sink has said" in line for line in said), said  # 31 s, 93 s, 155 s

    sink = peer("sink-slow")
    sink.send(protocol.Hello(sink.name, "test-host", 1, "sink"))  # joined; its SinkHello (done list) not sent
    sink.receive(protocol.Welcome)
    said = warnings_at(range(limit + 200, limit + 201))
    assert len(said) == 1 and said[0].startswith("sink sink-slow joined"), said

    server.sink_ready = True
    assert warnings_at(range(limit + 400, limit + 401)) == []


def test_a_resumes_done_list_is_applied_part_by_part_and_the_job_ends_only_after_its_last(job, served, monkeypatch):
    """A sink resuming a large output lists its done tasks in parts (5,000 a SinkHello).  With nothing done
    yet, each part is applied as it comes (its tasks DONE at once, one lookup each) rather than gathered and
    set against every task at the last (``Dispatcher.resync``, a pass over a million tasks); and the job is
    not called complete before the last part, even when the parts so far cover every task."""
    from ventilator.dispatcher import Dispatcher, State

    passes = []
    resync = Dispatcher.resync
    monkeypatch.setattr(Dispatcher, "resync", lambda self, done: passes.append(len(done)) or resync(self, done))
    server, peer, results, thread = served
    assert len(job.tasks) >= 2
    sink = peer("sink-resuming")
    sink.send(protocol.Hello(sink.name, "test-host", 1, "sink"))
    sink.receive(protocol.Welcome)
    listed = {task.task_id: task.version for task in job.tasks}
    first = dict(list(listed.items())[:len(listed) // 2])
    sink.send(protocol.SinkHello(sink.name, job.config.job_id, first, last=False))
    deadline = time.monotonic() + 30
    while server._dispatcher is None or server.dispatcher.counts[State.DONE] < len(first):
        assert time.monotonic() < deadline, "the first part was not applied before the last came"
        time.sleep(0.05)
    assert not server.sink_ready
    sink.send(protocol.SinkHello(sink.name, job.config.job_id, listed, last=False))  # every task: more to come
    assert sink.nothing_of(protocol.Shutdown, 1.0) and thread.is_alive(), "complete before the last part"
    assert server.dispatcher.counts[State.DONE] == len(job.tasks)
    sink.send(protocol.SinkHello(sink.name, job.config.job_id, {}, last=True))
    sink.receive(protocol.Shutdown)
    sink.send(protocol.SinkClosed())
    thread.join(timeout=30)
    assert results and results[0].completed and results[0].reason == "all tasks done", results
    assert passes == [], "a pass over every task"
