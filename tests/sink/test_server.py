"""The sink's end of a job, apart from sockets."""

import logging

from common.job.tasks import task_id_of
from common.storage import LocalStorage, StorageError
from sink.manifest import Manifest
from sink.server import SinkOptions, SinkServer
from tests.support.run_configs import steps_of


class Unreachable(LocalStorage):
    def put_bytes(self, name, data):
        raise StorageError(f"put {name}: endpoint down")


class PlayedVentilator:
    """A ventilator's ROUTER on a loopback port with no ventilator behind it, a real sink (in a thread) pointed at
    it, and a worker's PUSH to that sink: the test plays the ventilator's messages."""

    def __init__(self, tmp_path) -> None:
        import threading

        import zmq

        from tests.support.helpers import free_ports

        self.context = zmq.Context()
        self.router = self.context.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        vport = self.router.bind_to_random_port("tcp://127.0.0.1")
        (port,) = free_ports(1)
        self.server = SinkServer(SinkOptions(ventilator=f"127.0.0.1:{vport}", port=port, bind_host="127.0.0.1",
                                             state_dir=str(tmp_path / "state"), report_seconds=3600))
        self.status: list[int] = []
        self.thread = threading.Thread(target=lambda: self.status.append(self.server.run()), daemon=True)
        self.thread.start()
        self.push = self.context.socket(zmq.PUSH)
        self.push.setsockopt(zmq.LINGER, 0)
        self.push.connect(f"tcp://127.0.0.1:{port}")

    def receive(self, kind: type):
        """The sink's next message of ``kind`` (others skipped): (its identity, the message)."""
        from common.wire import protocol

        while True:
            assert self.router.poll(30_000), f"no {kind.__name__} from the sink"
            identity, frame = self.router.recv_multipart()
            message = protocol.decode(frame)
            if isinstance(message, kind):
                return identity, message

    def send(self, identity: bytes, message: object) -> None:
        from common.wire import protocol

        self.router.send_multipart([identity, protocol.encode(message)])

    def close(self) -> None:
        self.thread.join(30)
        self.push.close()
        self.router.close()
        self.context.term()


def test_a_manifest_it_cannot_publish_is_exit_status_1(tmp_path, caplog):
    """The ventilator has already exited 0: the sink's status is what tells
    the operator (and the one-machine command) that the output is incomplete."""
    server = SinkServer(SinkOptions(ventilator="127.0.0.1:1", state_dir=str(tmp_path / "state")))
    server.output = Unreachable(str(tmp_path / "out"))
    server.manifest = Manifest(server.output, "j1", str(tmp_path / "state"))
    server.manifest.load()
    with caplog.at_level(logging.ERROR, logger="sink"):
        assert server._finish("all tasks done", job_over=True) == 1
    assert "could not publish" in caplog.text and "run the ventilator's command again" in caplog.text

    server.output = LocalStorage(str(tmp_path / "out"))
    assert server._finish("all tasks done", job_over=True) == 0
    assert (tmp_path / "out" / "summary.json").exists()
    server.manifest.close()


def test_a_full_disk_under_the_manifest_does_not_end_the_sink(tmp_path, caplog):
    """ENOSPC while appending acknowledgements ended the sink with a traceback
    (OSError was not caught beside StorageError).  Now they stay unconfirmed
    (the ventilator has them done again), the journal keeps no torn line, and
    the sink goes on and writes its summary."""
    import errno
    import json

    from common.job.config import JobConfig
    from common.job.params import Component
    from common.wire import protocol
    from common.writers import ShardFile

    out = tmp_path / "out"
    server = SinkServer(SinkOptions(ventilator="127.0.0.1:1", state_dir=str(tmp_path / "state")))
    server.config = JobConfig(data_uri="d", output_uri=str(out), reader=Component("wikiextractor"),
                              steps=steps_of("line"), tokenizer_json="")
    server.output = LocalStorage(str(out))
    server.manifest = Manifest(server.output, server.config.job_id, str(tmp_path / "state"))
    server.manifest.load()
    (out / "a.tfrecord").write_bytes(b"shard")
    task = task_id_of("src", 0, 1)  # an acknowledgement names its task's range: the id is the range's
    ack = protocol.TaskAck(task, server.config.job_id, "w", "src", 0, 1, "v", [ShardFile("a.tfrecord", 1, "0", 5)],
                           1, protocol.AckStats())
    sent = []
    real = server.manifest._handle

    class HalfWrite:
        def write(self, data):
            real.write(data[:7])  # part of the line reaches the file, then the disk is full
            real.flush()
            raise OSError(errno.ENOSPC, "No space left on device")

        def close(self):
            real.close()

    server.manifest._handle = HalfWrite()
    with caplog.at_level(logging.ERROR, logger="sink"):
        server._record([ack], sent.append)
    assert sent == [] and server.unrecorded == 1 and "could not write 1 acknowledgement" in caplog.text
    assert (out / "manifest.jsonl").read_bytes() == b""  # the partial line was cut back
    server._record([ack], sent.append)  # the disk takes writes again: the redone task's ack is recorded
    assert [m.task_ids for m in sent if isinstance(m, protocol.TasksDone)] == [[task]]  # (then a Heartbeat)
    assert server._finish("all tasks done", job_over=True) == 0
    assert json.loads((out / "summary.json").read_text())["tasks"] == 1
    server.manifest.close()


def test_the_sink_keeps_the_books_under_the_job_id_its_welcome_carries(tmp_path):
    """The job id is computed once, by the ventilator, and carried in the Welcome: a real sink, played a
    ventilator over real sockets, lists its manifest, its SinkHello and its summary under the carried id (here
    not the one this config would compute), drops acknowledgements of any other, and still refuses an output
    whose manifest is another job's."""
    import json
    import threading

    import zmq

    from common.job.config import JobConfig
    from common.job.params import Component
    from common.wire import protocol
    from tests.support.helpers import free_ports

    out = tmp_path / "out"
    config = JobConfig(data_uri="d", output_uri=str(out), reader=Component("wikiextractor"), steps=steps_of("line"),
                       tokenizer_json="")
    carried = "feedfacefeedface"
    assert config.job_id != carried
    context = zmq.Context()
    ventilator = context.socket(zmq.ROUTER)
    ventilator.setsockopt(zmq.LINGER, 0)
    vport = ventilator.bind_to_random_port("tcp://127.0.0.1")

    def receive(kind: type):
        while True:
            assert ventilator.poll(30_000), f"no {kind.__name__} from the sink"
            identity, frame = ventilator.recv_multipart()
            message = protocol.decode(frame)
            if isinstance(message, kind):
                return identity, message

    def sink_for(job_id: str) -> tuple[bytes, list[int], threading.Thread, int]:
        (port,) = free_ports(1)
        server = SinkServer(SinkOptions(ventilator=f"127.0.0.1:{vport}", port=port, bind_host="127.0.0.1",
                                        state_dir=str(tmp_path / "state"), report_seconds=3600))
        status: list[int] = []
        thread = threading.Thread(target=lambda: status.append(server.run()), daemon=True)
        thread.start()
        identity, _hello = receive(protocol.Hello)
        ventilator.send_multipart([identity, protocol.encode(protocol.Welcome(config.encoded(), job_id, "v1"))])
        return identity, status, thread, port

    identity, status, thread, port = sink_for(carried)
    assert receive(protocol.SinkHello)[1].job_id == carried
    push = context.socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 0)
    push.connect(f"tcp://127.0.0.1:{port}")
    ranges = {"computed": ("src", 0, 1), "carried": ("src", 1, 2)}
    task = {name: task_id_of(*where) for name, where in ranges.items()}
    for name, job_id in (("computed", config.job_id), ("carried", carried)):
        push.send(protocol.encode(protocol.TaskAck(task[name], job_id, "w", *ranges[name], "v", [], 0,
                                                   protocol.AckStats())))
    assert receive(protocol.TasksDone)[1].task_ids == [task["carried"]]
    ventilator.send_multipart([identity, protocol.encode(protocol.Shutdown("done"))])
    assert receive(protocol.SinkClosed)[1].error == ""
    thread.join(30)
    assert status == [0]
    lines = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
    assert [(line["task"], line["job"]) for line in lines] == [(task["carried"], carried)]
    assert json.loads((out / "summary.json").read_text())["job"] == carried

    # Resuming this output under another id: its manifest is another job's, refused before any task.
    _identity, status, thread, _port = sink_for("0123456789abcdef")
    assert "another job" in receive(protocol.SinkClosed)[1].error
    thread.join(30)
    assert status == [1]
    push.close()
    ventilator.close()
    context.term()


def test_a_sink_whose_ventilator_stays_silent_says_so(tmp_path, monkeypatch, caplog):
    """A sink started before its ventilator, or beside one of another version (which drops its Hello), waited
    for a Welcome saying nothing.  Past the silence it says so, naming the ventilator and its protocol."""
    import threading
    import time

    import zmq

    from common import logs
    from common.wire import protocol
    from tests.support.helpers import free_ports

    monkeypatch.setattr(logs, "SILENCE_WARNING_SECONDS", 1.0)
    context = zmq.Context()
    router = context.socket(zmq.ROUTER)  # the ventilator's socket, no ventilator behind it
    vport = router.bind_to_random_port("tcp://127.0.0.1")
    (port,) = free_ports(1)
    server = SinkServer(SinkOptions(ventilator=f"127.0.0.1:{vport}", port=port, bind_host="127.0.0.1",
                                    state_dir=str(tmp_path / "state")))
    thread = threading.Thread(target=server.run, daemon=True)
    hellos = 0
    try:
        with caplog.at_level(logging.WARNING, logger="sink"):
            thread.start()
            deadline = time.monotonic() + 60
            while "no answer from the ventilator" not in caplog.text and time.monotonic() < deadline:
                if router.poll(100):
                    hellos += protocol.decode(router.recv_multipart()[1]).__class__ is protocol.Hello
            server.stopping = True
            thread.join(timeout=30)
    finally:
        router.close(linger=0)
        context.term()
    assert not thread.is_alive()
    said = [r.getMessage() for r in caplog.records if "no answer from the ventilator" in r.getMessage()]
    assert len(said) == 1 and f"127.0.0.1:{vport}" in said[0], said
    assert f"wire protocol {protocol.PROTOCOL_VERSION}" in said[0] and hellos >= 1


def test_acknowledgements_before_the_job_is_known_are_held_up_to_a_bound(tmp_path, monkeypatch):
    """A sink holds the acknowledgements that reach it before its Welcome (or while it stands by), to record them
    once the job is known.  A flood of them (a hostile peer; a fleet acking into a sink standing by for hours)
    held them all in memory.  Now at most MAX_EARLY_ACKS are held, the rest dropped and counted (unconfirmed,
    their tasks are done again): a real sink over real sockets, played a ventilator that welcomes it late."""
    import time

    import sink.server
    from common.job.config import JobConfig
    from common.job.params import Component
    from common.wire import protocol

    monkeypatch.setattr(sink.server, "MAX_EARLY_ACKS", 5)
    config = JobConfig(data_uri="d", output_uri=str(tmp_path / "out"), reader=Component("wikiextractor"),
                       steps=steps_of("line"), tokenizer_json="")
    played = PlayedVentilator(tmp_path)
    server = played.server
    identity, _hello = played.receive(protocol.Hello)  # not welcomed yet: the job is not known
    ranges = [("src", n, n + 1) for n in range(8)]
    for where in ranges:
        played.push.send(protocol.encode(protocol.TaskAck(task_id_of(*where), config.job_id, "w", *where, "v", [], 0,
                                                          protocol.AckStats())))
    deadline = time.monotonic() + 60  # only a bound on a hang: the loop ends when the sink has dropped three
    while sum(server.dropped.dropped.values()) < 3:
        assert time.monotonic() < deadline, server.dropped.dropped
        time.sleep(0.05)
    assert len(server._early_acks) == 5
    assert any("beyond 5 held" in reason for reason in server.dropped.dropped)
    played.send(identity, protocol.Welcome(config.encoded(), config.job_id, "v1"))
    done: list[str] = []
    while len(done) < 5:
        done += played.receive(protocol.TasksDone)[1].task_ids
    assert done == [task_id_of(*where) for where in ranges[:5]]
    played.send(identity, protocol.Shutdown("done"))
    assert played.receive(protocol.SinkClosed)[1].error == ""
    played.close()
    assert played.status == [0]


def test_acknowledgements_before_the_job_is_known_are_held_up_to_a_byte_bound_too(tmp_path, monkeypatch):
    """MAX_EARLY_ACKS bounds how many acknowledgements are held before the Welcome, but one may be up to the
    socket's 1 MiB (a hostile peer's stats): 100,000 of them were 100 GB.  The held ones are bounded in bytes too
    (MAX_EARLY_ACK_BYTES, encoded), the rest dropped and counted: a real sink over real sockets, never welcomed."""
    import time

    import sink.server
    from common.wire import protocol

    monkeypatch.setattr(sink.server, "MAX_EARLY_ACK_BYTES", 300_000)
    played = PlayedVentilator(tmp_path)
    server = played.server
    identity, _hello = played.receive(protocol.Hello)
    bulky = protocol.AckStats(skipped={f"reason {n:06d}": n for n in range(5000)})  # ~100 KB encoded
    size = len(protocol.encode(protocol.TaskAck("t", "j", "w", "src", 0, 1, "v", [], 0, bulky)))
    assert 50_000 < size < 1024 * 1024
    for n in range(10):
        played.push.send(protocol.encode(protocol.TaskAck(task_id_of("src", n, n + 1), "j", "w", "src", n, n + 1, "v",
                                                          [], 0, bulky)))
    deadline = time.monotonic() + 60  # only a bound on a hang: the loop ends when the sink has seen all ten
    while len(server._early_acks) + sum(server.dropped.dropped.values()) < 10:
        assert time.monotonic() < deadline, server.dropped.dropped
        time.sleep(0.05)
    held = len(server._early_acks)
    assert held * size <= 300_000 + size and held < 10, (held, size)
    assert any("held" in reason for reason in server.dropped.dropped)
    played.send(identity, protocol.Shutdown("done"))
    played.close()


def test_tasks_recorded_while_the_last_tasks_done_is_unread_go_out_together_once_it_is_read(tmp_path):
    """The ventilator's one socket reads its peers' messages in turn, one each: with 5,000 workers the sink's
    turn came every few thousand messages, and a TasksDone sent for every few acknowledgements queued up behind
    them until the confirmations ran minutes late (the scale simulation: their tasks were done again).  The sink
    sends a TasksDone and a Heartbeat after it, and holds what it records next until that Heartbeat's reply
    says the TasksDone was read; then all it holds goes out as one."""
    import time

    from common.job.config import JobConfig
    from common.job.params import Component
    from common.wire import protocol

    config = JobConfig(data_uri="d", output_uri=str(tmp_path / "out"), reader=Component("wikiextractor"),
                       steps=steps_of("line"), tokenizer_json="", heartbeat_seconds=600)  # no heartbeat due
    played = PlayedVentilator(tmp_path)
    server = played.server
    identity, _hello = played.receive(protocol.Hello)
    played.send(identity, protocol.Welcome(config.encoded(), config.job_id, "v1"))
    played.receive(protocol.SinkHello)

    def ack(n: int) -> str:
        where = ("src", n, n + 1)
        played.push.send(protocol.encode(protocol.TaskAck(task_id_of(*where), config.job_id, "w", *where, "v", [], 0,
                                                          protocol.AckStats())))
        return task_id_of(*where)

    first = ack(0)
    assert played.receive(protocol.TasksDone)[1].task_ids == [first]
    played.receive(protocol.Heartbeat)  # after it: its reply says the TasksDone was read
    later = [ack(n) for n in range(1, 6)]
    deadline = time.monotonic() + 60  # only a bound on a hang: the loop ends once the sink holds all five
    while len(server._held) < 5:
        assert time.monotonic() < deadline, server._held
        time.sleep(0.02)
    assert not played.router.poll(0), "a TasksDone went out while the last one was unread"
    played.send(identity, protocol.HeartbeatReply("v1"))
    assert played.receive(protocol.TasksDone)[1].task_ids == later
    played.send(identity, protocol.Shutdown("done"))
    assert played.receive(protocol.SinkClosed)[1].error == ""
    played.close()
    assert played.status == [0]
