"""Each Welcome carries the job's config with its tokenizer (~0.5 MB for BERT's).  A peer repeats its Hello
each second until its Welcome arrives; with thousands joining at once the Welcomes queue up, and answering
every repeat past a fixed delay queued them again and again (the scale simulation's 5,000 workers drew 2 to
10 Welcomes each on a loaded machine, and the ventilator's CPU per task tripled).  A repeat is not answered
while our Welcome to that peer is still in our queue, and a peer that still says nothing but Hello waits
twice as long for each Welcome after that.

The queued Welcome is made real, not timed: a peer speaking ZMTP on a plain TCP socket with a small window
that never reads, so the Welcome cannot leave the ventilator's queue however long the test waits."""

from __future__ import annotations

import socket
import struct
import time

import pytest

from common.wire import protocol
from tests.ventilator.test_server import job, served  # noqa: F401  (the real job and server of test_server)
from ventilator.server import Peer, ServerOptions, VentilatorServer


class DeafDealer:
    """A DEALER that says what it is told to and reads nothing: ZMTP 3.0 (NULL mechanism) on a TCP socket whose
    receive window is a few segments of 536 bytes, so what is sent to it stays in the sender's queue."""

    def __init__(self, port: int, identity: bytes):
        self.socket = socket.socket()
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 536)
        self.socket.connect(("127.0.0.1", port))
        greeting = b"\xff" + bytes(8) + b"\x7f" + bytes([3, 0]) + b"NULL".ljust(20, b"\0") + b"\0" + bytes(31)
        self.socket.sendall(greeting)
        theirs = b""
        while len(theirs) < len(greeting):  # READY after their greeting, as libzmq peers do (sent with ours, it was lost)
            theirs += self.socket.recv(len(greeting) - len(theirs))
        ready = b"\x05READY" + self._property(b"Socket-Type", b"DEALER") + self._property(b"Identity", identity)
        self.socket.sendall(bytes([0x04, len(ready)]) + ready)

    @staticmethod
    def _property(name: bytes, value: bytes) -> bytes:
        return bytes([len(name)]) + name + struct.pack(">I", len(value)) + value

    def send(self, message: object) -> None:
        frame = protocol.encode(message)
        self.socket.sendall(b"\x02" + struct.pack(">Q", len(frame)) + frame)  # a last, long frame

    def close(self) -> None:
        self.socket.close()


def until(condition, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_a_hello_repeated_while_its_welcome_is_queued_is_not_answered_again(served):
    server, _peer, _results, _thread = served
    until(lambda: server._dispatcher is not None, "the server never built its task table")
    deaf = DeafDealer(server.options.port, b"worker-deaf")
    hello = protocol.Hello("worker-deaf", "test-host", 1, "worker")
    try:
        deaf.send(hello)
        until(lambda: b"worker-deaf" in server.peers, "the first Hello was never answered")
        first = server.peers[b"worker-deaf"]
        time.sleep(server._rewelcome_after + 0.5)  # past the delay after which a lost Welcome is sent again
        deaf.send(hello)
        deaf.send(hello)
        until(lambda: server.repeated_hellos == 2 or server.peers.get(b"worker-deaf") is not first,
              "the repeated Hellos were never read")
        assert server.peers[b"worker-deaf"] is first, "a Welcome still in the queue was sent again"
        assert server.repeated_hellos == 2
        assert first.welcome is not None and not first.welcome.done, "the peer read nothing: it is queued"
    finally:
        deaf.close()


@pytest.mark.parametrize(("welcomes", "delay"), [(1, 1), (2, 2), (3, 4), (5, 16), (40, 16)])
def test_each_welcome_a_peer_left_unanswered_doubles_the_delay_before_the_next(job, welcomes, delay):
    server = VentilatorServer(job, ServerOptions(bind_host="127.0.0.1", port=0))  # no socket before run()
    after = server._rewelcome_after * delay
    peer = Peer(b"worker-a", "worker", "worker-a", 100.0, welcomed=100.0, welcomes=welcomes)  # its Welcome left
    assert server._welcome_on_its_way(peer, 100.0 + after - 0.01)
    assert not server._welcome_on_its_way(peer, 100.0 + after + 0.01)
