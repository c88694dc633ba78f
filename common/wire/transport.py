"""ZeroMQ sockets as the three roles use them: addresses and socket options.

Every socket is created here, so limits (ZMQ_MAXMSGSIZE against huge
frames, linger, heartbeats) are set the same way everywhere.  Each socket
has one owner thread, and is closed explicitly by it.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import socket as _socket
import time
import uuid

import zmq

log = logging.getLogger(__name__)


#: Default ports: workers and the sink connect to the ventilator's, workers
#: push acknowledgements to the sink's.
VENTILATOR_PORT = 5557
SINK_PORT = 5558

#: Inbound frames larger than this are refused by the socket itself
#: (ZMQ_MAXMSGSIZE: the peer is disconnected) on the sockets that bind and
#: so face whoever connects: the ventilator's and the sink's, which only
#: ever receive small messages.  Workers only connect to their ventilator and
#: receive task content (up to --task-size plus the rest of a document), so
#: theirs is unlimited.
MAX_INBOUND_BYTES = 1024 * 1024

#: A host name as DNS spells it (letters, digits, hyphens, dots; underscores as some container names have), or an
#: IPv4 address.  Anything else (a space, a scheme's ``//``, a ``@``) is a typo that would wait for ever.
_HOST_NAME = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?")


class AddressError(ValueError):
    """A ``host:port`` that cannot be connected to: one line saying what is wrong with it."""


def parse_address(text: str, default_port: int | None = None, *, host_required: bool = False) -> tuple[str, int]:
    """``host:port``, ``[ipv6]:port``, ``host`` alone (``default_port``) or ``:port`` (host left empty: the
    peer's own, where the wire allows it; never with ``host_required``, as a user's option is).  Anything else
    raises :class:`AddressError`: ZeroMQ would take a malformed endpoint and wait for ever, never saying why."""
    def bad(why: str) -> AddressError:
        return AddressError(f"{text!r} is not HOST:PORT ({why})")

    if not text:
        raise bad("it is empty")
    if "://" in text:
        raise bad("no scheme: write 10.0.0.5:5557, not tcp://10.0.0.5:5557")
    if any(char.isspace() for char in text):
        raise bad("it holds a space")
    if text.startswith("["):
        close = text.find("]")
        if close < 0:
            raise bad("the [ of an IPv6 address is not closed: [::1]:5557")
        host, rest = text[1:close], text[close + 1:]
        if rest and not rest.startswith(":"):
            raise bad(f"{rest!r} after the ]: [::1]:5557")
        port = rest[1:] if rest else None
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise bad(f"{host!r} in brackets is not an IPv6 address") from None
    else:
        if text.count(":") > 1:
            raise bad("an IPv6 address goes in brackets: [::1]:5557")
        host, sep, after = text.partition(":")
        port = after if sep else None
        if host and not _HOST_NAME.fullmatch(host):
            raise bad(f"{host!r} is not a host name or address")
    if not host and host_required:
        raise bad("no host before the :")
    if port is None:
        if default_port is None:
            raise bad("no port")
        return host, default_port
    if not port.isascii() or not port.isdigit() or not 0 < int(port) < 65536:
        raise bad(f"the port {port!r} is not a number from 1 to 65535" if port else "no port after the :")
    return host, int(port)


def address(host: str, port: int) -> str:
    """``host:port`` as :func:`parse_address` reads it back (an IPv6 host in brackets)."""
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def endpoint(host: str, port: int) -> str:
    host = host or "127.0.0.1"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"tcp://{host}:{port}"


def bind_endpoint(host: str, port: int) -> str:
    return f"tcp://{host or '*'}:{port}"


class ListenError(Exception):
    """A port could not be listened on: a one-line error for the user, not a traceback."""


def listen(sock: zmq.Socket, host: str, port: int) -> None:
    try:
        sock.bind(bind_endpoint(host, port))
    except zmq.ZMQError as error:
        raise ListenError(f"cannot listen on {host or '*'}:{port}: {error}") from None


#: The bytes ``printable`` keeps as they are: printable ASCII but the backslash.
_PLAIN = bytes(byte for byte in range(0x20, 0x7F) if byte != 0x5C)


def printable(value: str | bytes) -> str:
    """``value`` as a log line can hold it: a peer's ZeroMQ identity (any bytes: a ROUTER names a DEALER that set
    none with five bytes starting with a NUL) or a name a peer sent.  Every character that is not printable ASCII
    (or Unicode, in text), and the backslash, is escaped (``\\x00``), so two values never print alike."""
    if isinstance(value, bytes):
        if not value.translate(None, _PLAIN):  # (every message names its peer: the common case in C)
            return value.decode("ascii")
        return "".join(chr(byte) if 0x20 <= byte < 0x7F and byte != 0x5C else f"\\x{byte:02x}" for byte in value)
    if value.isascii() and value.isprintable() and "\\" not in value:
        return value
    return "".join(char if char.isprintable() and char != "\\" else
                   f"\\x{ord(char):02x}" if ord(char) < 0x100 else
                   f"\\u{ord(char):04x}" if ord(char) < 0x10000 else f"\\U{ord(char):08x}" for char in value)


def new_identity(role: str) -> str:
    """A readable, unique name for this process: role, host, pid, random."""
    return f"{role}-{_socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def make_socket(context: zmq.Context, kind: int, *, max_message_bytes: int = MAX_INBOUND_BYTES,
                linger_ms: int = 2000) -> zmq.Socket:
    sock = context.socket(kind)
    sock.setsockopt(zmq.LINGER, linger_ms)
    sock.setsockopt(zmq.MAXMSGSIZE, max_message_bytes)
    if kind in (zmq.DEALER, zmq.ROUTER, zmq.PUSH, zmq.PULL):
        # TCP keepalive notices dead peers behind NAT or a cut network, so
        # reconnects happen.
        sock.setsockopt(zmq.TCP_KEEPALIVE, 1)
    if kind in (zmq.DEALER, zmq.ROUTER):
        # ZMTP heartbeats too, but not on the ack path: libzmq 4.3 can assert
        # or drop the connection when heartbeats meet a PULL queue that is
        # full (zeromq/libzmq#3937); our own heartbeats cover the rest.
        sock.setsockopt(zmq.HEARTBEAT_IVL, 5000)
        sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, 15000)
    if kind == zmq.ROUTER:
        sock.setsockopt(zmq.ROUTER_MANDATORY, 0)  # drop replies to peers that left
    return sock


class DroppedMessages:
    """Counts messages dropped as malformed, logging the first few of each kind.

    Bounded whatever a peer sends: hostile frames make every reason text
    unique (it quotes what was wrong), so at most ``MAX_REASONS`` reasons are
    kept apart (the rest are counted as one), and at most ``LOG_LINES`` lines
    are logged per ``LOG_WINDOW`` seconds.  A flood costs a counter, not the
    log, memory, or the time to write either."""

    MAX_REASONS = 64
    OTHER = "other reasons"
    LOG_LINES = 20
    LOG_WINDOW = 60.0

    def __init__(self, role: str):
        self.role = role
        self.dropped: dict[str, int] = {}
        self._window_start = -self.LOG_WINDOW
        self._logged = 0
        self._unlogged = 0

    def drop(self, reason: str) -> None:
        if reason not in self.dropped and len(self.dropped) >= self.MAX_REASONS:
            reason = self.OTHER
        count = self.dropped.get(reason, 0) + 1
        self.dropped[reason] = count
        if count <= 3 or count in (10, 100, 1000) or count % 10000 == 0:
            now = time.monotonic()
            if now - self._window_start >= self.LOG_WINDOW:
                if self._unlogged:
                    log.warning("%s dropped %d more malformed message(s) without logging each", self.role,
                                self._unlogged)
                self._window_start, self._logged, self._unlogged = now, 0, 0
            if self._logged < self.LOG_LINES:
                self._logged += 1
                log.warning("%s dropped a message (%s), %d so far", self.role, reason, count)
            else:
                self._unlogged += 1

    @property
    def total(self) -> int:
        return sum(self.dropped.values())
