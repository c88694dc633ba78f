"""The wire protocol: every message the three roles exchange, in one place.

Each message is one msgpack frame: a map with the protocol version ``v``,
the message type ``t`` and the message's fields.  Decoding checks the
version, the type and every field's type, so a peer never acts on a
malformed message: :func:`decode` raises :class:`ProtocolError`, and the
receiving loop logs, counts and drops it.

Sockets (see README, "Sockets"):

  worker  DEALER --> ventilator ROUTER (--vport):  Hello, TaskRequest,
          Heartbeat, TaskFinished, TaskFailed, TaskReturned  /  Welcome,
          TaskAssignment, HeartbeatReply, Shutdown
  sink    DEALER --> ventilator ROUTER:  Hello, SinkHello, TasksDone,
          Heartbeat  /  Welcome, TasksQuarantined, HeartbeatReply, Shutdown
  worker  PUSH   --> sink PULL (--sink-port):  TaskAck
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from dataclasses import dataclass, field

import msgpack

PROTOCOL_VERSION = 1

#: Inbound frames larger than this are refused by the socket itself
#: (ZMQ_MAXMSGSIZE: the peer is disconnected) on the sockets that bind and
#: so face whoever connects: the ventilator's and the sink's, which only
#: ever receive small messages.  Workers only connect to their ventilator and
#: receive task content (up to --task-size plus the rest of a document), so
#: theirs is unlimited.
MAX_INBOUND_BYTES = 1024 * 1024


class ProtocolError(ValueError):
    """A frame that is not a valid message of this protocol version."""


# --------------------------------------------------------------------------
# Messages
# --------------------------------------------------------------------------

@dataclass
class Hello:
    """A worker or the sink introduces itself and asks for the job."""

    peer_id: str
    host: str
    pid: int
    role: str  # "worker" or "sink"


@dataclass
class SinkHello:
    """The sink introduces itself with every task its manifest already holds
    (task id -> input version, so tasks of a changed input are redone)."""

    sink_id: str
    done: dict
    last: bool = True  # big manifests come in several SinkHellos: dispatch after the last


@dataclass
class Welcome:
    """The job configuration (a :class:`common.config.JobConfig` as a map)."""

    config: dict
    ventilator_id: str


@dataclass
class TaskRequest:
    """The worker can take ``credit`` more tasks."""

    credit: int


@dataclass
class TaskAssignment:
    """A leased task; ``content`` holds its bytes when the ventilator ships them."""

    task: list
    lease_seconds: float
    attempt: int
    content: bytes | None = None


@dataclass
class Heartbeat:
    """Keeps the sender's leases alive; ``held`` lists the tasks it works on."""

    held: list[str] = field(default_factory=list)


@dataclass
class HeartbeatReply:
    """``known`` is False when the ventilator does not know the sender (it
    restarted, or forgot a peer silent for long): the sender says Hello again."""

    ventilator_id: str
    known: bool = True


@dataclass
class TaskFinished:
    """The shard is written and its TaskAck is on its way to the sink."""

    task_id: str


@dataclass
class TaskFailed:
    """Counts as an attempt: after --max-attempts the task is quarantined;
    at once if ``permanent`` (retrying cannot help, e.g. the input changed)."""

    task_id: str
    error: str
    permanent: bool = False


@dataclass
class TaskReturned:
    """A draining worker hands back tasks it has not started (not an attempt)."""

    task_ids: list[str]


@dataclass
class TaskAck:
    """Worker to sink: a task's shard is complete, with its statistics."""

    task_id: str
    job_id: str
    worker_id: str
    source: str
    start: int
    end: int
    version: str
    shard: str  # URI, or "" when the task produced no instance
    records: int
    sha256: str
    stats: dict


@dataclass
class TasksDone:
    """Sink to ventilator: these tasks are durably in the manifest."""

    task_ids: list[str]
    documents: int = 0


@dataclass
class TasksQuarantined:
    """Ventilator to sink: these tasks failed too often and will not be retried."""

    failures: dict  # task_id -> {"source":..., "start":..., "end":..., "error":..., "attempts":...}


@dataclass
class Shutdown:
    reason: str


MESSAGE_TYPES: dict[str, type] = {cls.__name__: cls for cls in (
    Hello, SinkHello, Welcome, TaskRequest, TaskAssignment, Heartbeat, HeartbeatReply,
    TaskFinished, TaskFailed, TaskReturned, TaskAck, TasksDone, TasksQuarantined, Shutdown)}

Message = typing.Union[tuple(MESSAGE_TYPES.values())]


# --------------------------------------------------------------------------
# Encoding and checked decoding
# --------------------------------------------------------------------------

def encode(message) -> bytes:
    payload = {"v": PROTOCOL_VERSION, "t": type(message).__name__}
    payload.update(dataclasses.asdict(message))
    return msgpack.packb(payload, use_bin_type=True)


def decode(frame: bytes):
    """The message in ``frame``; raises ProtocolError for anything else."""
    try:
        payload = msgpack.unpackb(frame, raw=False, strict_map_key=True)
    except Exception as error:  # msgpack raises several unrelated types
        raise ProtocolError(f"not msgpack: {error}") from None
    if not isinstance(payload, dict):
        raise ProtocolError("message is not a map")
    version = payload.pop("v", None)
    if version != PROTOCOL_VERSION:
        raise ProtocolError(f"protocol version {version!r}, expected {PROTOCOL_VERSION}")
    cls = MESSAGE_TYPES.get(payload.pop("t", None))
    if cls is None:
        raise ProtocolError("unknown message type")
    hints = _hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in payload:
            value = payload.pop(f.name)
            if not _conforms(value, hints[f.name]):
                raise ProtocolError(f"{cls.__name__}.{f.name} has the wrong type")
            kwargs[f.name] = value
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ProtocolError(f"{cls.__name__} lacks {f.name}")
    if payload:
        raise ProtocolError(f"{cls.__name__} has unknown fields {sorted(payload)}")
    return cls(**kwargs)


@functools.lru_cache(maxsize=None)
def _hints(cls: type) -> dict:
    return typing.get_type_hints(cls)


def _conforms(value, hint) -> bool:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_conforms(value, option) for option in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if origin is list:
        (item,) = typing.get_args(hint)
        return isinstance(value, list) and all(_conforms(v, item) for v in value)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)
