"""The loader's wire protocol: trainer ranks (DEALER) <-> loader server (ROUTER).

Its own small protocol, apart from the pipeline's (common/wire/protocol.py): the
two never share a socket.  Each control message is one msgpack frame, a map
with the version ``v``, the type ``t`` and the fields; :func:`decode` checks
all of them with the pipeline's checked codec (common/wire/envelope.py) and
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

Token-budget batches (``--batch-tokens``) are samples of varying length: the
batch frame holds their tokens end to end (one row per token) and a last
frame each sample's length; the client lays them out (loader/token_layout.py).

``session`` counts a client's attaches: whatever belongs to an older one
(batches still in flight, replies to stale credit) is ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

from common.wire import envelope
from common.wire.envelope import Codec, Count, Range

#: A share of the tokens, 0 to 1.
Share = Annotated[float, Range(0.0, 1.0)]

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
    batch_tokens: Count | None = None  # 0: fixed-size batches; else the token budget its state was taken with
    layout: str | None = None  # with batch_tokens: the batch layout its state was taken with
    order: str | None = None  # Attached.order its state was taken with


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
    batches_per_epoch: Count  # this rank's (of the epoch it attached at: token-budget epochs vary)
    features: list[FeatureSpec]
    batch_tokens: Count = 0  # > 0: token-budget batches (features are then per token, BatchHeader.tokens rows)
    layout: str = ""  # with batch_tokens: how the client lays the samples out (loader/token_layout.py)
    pad_id: Count = 0  # with the padded layout: the id padding holds
    #: The serving settings that order the batches besides those above (loader.batches.ServingParams.order):
    #: a state taken with other ones is refused, as with another seed.
    order: str = ""


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
    #: > 0 for token-budget batches: ``rows`` samples of ``tokens`` tokens in all; the first frame is then
    #: one row per token, and a third frame follows the record ids: each sample's length (int32).
    tokens: Count = 0


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
class PhaseShare:
    """A source in one phase the stream has been through: its target share there and its share of the tokens
    the planned stream holds in it (from ``start`` on the clock, tokens served, to the next phase or now)."""

    phase: Count
    start: Count
    target: Share
    realized: Share
    tokens: Count


@dataclass
class SourceShare:
    """A mixture's source: its target share of the tokens (in the phase now), what was sent, and each phase's
    target and realized share."""

    source: str
    target: Share
    realized: Share
    tokens: Count
    phases: list[PhaseShare] = field(default_factory=list)


@dataclass
class Status:
    server_id: str
    ranks: list[RankStatus] = field(default_factory=list)
    dropped: Count = 0
    batches_sent: Count = 0
    cached_shards: Count = 0
    cached_bytes: Count = 0
    shard_loads: Count = 0
    mixture: list[SourceShare] = field(default_factory=list)  # several --data: each source's share


TYPES: dict[str, type] = {cls.__name__: cls for cls in (
    Attach, Credit, StatusRequest, Attached, Refused, Unknown, BatchHeader, Status)}


def encode(message: object) -> bytes:
    return envelope.encode(message, VERSION)


def decode(frame: bytes) -> Any:
    """The message in ``frame``, every field checked (common/wire/envelope.py, the pipeline's codec too);
    MessageError for anything else."""
    return envelope.decode(frame, VERSION, TYPES, MessageError)


#: How the loader server's inbox (common/wire/inbox.py) reads and answers these frames.
CODEC = Codec(decode, encode, MessageError)
