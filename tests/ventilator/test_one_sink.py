"""One job has one sink (ventilator/server.py): the sink welcomed first keeps the books; another stands by
(SinkStandby) until that one is silent past three heartbeats, then takes over; the sink's messages count only
from the job's sink.  A real VentilatorServer over real ZeroMQ sockets, its peers played by the test, and its
sink-facing handlers fed well-typed hostile frames drawn by hypothesis."""

from __future__ import annotations

import time

import msgpack
import zmq

from common.wire import protocol
from tests.common.test_inbox import sockets  # noqa: F401  (the fixture)
from tests.common.test_protocol import _well_typed
from tests.support.helpers import drawn_values
from tests.ventilator.test_server import Peer, introduce, job, served  # noqa: F401  (fixtures)
from ventilator.dispatcher import Dispatcher, State
from ventilator.server import ServerOptions, VentilatorServer


def test_a_second_sink_stands_by_until_the_first_is_silent_then_takes_over(job, served):
    server, peer, _results, _thread = served
    first, second = peer("sink-a"), peer("sink-b")
    introduce(first, "sink", job.config.job_id)
    first.send(protocol.Heartbeat())
    second.send(protocol.Hello("sink-b", "host-b", 2, "sink"))
    standby = second.receive(protocol.SinkStandby)
    assert (standby.sink_id, standby.host) == ("sink-a", "test-host") and standby.takeover_seconds > 0
    task = job.tasks[0]
    dropped = server.dropped.total
    second.send(protocol.TasksDone([task.task_id], 5))
    second.send(protocol.SinkClosed("boom"))
    second.send(protocol.SinkHello("sink-b", job.config.job_id, {task.task_id: task.version}))
    deadline = time.monotonic() + 30
    while server.dropped.total < dropped + 3:
        assert time.monotonic() < deadline, "the stand-by sink's frames were not dropped"
        time.sleep(0.05)
    assert server.sink_closed is None and server.dispatcher.entries[task.task_id].state is not State.DONE
    assert server.sink == b"sink-a"

    # The job's sink goes silent (killed): past three heartbeats the stand-by sink is welcomed.
    welcomed = None
    deadline = time.monotonic() + 60
    while welcomed is None:
        assert time.monotonic() < deadline, "the stand-by sink was never welcomed"
        second.send(protocol.Hello("sink-b", "host-b", 2, "sink"))
        message = protocol.decode(second.socket.recv()) if second.socket.poll(1000) else None
        if isinstance(message, protocol.Welcome):
            welcomed = message
        else:
            assert message is None or isinstance(message, (protocol.SinkStandby, protocol.HeartbeatReply)), message
    assert welcomed.job_id == job.config.job_id and server.sink == b"sink-b"
    second.send(protocol.SinkHello("sink-b", job.config.job_id, {task.task_id: task.version}))
    # The old sink, back from its silence, is a stranger: told so, and its frames change nothing.
    first.send(protocol.SinkClosed("the old sink"))
    while first.receive(protocol.HeartbeatReply).known:  # (the replies to its heartbeats before: known)
        pass
    first.send(protocol.Hello("sink-a", "test-host", 1, "sink"))
    assert first.receive(protocol.SinkStandby).sink_id == "sink-b"
    deadline = time.monotonic() + 30
    while server.dispatcher.entries[task.task_id].state is not State.DONE:
        assert time.monotonic() < deadline, "the new sink's SinkHello was not taken"
        time.sleep(0.05)
    assert server.sink_closed is None


def _frames(kinds: list[type], count: int) -> list[bytes]:
    """``count`` well-typed frames of each of ``kinds``, hostile values in their declared ranges (so they decode
    and reach the handlers)."""
    return [frame for kind in kinds for frame in drawn_values(_well_typed(kind, in_range=True).map(
        lambda fields, kind=kind: msgpack.packb({**fields, "v": protocol.PROTOCOL_VERSION, "t": kind.__name__},
                                                use_bin_type=True)), count)]


def test_the_sink_facing_handlers_take_hostile_frames_and_only_the_jobs_sink_counts(job, sockets):
    """A peer that said Hello as a sink while the job has one stands by: whatever sink frames it sends then
    (SinkHello, TasksDone, SinkClosed with any error, Hellos with any names), the job's state does not move.  The
    job's own sink's hostile frames are acted on or dropped, never the ventilator's end; no name a peer sends
    reaches the log unescaped."""
    server = VentilatorServer(job, ServerOptions(report_seconds=3600))
    server._dispatcher = Dispatcher(job.tasks, job.config.lease_seconds, 5.0, 3)
    router, sink = sockets(zmq.ROUTER, zmq.DEALER, b"sink-1")
    stray = router.context.socket(zmq.DEALER)  # no identity of its own: the ROUTER's starts with a NUL
    sockets.made.append(stray)
    stray.connect(router.getsockopt_string(zmq.LAST_ENDPOINT))

    def through(peer: zmq.Socket, frame: bytes) -> None:
        peer.send(frame)
        server._receive(router, router.recv_multipart())

    through(sink, protocol.encode(protocol.Hello("sink-1", "host", 1, "sink")))
    assert isinstance(protocol.decode(sink.recv()), protocol.Welcome)
    through(stray, protocol.encode(protocol.Hello("stray\x00\n", "host\x1b[2J", 1, "sink")))
    assert isinstance(protocol.decode(stray.recv()), protocol.SinkStandby)
    kinds = [protocol.SinkHello, protocol.TasksDone, protocol.SinkClosed, protocol.Heartbeat, protocol.Hello]
    frames = _frames(kinds, 40)
    before = dict(server.dispatcher.counts)
    for frame in frames:
        through(sink, protocol.encode(protocol.Heartbeat()))  # the job's sink stays live meanwhile
        message = protocol.decode(frame)
        if isinstance(message, protocol.Hello) and message.role != "sink":
            continue  # a stray that says it is a worker is one (the worker tables' fuzz: tests/common/test_inbox.py)
        through(stray, frame)
        assert server.sink == b"sink-1" and server.sink_closed is None
        assert dict(server.dispatcher.counts) == before
    assert all(b"\x00" not in peer.name.encode() and "\n" not in peer.name for peer in server.peers.values())
    assert [peer.role for peer in server.peers.values()] == ["sink"]

    closed = []
    for frame in frames:  # the job's own sink: acted on, or dropped; nothing else
        message = protocol.decode(frame)
        if isinstance(message, protocol.Hello):
            continue  # a Hello as a worker would make it one
        through(sink, frame)
        if isinstance(message, protocol.SinkClosed):
            closed.append(message.error)
            assert server.sink_closed == message.error
    assert closed, "no SinkClosed reached the job's sink's handler"
