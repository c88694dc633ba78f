"""The loader's wire protocol: trainer ranks (DEALER) <-> loader server (ROUTER).

Its own small protocol, apart from the pipeline's (common/protocol.py): the
two never share a socket.  Each control message is one msgpack frame, a map
with the version ``v``, the type ``t`` and the fields; :func:`decode` checks
all of them with the pipeline's checked codec (common/envelope.py) and
raises :class:`MessageError`, and the server counts and
drops such frames.  A batch is a multipart message: a :class:`BatchHeader`
frame, then the records as one raw frame (each row every feature side by
side, as :class:`Attached` lists them: loader.layout), then the rows'
record indices (int64): no serialization, no copy.

  rank -> server: Attach (start streaming from (epoch, batch)), Credit
                  (batches consumed so far: the server sends up to
                  consumed + window), StatusRequest
  server -> rank: Attached, Refused, Unknown (attach again: the server
                  restarted or forgot you), BatchHeader + arrays, Status

``session`` counts a client's attaches: whatever belongs to an older one
(batches still in flight, replies to stale credit) is ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from common import envelope
from common.envelope import Count

VERSION = 1

#: Control messages are small: the server refuses bigger inbound frames (ZMQ_MAXMSGSIZE).
MAX_INBOUND_BYTES = 64 * 1024


class MessageError(ValueError):
    """A frame that is not a valid loader message."""


@dataclass
class Attach:
    client_id: str
    session: Count
    rank: Count
    world_size: Count
    epoch: Count  # where to start: the next batch the trainer has not consumed
    batch: Count
    window: Count  # batches the server may send ahead of consumption
    dataset: str = ""  # the fingerprint the client's state was taken on ("" for a fresh start)
    seed: int | None = None  # the serving parameters its state was taken with (None: fresh start)
    batch_size: Count | None = None
    dynamic_masking: bool | None = None


@dataclass
class Credit:
    session: Count
    consumed: Count  # batches handed to the trainer since Attach


@dataclass
class StatusRequest:
    pass


@dataclass
class FeatureSpec:
    name: str
    dtype: str
    width: Count


@dataclass
class Attached:
    session: Count
    server_id: str
    dataset: str
    records: Count
    batch_size: Count
    seed: int
    dynamic_masking: bool
    batches_per_epoch: Count  # this rank's
    features: list[FeatureSpec]


@dataclass
class Refused:
    session: Count
    reason: str


@dataclass
class Unknown:
    session: Count


@dataclass
class BatchHeader:
    session: Count
    epoch: Count
    batch: Count
    last_in_epoch: bool
    rows: Count  # one frame follows: rows x the record layout of Attached.features, then the record ids


@dataclass
class RankStatus:
    client_id: str
    rank: Count
    world_size: Count
    epoch: Count  # the next batch to send
    batch: Count
    sent: Count  # since Attach
    allowed: Count  # consumed + window: sent never exceeds it


@dataclass
class Status:
    server_id: str
    ranks: list[RankStatus] = field(default_factory=list)
    dropped: Count = 0
    batches_sent: Count = 0
    cached_shards: Count = 0
    cached_bytes: Count = 0
    shard_loads: Count = 0


TYPES: dict[str, type] = {cls.__name__: cls for cls in (
    Attach, Credit, StatusRequest, Attached, Refused, Unknown, BatchHeader, Status)}


def encode(message) -> bytes:
    return envelope.encode(message, VERSION)


def decode(frame: bytes):
    """The message in ``frame``, every field checked (common/envelope.py, the pipeline's codec too);
    MessageError for anything else."""
    return envelope.decode(frame, VERSION, TYPES, MessageError)
