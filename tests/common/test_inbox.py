"""Hostile frames through each server's own tables (common/wire/inbox.py): the ventilator's, the sink's (from its
ventilator and on its ack socket) and the loader's.  Each server is the real object, each frame comes over a
real ZeroMQ socket, and the frames are structured msgpack drawn by hypothesis: the fuzz tests of
tests/common/test_protocol.py's, and well-typed messages of every type, which decode and reach the handlers.
Every frame that does not decode is one counted drop; whatever decodes is acted on or dropped, never the
server's end; and each server then still answers a real peer."""

from __future__ import annotations

import msgpack
import pytest
import zmq
from hypothesis import strategies as st

from common.wire import protocol
from loader import messages
from tests.common.test_protocol import _frames, _well_typed
from tests.support.helpers import drawn_values
from tests.support.loader_helpers import loader_dataset  # noqa: F401 - the session's finished output
from tests.ventilator.test_server import job  # noqa: F401 - a real job, planned by the ventilator's code

COUNT = 80


def drawn_frames(version: int, types: dict[str, type]) -> list[bytes]:
    """COUNT frames: the envelope's fuzz, and well-typed messages of every type (with hostile numbers)."""
    names = sorted(types)
    well_typed = st.sampled_from(names).flatmap(
        lambda name: _well_typed(types[name]).map(lambda fields: {**fields, "v": version, "t": name}))
    frame = st.one_of(_frames(version, names), well_typed).map(lambda v: msgpack.packb(v, use_bin_type=True))
    return drawn_values(frame, COUNT)


def typed_frames(version: int, kinds: list[type], count: int = 6) -> list[bytes]:
    """``count`` well-typed frames of each of ``kinds`` (the types a table handles): the fuzz above draws
    among every type, so a handler could go unreached; these reach each one (those that decode)."""
    return [frame for kind in kinds for frame in drawn_values(_well_typed(kind, in_range=True).map(
        lambda fields, kind=kind: msgpack.packb({**fields, "v": version, "t": kind.__name__}, use_bin_type=True)),
        count)]


def recording(*tables) -> set[str]:
    """The names of the message types whose handler in ``tables`` was called (filled as they are)."""
    reached: set[str] = set()
    for table in tables:
        for kind, handler in list(table._table.items()):
            def called(message, sender, handler=handler, name=kind.__name__):
                reached.add(name)
                handler(message, sender)

            table._table[kind] = called
    return reached


def handled(*tables) -> set[str]:
    return {kind.__name__ for table in tables for kind in table._table}


def decodes(decode, error, frame: bytes) -> bool:
    try:
        decode(frame)
    except error:
        return False
    return True


@pytest.fixture
def sockets():
    context = zmq.Context()
    made: list[zmq.Socket] = []

    def pair(server_kind: int, peer_kind: int, identity: bytes = b"") -> tuple[zmq.Socket, zmq.Socket]:
        server, peer = context.socket(server_kind), context.socket(peer_kind)
        if identity:
            peer.setsockopt(zmq.IDENTITY, identity)
        address = f"inproc://pair-{len(made)}"
        server.bind(address)
        peer.connect(address)
        made.extend((server, peer))
        return server, peer

    pair.made = made  # type: ignore[attr-defined]  # a test's other sockets, closed here even if it fails
    yield pair
    for each in made:
        each.close(linger=0)
    context.term()


def test_the_ventilator_tables_take_hostile_frames_from_workers_and_the_sink(job, sockets):
    from ventilator.dispatcher import Dispatcher
    from ventilator.server import ServerOptions, VentilatorServer

    server = VentilatorServer(job, ServerOptions(report_seconds=3600))
    server._dispatcher = Dispatcher(job.tasks, job.config.lease_seconds, 5.0, 3)
    router, worker = sockets(zmq.ROUTER, zmq.DEALER, b"worker-1")
    sink = router.context.socket(zmq.DEALER)
    sink.setsockopt(zmq.IDENTITY, b"sink-1")
    sockets.made.append(sink)
    sink.connect(router.getsockopt_string(zmq.LAST_ENDPOINT))

    def through(peer: zmq.Socket, frame: bytes) -> None:
        peer.send(frame)
        server._receive(router, router.recv_multipart())

    for name, peer in (("worker-1", worker), ("sink-1", sink)):
        through(peer, protocol.encode(protocol.Hello(name, "host", 1, name.split("-")[0])))
        assert protocol.decode(peer.recv()).job_id == job.config.job_id  # welcomed: its table is its role's
    tables = (server._by_role["worker"], server._by_role["sink"])
    reached = recording(*tables)
    sent = [(worker if number % 2 else sink, frame)
            for number, frame in enumerate(drawn_frames(protocol.PROTOCOL_VERSION, protocol.MESSAGE_TYPES))]
    for peer, table in zip((worker, sink), tables):  # and each table's own types, from its role
        sent += [(peer, frame) for frame in typed_frames(protocol.PROTOCOL_VERSION, sorted(
            table._table, key=lambda kind: kind.__name__))]
    decoded = 0
    for peer, frame in sent:
        dropped = server.dropped.total
        through(peer, frame)
        if not decodes(protocol.decode, protocol.ProtocolError, frame):
            assert server.dropped.total == dropped + 1
        else:
            decoded += 1
    assert reached == handled(*tables)  # every handler of both tables, not only their types' decoding
    assert server.dropped.total >= COUNT // 2
    worker.send(protocol.encode(protocol.Hello("worker-2", "host", 2, "worker")))
    server._receive(router, router.recv_multipart())
    while True:  # the replies to the fuzz, then the Welcome of a real Hello
        if isinstance(protocol.decode(worker.recv()), protocol.Welcome):
            break


def test_the_sink_tables_take_hostile_frames_from_its_ventilator_and_on_its_ack_socket(tmp_path, sockets):
    from sink.server import SinkOptions, SinkServer

    server = SinkServer(SinkOptions(ventilator="127.0.0.1:1", state_dir=str(tmp_path / "state")))
    ventilator, dealer = sockets(zmq.ROUTER, zmq.DEALER, b"sink")
    pull, push = sockets(zmq.PULL, zmq.PUSH)
    server._pull, server._dealer = pull, dealer
    dealer.send(b"hello")  # the ROUTER learns the sink's identity
    identity, _ = ventilator.recv_multipart()
    reached = recording(server._from_ventilator, server._on_ack_socket)
    kinds = [kind for table in (server._from_ventilator, server._on_ack_socket) for kind in table._table]
    frames = drawn_frames(protocol.PROTOCOL_VERSION, protocol.MESSAGE_TYPES)
    frames += typed_frames(protocol.PROTOCOL_VERSION, sorted(kinds, key=lambda kind: kind.__name__))
    acks = decoded = 0
    for frame in frames:
        dropped = server.dropped.total
        ventilator.send_multipart([identity, frame])
        try:
            server.inbox.receive(dealer, server._from_ventilator)
        except Exception as error:  # a job this sink cannot keep is the job's end (SinkError), nothing else
            assert type(error).__name__ == "SinkError", error
        push.send(frame)
        acks += len(server._drain_acks(pull))
        if not decodes(protocol.decode, protocol.ProtocolError, frame):
            assert server.dropped.total == dropped + 2
        else:
            decoded += 1
    assert reached == handled(server._from_ventilator, server._on_ack_socket)
    push.send(protocol.encode(protocol.TaskAck("t", "0123456789abcdef", "w", "s", 0, 1, "v", [], 0,
                                               protocol.AckStats())))
    assert [ack.task_id for ack in server._drain_acks(pull)] == ["t"]
    assert server.dropped.total + acks >= len(frames)


def test_the_loader_table_takes_hostile_frames_from_ranks(loader_dataset, sockets):
    from loader.batches import ServingParams
    from loader.server import LoaderServer, ServerOptions
    from loader.shards import open_dataset

    storage, shards = open_dataset(str(loader_dataset))
    server = LoaderServer(storage, shards, ServingParams(batch_size=8, seed=1, window=100), ServerOptions())
    router, rank = sockets(zmq.ROUTER, zmq.DEALER, b"rank-0")
    reached = recording(server._handlers)
    frames = drawn_frames(messages.VERSION, messages.TYPES)
    frames += typed_frames(messages.VERSION, sorted(server._handlers._table, key=lambda kind: kind.__name__))
    decoded = 0
    for frame in frames:
        dropped = server.dropped.total
        rank.send(frame)
        server._receive(router, router.recv_multipart())
        if not decodes(messages.decode, messages.MessageError, frame):
            assert server.dropped.total == dropped + 1
        else:
            decoded += 1
    assert reached == handled(server._handlers)
    rank.send(messages.encode(messages.StatusRequest()))
    server._receive(router, router.recv_multipart())
    replies = []
    while rank.poll(1000):  # the replies to the fuzz (answered at once: inproc), then this one's, last
        replies.append(messages.decode(rank.recv()))
    reply = replies[-1]
    assert isinstance(reply, messages.Status) and reply.dropped == server.dropped.total >= len(frames) // 2


from hypothesis import given  # noqa: E402


@given(st.one_of(st.binary(max_size=8), st.text(max_size=8)), st.one_of(st.binary(max_size=8), st.text(max_size=8)))
def test_a_peers_identity_or_name_prints_without_control_characters_and_stays_distinct(first, second):
    """A DEALER without an identity is named by the ROUTER with a NUL first; a Hello's names are anyone's.  In
    the log (and the tables keyed by ``Sender.name``) each prints with no control character, and two identities
    never print alike."""
    from common.wire.transport import printable

    for value in (first, second):
        shown = printable(value)
        assert shown.isprintable() and "\x00" not in shown
    if type(first) is type(second) and first != second:
        assert printable(first) != printable(second)
    assert printable(b"\x00k\x8bEg") == "\\x00k\\x8bEg"
