"""The wire protocol: every message the three roles exchange, in one place.

Each message is one msgpack frame: a map with the protocol version ``v``,
the message type ``t`` and the message's fields.  Decoding checks the
version, the type and every field's type, so a peer never acts on a
malformed message: :func:`decode` raises :class:`ProtocolError`, and the
receiving loop logs, counts and drops it.

Sockets (see README, "Sockets"):

  worker  DEALER --> ventilator ROUTER (--vport):  Hello, TaskRequest,
          Heartbeat, TaskFinished, TaskFailed, TaskReturned, JobDeclined  /  Welcome,
          TaskAssignment, HeartbeatReply, Shutdown
  sink    DEALER --> ventilator ROUTER:  Hello, SinkHello, TasksDone,
          Heartbeat, SinkClosed  /  Welcome, SinkStandby, TasksQuarantined, HeartbeatReply, Shutdown
  worker  PUSH   --> sink PULL (--sink-port):  TaskAck

The wire knows no job: a Welcome carries the job as an :data:`EncodedJob`,
which the job layer encodes and decodes (common/job/config.py: ``JobConfig.welcome``,
``JobConfig.from_welcome``), and the job's id as the ventilator computed it
(:data:`JobId`, checked for its form here): no other role computes it again.
Nothing here imports the job's domain (tests/common/test_layering.py).
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field

from common.wire import envelope
from common.wire.envelope import Codec, Count, Matches, Seconds, WallClock
from common.wire.files import ShardFile

# The sockets' limit on inbound frames, which every message but a worker's assignments must fit in.
from common.wire.transport import MAX_INBOUND_BYTES  # noqa: F401

PROTOCOL_VERSION = 8  # 5: the job as a list of steps (JobConfig.steps), AckStats.counters, ShardFile.split;
#                       6: SinkClosed, numbers checked against declared ranges;
#                       7: Welcome carries the job encoded (EncodedJob) and its id (JobId);
#                       8: JobDeclined (a worker of 7 failed every task of a job it could not run)

#: A job's id (``JobConfig.job_id``: 16 hex digits of a sha256), as the ventilator computed it.
JobId = typing.Annotated[str, Matches("[0-9a-f]{16}")]
#: The job, encoded by the job layer (``JobConfig.welcome``: the same envelope, fields checked when it is
#: decoded by ``JobConfig.from_welcome``): bytes to the wire, which never imports the job's domain.
EncodedJob = typing.NewType("EncodedJob", bytes)


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
    pid: Count
    role: str  # "worker" or "sink"
    #: Wall clock of the host's boot (0: unknown): a host started for the job is billed from it.
    booted_at: WallClock = 0.0


@dataclass
class SinkHello:
    """The sink introduces itself with every task its manifest already holds
    (task id -> input version, so tasks of a changed input are redone)."""

    sink_id: str
    job_id: str  # the job of that manifest: a sink still on another job must not mark ours done
    done: dict[str, str]
    last: bool = True  # big manifests come in several SinkHellos: dispatch after the last


@dataclass
class Welcome:
    """The job and its id: a peer of another version, whose JobConfig has other
    fields, gets a ProtocolError naming them (when it decodes ``job``) instead of
    a half-understood job."""

    job: EncodedJob
    job_id: JobId  # computed once, by the ventilator: the sink and the workers use it as it comes
    ventilator_id: str


@dataclass
class TaskRequest:
    """The worker can take ``credit`` more tasks."""

    credit: Count


@dataclass
class TaskAssignment:
    """A leased task; ``content`` holds its bytes when the ventilator ships them."""

    task: list
    lease_seconds: Seconds
    attempt: Count
    content: bytes | None = None


@dataclass
class Heartbeat:
    """Keeps the sender's leases alive; ``held`` lists the tasks it works on.

    ``awaiting`` restates how many tasks the worker asked for and has not
    received: an assignment lost with a dropped connection would otherwise
    leave its credit spent on both sides, and the worker idle for good."""

    held: list[str] = field(default_factory=list)
    awaiting: Count | None = None  # None from the sink


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
    #: Tasks of an earlier stage whose files this task found missing or corrupt: done again first.
    redo: list[str] = field(default_factory=list)


@dataclass
class TaskReturned:
    """A draining worker hands back tasks it has not started (not an attempt)."""

    task_ids: list[str]


@dataclass
class JobDeclined:
    """A worker's answer to a Welcome whose job it cannot run (a plugin step, tokenizer, output or segmenter
    it lacks): it asks for no task of job ``job_id`` and runs none (one it is granted anyway comes back as
    TaskReturned, not an attempt), while it stays connected for the next job.  ``reason`` is one line, which
    the ventilator bounds and escapes before it counts it."""

    job_id: JobId
    reason: str


@dataclass
class AckStats:
    """A task's statistics as the sink receives them (the worker's TaskStats)."""

    documents: Count = 0
    skipped: dict[str, Count] = field(default_factory=dict)  # reason -> documents
    segments: Count = 0
    tokens: Count = 0
    instances: Count = 0
    bytes_in: Count = 0
    bytes_out: Count = 0
    seconds: dict[str, Seconds] = field(default_factory=dict)  # stage -> wall seconds
    cpu_seconds: Seconds = 0.0
    output_tokens: Count = 0  # the training side's records' token positions without padding (what was computed)
    #: Counters by the step (or split) that counted them: name -> counter -> value, summed by the sink under
    #: that name (e.g. "dedup", and "holdout": the held-out side's documents, tokens, records and shards; the
    #: fields above count the training side only).
    counters: dict[str, dict[str, Count]] = field(default_factory=dict)


@dataclass
class TaskAck:
    """Worker to sink: a task's shard is complete, with its statistics."""

    task_id: str
    job_id: str
    worker_id: str
    source: str
    start: Count
    end: Count
    version: str
    shards: list[ShardFile]  # empty when the task produced no record; files of another split are marked
    records: Count  # over its training files (another split's are in its stats.counters)
    stats: AckStats
    stage: str = ""  # a step's stage (Task.stage): its files are then the stage's, not training shards


@dataclass
class TasksDone:
    """Sink to ventilator: these tasks are durably in the manifest."""

    task_ids: list[str]
    documents: Count = 0


@dataclass
class Quarantine:
    """Why a task will not be retried (the sink's summary.json lists these)."""

    source: str
    start: Count
    end: Count
    attempts: Count
    errors: list[str]  # the last few


@dataclass
class TasksQuarantined:
    """Ventilator to sink: these tasks failed too often and will not be retried."""

    failures: dict[str, Quarantine]  # task id -> why


@dataclass
class WorkerHosts:
    """Ventilator to sink, before Shutdown: the worker hosts it saw, each
    host -> [billed from, last heard] (wall clock), for the run's cost."""

    hosts: dict[str, list[WallClock]]


@dataclass
class Shutdown:
    reason: str


@dataclass
class SinkClosed:
    """Sink to ventilator: the job's books are closed (after Shutdown: manifest, dataset_info.json and
    summary.json published), or cannot be kept at all (a component this sink lacks, an output that is another
    job's).  A non-empty ``error`` fails the job with it: a ventilator must not say "done" over an output its
    sink could not finish, wherever that sink runs."""

    error: str = ""


@dataclass
class SinkStandby:
    """Ventilator to a sink it does not welcome: the job has its sink (``sink_id``, on ``host``), heard from
    within the last ``takeover_seconds``.  One job has one sink: this one writes nothing, and is welcomed once
    that sink has been silent that long (it died).  A sink that held the job's books hears this after another
    took them over (it was silent that long): it stops writing."""

    sink_id: str
    host: str
    takeover_seconds: Seconds


MESSAGE_TYPES: dict[str, type] = {cls.__name__: cls for cls in (
    Hello, SinkHello, Welcome, TaskRequest, TaskAssignment, Heartbeat, HeartbeatReply,
    TaskFinished, TaskFailed, TaskReturned, JobDeclined, TaskAck, TasksDone, TasksQuarantined, WorkerHosts, Shutdown,
    SinkClosed, SinkStandby)}

Message = typing.Union[tuple(MESSAGE_TYPES.values())]  # noqa: UP007 - built from the table, no `|` spelling


# --------------------------------------------------------------------------
# Encoding and checked decoding
# --------------------------------------------------------------------------

def encode(message: object) -> bytes:
    return envelope.encode(message, PROTOCOL_VERSION)


def decode(frame: bytes) -> typing.Any:
    """The message in ``frame``; raises ProtocolError for anything else.

    Every field is checked against its type hint, nested messages and maps
    included (common/wire/envelope.py: the loader's protocol uses the same codec),
    so the receiving loop never meets a wrongly typed value deep inside a
    message it has already started acting on.
    """
    return envelope.decode(frame, PROTOCOL_VERSION, MESSAGE_TYPES, ProtocolError)


#: How the roles' inboxes (common/wire/inbox.py) read and answer this protocol's frames.
CODEC = Codec(decode, encode, ProtocolError)
