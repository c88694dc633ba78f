"""The wire protocol: round trips, and garbage never gets past decode()."""

import random

import msgpack
import pytest

from common import protocol


def test_round_trip_every_message_type():
    samples = [
        protocol.Hello("w1", "host", 12, "worker"),
        protocol.SinkHello("s", {"t1": "v1"}),
        protocol.Welcome({"a": 1}, "v"),
        protocol.TaskRequest(2),
        protocol.TaskAssignment(["p", 0, 10, 10, "v", ""], 60.0, 1, b"bytes"),
        protocol.Heartbeat(["t1"]),
        protocol.HeartbeatReply("v"),
        protocol.TaskFinished("t"),
        protocol.TaskFailed("t", "boom"),
        protocol.TaskReturned(["t"]),
        protocol.TaskAck("t", "j", "w", "p", 0, 1, "v", "s3://b/k", 3, "abc", {"documents": 1}),
        protocol.TasksDone(["t"], 3),
        protocol.TasksQuarantined({"t": {"error": "x"}}),
        protocol.Shutdown("done"),
    ]
    assert {type(s).__name__ for s in samples} == set(protocol.MESSAGE_TYPES)
    for message in samples:
        assert protocol.decode(protocol.encode(message)) == message


@pytest.mark.parametrize("payload,reason", [
    ({"v": 99, "t": "TaskRequest", "credit": 1}, "version"),
    ({"t": "TaskRequest", "credit": 1}, "version"),
    ({"v": 1, "t": "Nope"}, "unknown"),
    ({"v": 1, "t": "TaskRequest", "credit": "1"}, "wrong type"),
    ({"v": 1, "t": "TaskRequest", "credit": True}, "wrong type"),
    ({"v": 1, "t": "TaskRequest"}, "lacks"),
    ({"v": 1, "t": "TaskRequest", "credit": 1, "extra": 2}, "unknown fields"),
    ([1, 2, 3], "not a map"),
])
def test_malformed_messages_are_rejected(payload, reason):
    with pytest.raises(protocol.ProtocolError, match=reason):
        protocol.decode(msgpack.packb(payload))


def test_random_bytes_and_truncations_only_raise_protocol_error():
    rng = random.Random(0)
    valid = protocol.encode(protocol.TaskAck("t", "j", "w", "p", 0, 1, "v", "s", 3, "abc", {"documents": 1}))
    frames = [bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 200))) for _ in range(3000)]
    frames += [valid[:cut] for cut in range(len(valid))]
    frames += [bytes(b ^ (1 << rng.randint(0, 7)) if rng.random() < 0.05 else b for b in valid) for _ in range(2000)]
    decoded = 0
    for frame in frames:
        try:
            protocol.decode(frame)
            decoded += 1
        except protocol.ProtocolError:
            pass
    assert decoded < len(frames)


def test_sink_hello_of_a_big_manifest_fits_the_inbound_limit():
    """The sink sends its done set in chunks small enough for the ventilator's socket."""
    from common.protocol import MAX_INBOUND_BYTES
    chunk = {f"{i:020x}": f'"{i:032x}-12"' for i in range(5000)}
    assert len(protocol.encode(protocol.SinkHello("sink-host-123-abcdef", chunk, False))) < MAX_INBOUND_BYTES
