"""Workers that cannot run the job (JobDeclined): ventilator/declines.py's bookkeeping on its own, the
dispatcher's give-up, and a real VentilatorServer over real ZeroMQ with its workers and sink played by the
test: a declining worker is granted nothing more of the job, the others finish it, a worker that says Hello
again may work, a fleet where every worker declined ends with the reason, and hostile declines (hypothesis)
are bounded and escaped."""

from __future__ import annotations

import time

import msgpack
import pytest
import zmq
from hypothesis import strategies as st

from common.wire import protocol
from tests.common.test_inbox import sockets  # noqa: F401  (the fixture)
from tests.support.helpers import drawn_values
from tests.ventilator.test_server import Peer, introduce, job, protocol_task_id, served  # noqa: F401  (fixtures)
from ventilator.declines import MAX_REASON_CHARS, MAX_REASONS, Declines, sanitized
from ventilator.dispatcher import Dispatcher, State
from ventilator.server import ServerOptions, VentilatorServer

REASON = "ValueError: unknown step 'demo-drop-digits' (known: read, segment, tokenize, objective, write)"


# ventilator/declines.py -----------------------------------------------------------------------------------------
def test_a_worker_is_counted_once_and_the_line_names_the_reasons():
    declines = Declines(give_up_after=10)
    assert declines.line() == "" and declines.count == 0
    assert declines.add("worker-a", REASON) and not declines.add("worker-a", REASON)  # said again: once
    assert declines.line() == f"1 worker(s) cannot run this job: {REASON}"
    declines.add("worker-b", REASON)
    declines.add("worker-c", "ModuleNotFoundError: No module named 'blingfire'")
    assert declines.count == 3
    assert declines.line() == (f"3 worker(s) cannot run this job: {REASON} (2); "
                               "ModuleNotFoundError: No module named 'blingfire' (1)")
    for number in range(2 * MAX_REASONS):  # reasons are bounded; workers are all counted
        declines.add(f"worker-{number}", f"reason {number}")
    assert len(declines.by_reason) == MAX_REASONS and declines.count == 3 + 2 * MAX_REASONS
    assert declines.line().endswith(f"other reasons ({declines.other_reasons})")
    assert sum(declines.by_reason.values()) + declines.other_reasons == declines.count


@pytest.mark.parametrize("hostile", ["a\nb\x00c\x1b[2J", "x" * 10_000_000, "", '{"json": [1, 2', "\\x00", "\u202e"])
def test_a_reason_is_one_bounded_escaped_line(hostile):
    line = sanitized(hostile)
    assert 0 < len(line) <= MAX_REASON_CHARS
    assert line.isprintable() and "\n" not in line and "\x00" not in line and "\x1b" not in line
    assert sanitized("\\x00") != sanitized("\x00")  # escaped both ways: two reasons never print alike


def test_the_job_is_given_up_on_only_once_every_live_worker_declined_for_the_bound():
    declines = Declines(give_up_after=10)
    assert not declines.nobody_can_run([], 0.0)  # no worker at all: the wait for workers, not a give-up
    assert not declines.nobody_can_run([True], 1.0)
    assert not declines.nobody_can_run([True, True], 10.9)
    assert declines.nobody_can_run([True, True], 11.0)
    assert declines.nobody_can_run([True], 12.0)  # and every time after (leases that expire come back)
    assert not declines.nobody_can_run([True, False], 13.0)  # a worker that can run it joined: wait again
    assert not declines.nobody_can_run([True], 14.0)
    assert not declines.nobody_can_run([], 30.0)  # every worker gone: not a job nobody can run
    assert not declines.nobody_can_run([True], 31.0)
    assert declines.nobody_can_run([True], 41.0)


def test_the_dispatcher_quarantines_only_the_tasks_waiting_of_every_stage(job):
    import dataclasses

    tasks = [*job.tasks, *[dataclasses.replace(task, stage="finish") for task in job.tasks[:2]]]
    dispatcher = Dispatcher(tasks, 60.0, 5.0, 3)
    leased = dispatcher.lease("worker-a", 0.0)
    dispatcher.mark_done([job.tasks[1].task_id])
    given_up = dispatcher.quarantine_pending("no worker can run this job: 1 worker(s) cannot run this job: x")
    assert {entry.task.task_id for entry in given_up} == {t.task_id for t in tasks} - {
        leased.task.task_id, job.tasks[1].task_id}
    assert all(entry.errors == ["no worker can run this job: 1 worker(s) cannot run this job: x"]
               and entry.failures == 0 for entry in given_up)  # no attempt was spent on them
    assert dispatcher.counts[State.LEASED] == 1 and not dispatcher.complete
    assert dispatcher.failed("worker-a", leased.task.task_id, "boom", 1.0) is None  # its lease keeps its course
    assert dispatcher.quarantine_pending("again") and dispatcher.complete


# the server, over real ZeroMQ ------------------------------------------------------------------------------------
def wait_for(condition, timeout: float = 20.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_a_declining_worker_is_granted_nothing_and_the_others_finish_the_job(job, served):
    server, peer, results, thread = served
    sink, bad, good = peer("sink-a"), peer("worker-bad"), peer("worker-good")
    introduce(sink, "sink", job.config.job_id)
    introduce(bad, "worker", job.config.job_id)
    bad.send(protocol.TaskRequest(1))  # asked before its Welcome was read: one task granted
    granted = bad.receive(protocol.TaskAssignment)
    dropped = server.dropped.total
    bad.send(protocol.JobDeclined("0123456789abcdef", REASON))  # another job's: dropped, counted
    bad.send(protocol.JobDeclined(job.config.job_id, REASON))
    bad.send(protocol.TaskReturned([protocol_task_id(granted)]))  # back to the queue: not an attempt
    entry = server.dispatcher.entries[protocol_task_id(granted)]
    wait_for(lambda: server.declines.count == 1 and entry.state is State.PENDING, what="not declined, not returned")
    assert server.dropped.total == dropped + 1
    assert entry.state is State.PENDING and entry.attempts == 0 and entry.failures == 0
    bad.send(protocol.TaskRequest(len(job.tasks)))  # a hostile one asks anyway: granted nothing
    bad.send(protocol.Heartbeat([protocol_task_id(granted)], len(job.tasks)))  # and says it holds one
    assert bad.nothing_of(protocol.TaskAssignment, 1.0)
    assert entry.state is State.PENDING and entry.worker == ""
    bad.send(protocol.JobDeclined(job.config.job_id, "another reason"))  # said again: counted once
    introduce(good, "worker", job.config.job_id)
    good.send(protocol.TaskRequest(len(job.tasks)))
    done = []
    for _ in job.tasks:
        done.append(protocol_task_id(good.receive(protocol.TaskAssignment)))
        good.send(protocol.TaskFinished(done[-1]))
    sink.send(protocol.TasksDone(done))
    assert sorted(done) == sorted(task.task_id for task in job.tasks)
    assert bad.nothing_of(protocol.TaskAssignment, 0.2)
    shutdown = sink.receive(protocol.Shutdown)
    assert shutdown.reason == f"job finished: all tasks done; 1 worker(s) cannot run this job: {REASON}"
    values = {sample.name: sample.value for family in server.metrics() for sample in family.samples}
    assert values["mlm_ventilator_declining_workers_total"] == 1
    sink.send(protocol.SinkClosed())
    thread.join(timeout=30)
    assert results and results[0].completed and not results[0].quarantined, results
    assert results[0].reason.endswith(f"1 worker(s) cannot run this job: {REASON}")


def test_a_worker_that_declined_works_again_once_it_says_hello_again(job, served):
    """A Hello is a new start (a restarted process, the plugin installed meanwhile): its credit counts again."""
    server, peer, results, thread = served
    sink, worker = peer("sink-a"), peer("worker-a")
    introduce(sink, "sink", job.config.job_id)
    introduce(worker, "worker", job.config.job_id)
    worker.send(protocol.JobDeclined(job.config.job_id, REASON))
    wait_for(lambda: server.declines.count == 1)
    worker.send(protocol.TaskRequest(1))
    assert worker.nothing_of(protocol.TaskAssignment, 0.5)
    time.sleep(server._rewelcome_after)  # a Hello sooner after its Welcome is a repeat, not answered
    introduce(worker, "worker", job.config.job_id)
    worker.send(protocol.TaskRequest(1))
    assert worker.receive(protocol.TaskAssignment).attempt == 1
    assert server.declines.count == 1  # it is still counted: it declined once in this run


def test_a_job_every_worker_declined_ends_with_the_reason_not_a_hang(job, served):
    """Every worker heard from declined it, for the bound: the tasks left are quarantined with why, so the job
    ends (exit status 3 for the command) instead of waiting for a worker that can run it."""
    server, peer, results, thread = served
    sink, bad = peer("sink-a"), peer("worker-bad")
    introduce(sink, "sink", job.config.job_id)
    introduce(bad, "worker", job.config.job_id)
    bad.send(protocol.JobDeclined(job.config.job_id, REASON))
    started = time.monotonic()
    quarantined: dict[str, protocol.Quarantine] = {}
    while len(quarantined) < len(job.tasks):
        bad.send(protocol.Heartbeat([], 0))  # it stays, live, asking for nothing
        sink.send(protocol.Heartbeat())
        if sink.socket.poll(300):
            message = protocol.decode(sink.socket.recv())
            if isinstance(message, protocol.TasksQuarantined):
                quarantined.update(message.failures)
        assert time.monotonic() - started < server.declines.give_up_after + 30, "the job was never given up on"
    assert time.monotonic() - started >= server.declines.give_up_after - 0.5  # not before the bound
    why = f"no worker can run this job: 1 worker(s) cannot run this job: {REASON}"
    assert all(failure.errors == [why] for failure in quarantined.values())
    shutdown = sink.receive(protocol.Shutdown)
    assert shutdown.reason == (f"job finished: {len(job.tasks)} task(s) quarantined; "
                               f"1 worker(s) cannot run this job: {REASON}")
    sink.send(protocol.SinkClosed())
    thread.join(timeout=30)
    assert results and not results[0].completed and len(results[0].quarantined) == len(job.tasks)


def test_a_worker_that_can_run_it_joining_in_time_keeps_the_job(job, served):
    """The bound is what tells "no worker can run it" from "the workers that can have not joined yet"."""
    server, peer, results, thread = served
    sink, bad, good = peer("sink-a"), peer("worker-bad"), peer("worker-good")
    introduce(sink, "sink", job.config.job_id)
    introduce(bad, "worker", job.config.job_id)
    bad.send(protocol.JobDeclined(job.config.job_id, REASON))
    wait_for(lambda: server.declines.count == 1)
    introduce(good, "worker", job.config.job_id)  # well within the bound
    deadline = time.monotonic() + server.declines.give_up_after + 2
    while time.monotonic() < deadline:  # past the bound, both live: nothing is given up
        bad.send(protocol.Heartbeat([], 0))
        good.send(protocol.Heartbeat([], 0))
        sink.send(protocol.Heartbeat())
        assert sink.nothing_of(protocol.TasksQuarantined, 0.5)
    assert server.dispatcher.counts[State.QUARANTINED] == 0


# hostile declines (hypothesis) ---------------------------------------------------------------------------------
_hostile_text = st.one_of(st.text(max_size=64), st.text(min_size=5000, max_size=20000),
                          st.sampled_from(['{"a": [1, 2', "\x00\n\x1b[2J", "\\u0000", "inf", "NaN", "\U0010ffff"]))


def test_hostile_declines_are_bounded_escaped_and_grant_nothing(job, sockets):
    """JobDeclined frames drawn by hypothesis (any reason: huge, control characters, bad JSON; any job id of the
    declared form; wrongly typed fields) from workers of the job: each is taken, once per worker, bounded and
    escaped, or dropped and counted; no declining worker is granted a task; the counts add up."""
    server = VentilatorServer(job, ServerOptions(report_seconds=3600))
    server._dispatcher = Dispatcher(job.tasks, job.config.lease_seconds, 5.0, 3)
    server.sink_ready = True
    router, first = sockets(zmq.ROUTER, zmq.DEALER, b"worker-0")

    def through(peer: zmq.Socket, frame: bytes) -> None:
        peer.send(frame)
        server._receive(router, router.recv_multipart())

    ids = st.one_of(st.just(job.config.job_id), st.from_regex("[0-9a-f]{16}", fullmatch=True),
                    st.text(max_size=20), st.integers(-2**63, 2**64 - 1), st.none(), st.binary(max_size=8))
    frames = drawn_values(st.builds(lambda job_id, reason: msgpack.packb(
        {"v": protocol.PROTOCOL_VERSION, "t": "JobDeclined", "job_id": job_id, "reason": reason},
        use_bin_type=True), ids, st.one_of(_hostile_text, st.integers(-2**63, 2**64 - 1), st.floats(), st.none(), st.lists(st.text()))),
        120)
    workers = [first]
    for number in range(1, 8):
        worker = router.context.socket(zmq.DEALER)
        worker.setsockopt(zmq.IDENTITY, f"worker-{number}".encode())
        sockets.made.append(worker)
        worker.connect(router.getsockopt_string(zmq.LAST_ENDPOINT))
        workers.append(worker)
    for number, worker in enumerate(workers):
        through(worker, protocol.encode(protocol.Hello(f"worker-{number}", "host", 1, "worker")))
        assert isinstance(protocol.decode(worker.recv()), protocol.Welcome)
    counted = set()
    for number, frame in enumerate(frames):
        worker = workers[number % len(workers)]
        dropped = server.dropped.total
        through(worker, frame)
        body = msgpack.unpackb(frame, raw=False)
        if body["job_id"] == job.config.job_id and isinstance(body["reason"], str):
            counted.add(number % len(workers))
            assert server.dropped.total == dropped
        else:
            assert server.dropped.total == dropped + 1, body
    assert server.declines.count == len(counted) > 0
    for peer in server.peers.values():
        assert len(peer.declined) <= MAX_REASON_CHARS and peer.declined.isprintable()
    line = server.declines.line()
    assert line.isprintable() and len(line) < (MAX_REASONS + 1) * (MAX_REASON_CHARS + 16) + 64
    for worker in workers:  # the declining ones ask for everything: only the others are granted tasks
        through(worker, protocol.encode(protocol.TaskRequest(len(job.tasks))))
    server._dispatch(router, time.monotonic())
    granted = {}
    for number, worker in enumerate(workers):
        while worker.poll(50):
            message = protocol.decode(worker.recv())
            if isinstance(message, protocol.TaskAssignment):
                granted[number] = granted.get(number, 0) + 1
    assert granted and not set(granted) & counted, (granted, counted)
