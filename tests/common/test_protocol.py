"""The wire protocol: round trips, and garbage never gets past decode()."""

import random

import msgpack
import pytest

from common.job.config import JobConfig
from common.job.params import Component
from common.wire import protocol
from common.writers import ShardFile
from tests.support.run_configs import steps_of

STATS = protocol.AckStats(documents=1, skipped={"empty": 2}, tokens=30, seconds={"tokenize": 0.5}, cpu_seconds=1,
                          output_tokens=24, counters={"tokens_per_document": {"up_to_32": 1}})


def test_round_trip_every_message_type():
    samples = [
        protocol.Hello("w1", "host", 12, "worker", 1.7e9),
        protocol.SinkHello("s", "j", {"t1": "v1"}),
        JobConfig("s3://b/c", "/out", Component("wikiextractor"), "{}", steps=steps_of("blingfire"),
                  objective=Component("bert", {"dupe_factor": 2, "masked_lm_prob": 0.3, "do_whole_word_mask": True})
                  ).welcome("v"),
        protocol.TaskRequest(2),
        protocol.TaskAssignment(["p", 0, 10, 10, "v", ""], 60.0, 1, b"bytes"),
        protocol.Heartbeat(["t1"]),
        protocol.HeartbeatReply("v"),
        protocol.HeartbeatReply("v", known=False),
        protocol.TaskFinished("t"),
        protocol.TaskFailed("t", "boom"),
        protocol.TaskReturned(["t"]),
        protocol.JobDeclined("0123456789abcdef", "ValueError: unknown step 'demo-drop-digits'"),
        protocol.TaskAck("t", "j", "w", "p", 0, 1, "v", [ShardFile("part-t.tfrecord", 3, "abc", 10)], 3, STATS),
        protocol.TasksDone(["t"], 3),
        protocol.TasksQuarantined({"t": protocol.Quarantine("p", 0, 10, 3, ["lease expired"])}),
        protocol.WorkerHosts({"host": [1.7e9, 1.7e9 + 60]}),
        protocol.Shutdown("done"),
        protocol.SinkClosed("unknown output format 'demo-jsonl'"),
        protocol.SinkStandby("sink-a", "host", 6.5),
    ]
    assert {type(s).__name__ for s in samples} == set(protocol.MESSAGE_TYPES)
    for message in samples:
        assert protocol.decode(protocol.encode(message)) == message
    config = JobConfig.from_welcome(protocol.decode(protocol.encode(samples[2])))
    assert isinstance(config.objective, Component) and config.job_id == samples[2].job_id
    (ack,) = [sample for sample in samples if isinstance(sample, protocol.TaskAck)]
    assert isinstance(protocol.decode(protocol.encode(ack)).shards[0], ShardFile)


def _ack(**changes) -> dict:
    fields = {"v": protocol.PROTOCOL_VERSION, "t": "TaskAck", "task_id": "t", "job_id": "j", "worker_id": "w", "source": "p", "start": 0,
              "end": 1, "version": "v", "shards": [{"name": "s", "records": 3, "sha256": "abc", "bytes": 9}], "records": 3,
              "stats": {"documents": 1, "skipped": {"empty": 2}, "seconds": {"tokenize": 0.5}}}
    fields.update(changes)
    return fields


def _welcome(**config_changes) -> dict:
    """A Welcome frame whose job has ``config_changes`` (a ``job_id`` change: the Welcome's own field)."""
    job_id = config_changes.pop("job_id", "0123456789abcdef")
    config = {"data_uri": "d", "output_uri": "o", "reader": {"name": "text"},
              "steps": [{"name": "read"}, {"name": "segment", "params": {"segmenter": "line"}}],
              "tokenizer_json": "{}", "objective": {"name": "bert", "params": {"dupe_factor": 2}}}
    config.update(config_changes)
    job = msgpack.packb({"v": protocol.PROTOCOL_VERSION, "t": "JobConfig", **config})
    return {"v": protocol.PROTOCOL_VERSION, "t": "Welcome", "job": job, "job_id": job_id, "ventilator_id": "v"}


def _decode(frame: bytes):
    """What a role acts on: the message, and a Welcome's job decoded by the job layer."""
    message = protocol.decode(frame)
    return JobConfig.from_welcome(message) if isinstance(message, protocol.Welcome) else message


@pytest.mark.parametrize("payload,reason", [
    (_ack(), None),
    (_ack(stats={"documents": "12"}), "TaskAck.stats.documents has the wrong type"),
    (_ack(stats={"skipped": {"empty": "2"}}), "TaskAck.stats.skipped has the wrong type"),
    (_ack(stats={"seconds": {"tokenize": "fast"}}), "TaskAck.stats.seconds has the wrong type"),
    (_ack(stats={"pages": 1}), r"TaskAck.stats has unknown fields \['pages'\]"),
    (_ack(stats=[1]), "TaskAck.stats has the wrong type"),
    (_welcome(), None),
    (_welcome(shuffle=True), r"JobConfig has unknown fields \['shuffle'\]"),
    (_welcome(objective={"name": "bert", "params": {"dupe_factor": [2]}}), "JobConfig.objective.params has the wrong type"),
    (_welcome(objective={"params": {}}), "JobConfig.objective lacks name"),
    (_welcome(job_id="../../etc/passwd"), "Welcome.job_id is not of its form"),
    (_welcome(job_id="0123456789ABCDEF"), "Welcome.job_id is not of its form"),
    (_welcome(job_id=16), "Welcome.job_id has the wrong type"),
    (_ack(shards=[{"name": "s", "records": "3", "sha256": "", "bytes": 1}]), "TaskAck.shards.records has the wrong type"),
    (_welcome(tokenizer_json=None), "JobConfig.tokenizer_json has the wrong type"),
    ({"v": protocol.PROTOCOL_VERSION, "t": "SinkHello", "sink_id": "s", "job_id": "j", "done": {"t": 3}}, "SinkHello.done has the wrong type"),
    ({"v": protocol.PROTOCOL_VERSION, "t": "TasksQuarantined", "failures": {"t": {"source": "p"}}}, "TasksQuarantined.failures lacks start"),
])
def test_nested_fields_are_checked_too(payload, reason):
    """A peer of another version, or a broken one, is refused at decode: a
    wrongly typed statistic must never reach the manifest."""
    if reason is None:
        _decode(msgpack.packb(payload))
    else:
        with pytest.raises(protocol.ProtocolError, match=reason):
            _decode(msgpack.packb(payload))


@pytest.mark.parametrize("payload,reason", [
    ({"v": 99, "t": "TaskRequest", "credit": 1}, "version"),
    ({"t": "TaskRequest", "credit": 1}, "version"),
    ({"v": protocol.PROTOCOL_VERSION, "t": "Nope"}, "unknown"),
    ({"v": protocol.PROTOCOL_VERSION, "t": "TaskRequest", "credit": "1"}, "wrong type"),
    ({"v": protocol.PROTOCOL_VERSION, "t": "TaskRequest", "credit": True}, "wrong type"),
    ({"v": protocol.PROTOCOL_VERSION, "t": "TaskRequest"}, "lacks"),
    ({"v": protocol.PROTOCOL_VERSION, "t": "TaskRequest", "credit": 1, "extra": 2}, "unknown fields"),
    ({"v": protocol.PROTOCOL_VERSION, "t": "JobDeclined", "job_id": "../x", "reason": "r"}, "JobDeclined.job_id"),
    ({"v": protocol.PROTOCOL_VERSION, "t": "JobDeclined", "job_id": "0123456789abcdef", "reason": 7}, "wrong type"),
    ({"v": protocol.PROTOCOL_VERSION, "t": "JobDeclined", "job_id": "0123456789abcdef"}, "lacks"),
    ([1, 2, 3], "not a map"),
])
def test_malformed_messages_are_rejected(payload, reason):
    with pytest.raises(protocol.ProtocolError, match=reason):
        protocol.decode(msgpack.packb(payload))


def test_random_bytes_and_truncations_only_raise_protocol_error():
    rng = random.Random(0)
    valid = protocol.encode(protocol.TaskAck("t", "j", "w", "p", 0, 1, "v", [ShardFile("s", 3, "abc", 10)], 3, STATS))
    for cut in range(len(valid)):
        with pytest.raises(protocol.ProtocolError):
            protocol.decode(valid[:cut])
    frames = [bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 200))) for _ in range(3000)]
    frames += [bytes(b ^ (1 << rng.randint(0, 7)) if rng.random() < 0.05 else b for b in valid) for _ in range(2000)]
    for frame in frames:
        try:
            message = protocol.decode(frame)
        except protocol.ProtocolError:
            continue
        # What does decode is a well-formed message: it survives a round trip unchanged.
        assert protocol.decode(protocol.encode(message)) == message


def test_sink_hello_of_a_big_manifest_fits_the_inbound_limit():
    """The sink sends its done set in chunks small enough for the ventilator's socket."""
    from common.wire.protocol import MAX_INBOUND_BYTES
    chunk = {f"{i:020x}": f'"{i:032x}-12"' for i in range(5000)}
    assert len(protocol.encode(protocol.SinkHello("sink-host-123-abcdef", "0123456789abcdef", chunk, False))) < MAX_INBOUND_BYTES


# Structured fuzzing: msgpack values of every kind, in the envelope's places and the fields'.
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_leaves = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**64 - 1), st.floats(allow_nan=True),
                    st.text(max_size=20), st.binary(max_size=20))
_values = st.recursive(_leaves, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                        st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                       max_leaves=20)


def _frames(version: int, type_names: list[str]):
    known_fields = st.dictionaries(st.sampled_from(["task_id", "peer_id", "held", "config", "shards", "stats",
                                                    "credit", "done", "rank", "batch", "state", "reason"]),
                                   _values, max_size=6)
    return st.builds(lambda v, t, fields: {**fields, "v": v, "t": t},
                     st.one_of(st.just(version), _values),
                     st.one_of(st.sampled_from(type_names), _values),
                     st.one_of(known_fields, st.dictionaries(st.text(max_size=8), _values, max_size=4)))


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_any_msgpack_frame_is_a_message_or_a_protocol_error(data):
    """The pipeline's codec and the loader's: whatever a well-formed frame
    decodes to, the answer is a message or the protocol's own error (the
    receiving loops catch exactly that), never a TypeError or KeyError."""
    import msgpack

    from common.wire import protocol
    from loader import messages

    for decode, error, version, names in (
            (protocol.decode, protocol.ProtocolError, protocol.PROTOCOL_VERSION, list(protocol.MESSAGE_TYPES)),
            (messages.decode, messages.MessageError, messages.VERSION, list(messages.TYPES))):
        payload = data.draw(st.one_of(_frames(version, names), _values))
        frame = msgpack.packb(payload, use_bin_type=True)
        try:
            decode(frame)
        except error:
            pass


def test_the_nine_byte_frames_that_ended_the_roles():
    import msgpack
    import pytest

    from common.wire import protocol
    from loader import messages

    with pytest.raises(protocol.ProtocolError, match="unknown message type"):
        protocol.decode(msgpack.packb({"v": protocol.PROTOCOL_VERSION, "t": []}))
    with pytest.raises(messages.MessageError, match="unknown message type"):
        messages.decode(msgpack.packb({"v": messages.VERSION, "t": []}))
    for hostile in ({"v": [], "t": "Hello"}, {"v": {}, "t": "Hello"}, {"v": 4.0, "t": "Hello"}):
        with pytest.raises(protocol.ProtocolError, match="protocol version"):
            protocol.decode(msgpack.packb(hostile))
    with pytest.raises(protocol.ProtocolError):
        protocol.decode(b"\x91" * 100_000 + b"\xc0")


def test_dropped_messages_stay_bounded_whatever_the_reasons(caplog):
    """Hostile frames make each reason unique: the counts stay bounded, and so does the log."""
    import logging

    from common.wire.transport import DroppedMessages

    dropped = DroppedMessages("sink")
    with caplog.at_level(logging.WARNING, logger="common.wire.transport"):
        for i in range(20_000):
            dropped.drop(f"protocol version {i}, expected 4")
    assert dropped.total == 20_000
    assert len(dropped.dropped) == DroppedMessages.MAX_REASONS + 1
    assert dropped.dropped[DroppedMessages.OTHER] == 20_000 - DroppedMessages.MAX_REASONS
    assert len(caplog.records) <= DroppedMessages.LOG_LINES


# Well-typed hostile numbers: every field of the right type, holding inf, NaN, -1e12, 2**64-1, 1.7e308.
# A frame that decodes is one a role can act on: its numbers must be finite and within their declared
# ranges, so that a manifest line stays strict JSON, the cost stays finite and a counter can be incremented.

import dataclasses  # noqa: E402
import math  # noqa: E402
import typing  # noqa: E402
from types import UnionType  # noqa: E402

_hostile_floats = st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                            st.sampled_from([math.inf, -math.inf, math.nan, -1e12, 1.7e308, -1.7e308, 0.0, 1.5]))
_hostile_ints = st.one_of(st.integers(-2**63, 2**64 - 1), st.sampled_from([2**64 - 1, -2**63, -1, 2**53 + 1, 0, 3]))


def _well_typed(hint, depth: int = 0, in_range: bool = False):
    """Values msgpack carries that match ``hint``'s type (not its range): what a hostile but well-formed peer
    sends.  ``in_range``: every annotated value of its declared form or range, and floats finite (tests/common/
    test_inbox.py: frames that decode, whatever else they hold, to reach each handler behind the codec)."""
    origin = typing.get_origin(hint)
    if isinstance(hint, typing.NewType):  # an opaque value (the Welcome's job): its plain type
        return _well_typed(hint.__supertype__, depth, in_range)
    if origin is typing.Annotated:
        from common.wire.envelope import Matches, Range

        declared = [st.from_regex(item.pattern, fullmatch=True) if isinstance(item, Matches)
                    else st.integers(int(item.low), int(item.high)) if hint.__origin__ is int
                    else st.floats(item.low, item.high) for item in hint.__metadata__
                    if isinstance(item, (Matches, Range))]
        return st.one_of(*declared) if in_range and declared else _well_typed(hint.__origin__, depth, in_range)
    if origin in (typing.Union, UnionType):
        return st.one_of(*[_well_typed(option, depth, in_range) for option in typing.get_args(hint)])
    if dataclasses.is_dataclass(hint):
        hints = typing.get_type_hints(hint, include_extras=True)
        return st.fixed_dictionaries({f.name: _well_typed(hints[f.name], depth + 1, in_range)
                                      for f in dataclasses.fields(hint)})
    if origin in (list, tuple):
        return st.lists(_well_typed(typing.get_args(hint)[0], depth + 1, in_range), max_size=3)
    if origin is dict:
        key, value = typing.get_args(hint)
        return st.dictionaries(_well_typed(key, depth + 1, in_range), _well_typed(value, depth + 1, in_range),
                               max_size=3)
    floats = st.floats(-1e12, 1e12) if in_range else _hostile_floats
    return {int: _hostile_ints, float: floats, str: st.text(max_size=8), bool: st.booleans(),
            bytes: st.binary(max_size=8), type(None): st.none(), list: st.lists(_hostile_ints, max_size=3),
            dict: st.dictionaries(st.text(max_size=4), floats, max_size=2)}[hint]


def _numbers(value, hint=None):
    """(number, its declared Range or None) for every number in a decoded message, nested messages, lists and
    maps included."""
    from common.wire.envelope import Range

    if typing.get_origin(hint) is typing.Annotated:
        bounds = [item for item in hint.__metadata__ if isinstance(item, Range)]
        for number, _ in _numbers(value, hint.__origin__):
            yield number, bounds[0] if bounds else None
        return
    if typing.get_origin(hint) in (typing.Union, UnionType):  # Count | None: the number's option
        options = [option for option in typing.get_args(hint) if option is not type(None)]
        yield from _numbers(value, options[0] if len(options) == 1 else None)
        return
    args = typing.get_args(hint)
    if isinstance(value, bool):
        return
    if isinstance(value, (int, float)):
        yield value, None
    elif dataclasses.is_dataclass(value):
        hints = typing.get_type_hints(type(value), include_extras=True)
        for f in dataclasses.fields(value):
            yield from _numbers(getattr(value, f.name), hints[f.name])
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _numbers(item, args[0] if args else None)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _numbers(item, args[1] if len(args) == 2 else None)


_CODECS = [(protocol, protocol.ProtocolError, protocol.PROTOCOL_VERSION, protocol.MESSAGE_TYPES)]


def _codecs():
    from loader import messages
    return _CODECS + [(messages, messages.MessageError, messages.VERSION, messages.TYPES)]


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_a_well_typed_message_that_decodes_holds_only_finite_numbers_in_range(data):
    for codec, error, version, types in _codecs():
        name = data.draw(st.sampled_from(sorted(types)))
        fields = data.draw(_well_typed(types[name]))
        frame = msgpack.packb({**fields, "v": version, "t": name}, use_bin_type=True)
        try:
            message = codec.decode(frame)
        except error:
            continue
        for number, bounds in _numbers(message, types[name]):
            assert math.isfinite(number), (name, number)
            assert bounds is None or bounds.low <= number <= bounds.high, (name, number, bounds)
        # What decodes survives the round trip, and each count can be incremented and sent again.
        assert codec.decode(codec.encode(message)) == message


@pytest.mark.parametrize("payload,reason", [
    (_ack(stats={"seconds": {"tokenize": math.inf}}), "TaskAck.stats.seconds is not a finite number"),
    (_ack(stats={"seconds": {"tokenize": math.nan}}), "TaskAck.stats.seconds is not a finite number"),
    (_ack(stats={"seconds": {"tokenize": -1e12}}), r"TaskAck.stats.seconds is out of its range"),
    (_ack(stats={"cpu_seconds": math.nan}), "TaskAck.stats.cpu_seconds is not a finite number"),
    (_ack(stats={"documents": -5}), "TaskAck.stats.documents is out of its range"),
    (_ack(stats={"counters": {"dedup": {"removed": 2**64 - 1}}}), "TaskAck.stats.counters is out of its range"),
    (_ack(records=-1), "TaskAck.records is out of its range"),
    (_ack(shards=[{"name": "s", "records": 3, "sha256": "", "bytes": -9}]), "TaskAck.shards.bytes is out of"),
    ({"v": protocol.PROTOCOL_VERSION, "t": "WorkerHosts", "hosts": {"h": [-1.7e308, 1.7e308]}},
     "WorkerHosts.hosts is out of its range"),
    ({"v": protocol.PROTOCOL_VERSION, "t": "WorkerHosts", "hosts": {"h": [1.7e9, math.inf]}},
     "WorkerHosts.hosts is not a finite number"),
    ({"v": protocol.PROTOCOL_VERSION, "t": "Hello", "peer_id": "w", "host": "h", "pid": 1, "role": "worker",
      "booted_at": math.nan}, "Hello.booted_at is not a finite number"),
    ({"v": protocol.PROTOCOL_VERSION, "t": "TaskRequest", "credit": 2**64 - 1}, "TaskRequest.credit is out of"),
    (_welcome(lease_seconds=math.inf), "JobConfig.lease_seconds is not a finite number"),
    (_welcome(objective={"name": "bert", "params": {"masked_lm_prob": math.nan}}),
     "JobConfig.objective.params has the wrong type"),
])
def test_hostile_numbers_are_refused_where_they_are_decoded(payload, reason):
    with pytest.raises(protocol.ProtocolError, match=reason):
        _decode(msgpack.packb(payload))


def test_an_attach_at_the_last_epoch_msgpack_holds_is_refused_at_the_door():
    """epoch = 2**64-1 was served, and the loader died encoding epoch 2**64 at the rollover."""
    from loader import messages

    attach = {"v": messages.VERSION, "t": "Attach", "client_id": "c", "session": 1, "rank": 0, "world_size": 1,
              "epoch": 2**64 - 1, "batch": 0, "window": 2}
    with pytest.raises(messages.MessageError, match="Attach.epoch is out of its range"):
        messages.decode(msgpack.packb(attach))
    for name in ("session", "rank", "world_size", "batch", "window"):
        with pytest.raises(messages.MessageError, match=f"Attach.{name} is out of its range"):
            messages.decode(msgpack.packb({**attach, "epoch": 0, name: -1 if name != "session" else 2**64 - 1}))
    last = messages.decode(msgpack.packb({**attach, "epoch": 2**53 - 1}))
    messages.encode(messages.BatchHeader(last.session, last.epoch + 1, 0, False, 1))  # the rollover encodes


@settings(max_examples=80, deadline=None)
@given(fields=_well_typed(protocol.TaskAck), hosts=_well_typed(protocol.WorkerHosts))
def test_what_decodes_makes_a_strict_json_manifest_line_and_a_finite_cost(fields, hosts):
    """The sink's consequences of a hostile ack: its manifest line is read back by orjson (which refuses
    Infinity and NaN), and summary.json's cost is finite and strict JSON."""
    import orjson

    from sink.cost import CostLedger
    from sink.server import manifest_entry

    ledger = CostLedger(hourly_price=0.5)
    try:
        ack = protocol.decode(msgpack.packb({**fields, "v": protocol.PROTOCOL_VERSION, "t": "TaskAck"}))
    except protocol.ProtocolError:
        ack = None
    if ack is not None:
        line = orjson.dumps(manifest_entry(ack))
        assert orjson.loads(line)["task"] == ack.task_id
        ledger.add(ack.worker_id, ack.stats, ack.records)
    try:
        spans = protocol.decode(msgpack.packb({**hosts, "v": protocol.PROTOCOL_VERSION, "t": "WorkerHosts"}))
        ledger.add_spans(spans.hosts)
    except protocol.ProtocolError:
        pass
    summary = ledger.summary(128)
    assert all(math.isfinite(v) for v, _ in _numbers(summary))
    orjson.loads(orjson.dumps(summary))


@given(st.text(max_size=40) | st.from_regex(r"\[?[0-9a-f:.\]]{0,12}:?[0-9+\- ]{0,7}", fullmatch=True))
def test_any_address_a_peer_sends_parses_or_is_one_address_error(text):
    """A job's sink address crosses the socket (the Welcome): any text is a (host, port) ZeroMQ can take, or
    AddressError (a line the worker fails the job's tasks with), never another exception."""
    from common.wire.transport import AddressError, address, endpoint, parse_address

    try:
        host, port = parse_address(text, 5558)
    except AddressError as error:
        assert "\n" not in str(error)
        return
    assert 0 < port < 65536 and not any(char.isspace() for char in host) and "/" not in host
    assert endpoint(host, port).startswith("tcp://")
    if host:
        assert parse_address(address(host, port), host_required=True) == (host, port)
