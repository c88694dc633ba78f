"""A server's inbox: every frame decoded, handed to its handler by a table, or counted and dropped.

Each role's server (ventilator, sink, loader) builds its tables once, when it is made: message type ->
bound method.  What comes in goes one way for all of them: the frame is decoded by the protocol's
:class:`Codec` (every field checked, common/wire/envelope.py); a frame that does not decode, a message type the
table has no handler for, or a message a handler finds hostile past its types (it raises the codec's error)
is counted and logged by :class:`~common.wire.transport.DroppedMessages` and dropped, never the server's end.
No protocol is imported here: the pipeline's (common/wire/protocol.py) and the loader's (loader/messages.py)
each give their codec.

:func:`serving` is a server's socket facing its peers, set up and closed one way (its context, CURVE's
authenticator, the signals that stop it: :func:`on_stop_signals`).
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar, cast

import zmq

from common.wire.envelope import Codec
from common.wire.security import Curve
from common.wire.transport import MAX_INBOUND_BYTES, DroppedMessages, make_socket, printable

M = TypeVar("M")


@dataclass(frozen=True)
class Sender:
    """Where a message came from, and how to answer it: a ROUTER's peer (``identity``, never empty), or the
    other end of a DEALER (``identity`` empty).  ``at``: when it was received (time.monotonic())."""

    socket: zmq.Socket
    identity: bytes
    codec: Codec
    at: float = field(default_factory=time.monotonic)

    def reply(self, message: object) -> None:
        frame = self.codec.encode(message)
        if not self.identity:
            self.socket.send(frame)
        else:
            self.socket.send_multipart([self.identity, frame])

    @property
    def name(self) -> str:
        """The peer's identity as text (a ROUTER's), for the tables that key peers by it and for the log: any
        bytes (a DEALER that set none has one starting with a NUL) escaped, so distinct identities stay distinct
        and no control character reaches a log line."""
        return printable(self.identity)


Handler = Callable[[object, Sender], None]


class Handlers:
    """One table: message type -> the bound method that acts on it.  ``sender`` names who sends on it, for
    the drop of a message it has no handler for ("unexpected TaskAck from worker")."""

    def __init__(self, sender: str = ""):
        self.sender = sender
        self._table: dict[type, Handler] = {}

    def on(self, kind: type[M], handler: Callable[[M, Sender], None]) -> Handlers:
        """``handler`` acts on every ``kind`` message (typed at this call: the table erases it)."""
        self._table[kind] = cast(Handler, handler)
        return self

    def get(self, kind: type) -> Handler | None:
        return self._table.get(kind)

    def __contains__(self, kind: type) -> bool:
        return kind in self._table


class Inbox:
    """The receive path every server shares: decode, find the handler, or count and drop."""

    def __init__(self, codec: Codec, dropped: DroppedMessages):
        self.codec = codec
        self.dropped = dropped

    def decode(self, frame: bytes) -> object | None:
        """The message in ``frame``, or None (counted and dropped)."""
        try:
            return self.codec.decode(frame)
        except self.codec.error as error:
            self.dropped.drop(str(error))
            return None

    def routed(self, frames: list[bytes]) -> tuple[bytes, object] | None:
        """A ROUTER's (identity, message), or None (counted and dropped)."""
        if len(frames) != 2:
            self.dropped.drop(f"{len(frames) - 1} frames")
            return None
        message = self.decode(frames[1])
        return None if message is None else (frames[0], message)

    def deliver(self, message: object, sender: Sender, handlers: Handlers) -> bool:
        """Hand ``message`` to its handler in ``handlers``; False when it was dropped instead (no handler, or
        the handler raised the codec's error: a value hostile past its type)."""
        handler = handlers.get(type(message))
        if handler is None:
            self.dropped.drop(f"unexpected {type(message).__name__}" + (f" from {handlers.sender}"
                                                                          if handlers.sender else ""))
            return False
        try:
            handler(message, sender)
        except self.codec.error as error:
            self.dropped.drop(str(error))
            return False
        return True

    def receive(self, socket: zmq.Socket, handlers: Handlers, flags: int = 0) -> bool:
        """One frame from a DEALER or PULL ``socket``, decoded and delivered (``flags``: zmq.NOBLOCK raises
        zmq.Again when none is waiting)."""
        message = self.decode(socket.recv(flags))
        return message is not None and self.deliver(message, Sender(socket, b"", self.codec), handlers)


def on_stop_signals(stop: Callable[[str], None]) -> None:
    """SIGTERM and SIGINT call ``stop`` with the signal's name.  Only from the main thread (Python's rule): a
    server run in another thread (a test's) leaves the process's handlers alone."""
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda number, _frame: stop(signal.Signals(number).name))


@contextmanager
def serving(kind: int, curve: Curve | None, stop: Callable[[str], None], *,
            max_message_bytes: int = MAX_INBOUND_BYTES, linger_ms: int = 2000) -> Iterator[zmq.Socket]:
    """A server's socket facing its peers (``kind``: ROUTER, PULL), in a context of its own, served with CURVE
    when ``curve`` is given; SIGTERM and SIGINT call ``stop``.  Closed at the end (``linger_ms``), then the
    authenticator and the context: another socket the server makes in ``socket.context`` is closed first."""
    on_stop_signals(stop)
    context = zmq.Context()
    authenticator = curve.start_authenticator(context) if curve else None
    sock = make_socket(context, kind, max_message_bytes=max_message_bytes, linger_ms=linger_ms)
    if curve:
        curve.serve(sock)
    try:
        yield sock
    finally:
        sock.close(linger=linger_ms)
        if authenticator is not None:
            authenticator.stop()
        context.term()
