"""Protocol Buffers' wire format, read by hand where a message is parsed
without its generated classes: a TFRecord's tf.train.Example (loader/
example.py's slow path) and a SentencePiece ModelProto (common/
tokenization/sentencepiece_conversion.py).  Neither needs more than the
four wire types, and neither should import protobuf or TensorFlow for it."""

from __future__ import annotations

from collections.abc import Iterator


class WireError(ValueError):
    """The bytes are not a well-formed protobuf message."""


def read_varint(data: bytes, offset: int) -> tuple[int, int]:
    """(value, offset after it) of the base-128 varint at ``offset``."""
    value = shift = 0
    while True:
        if offset >= len(data):
            raise WireError("truncated varint")
        byte = data[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, offset
        shift += 7
        if shift > 63:
            raise WireError("varint too long")


def fields(data: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) of each field of a message: an int
    for varints, bytes for length-delimited and the raw 4 or 8 bytes of
    fixed-width fields."""
    offset = 0
    while offset < len(data):
        tag, offset = read_varint(data, offset)
        number, wire = tag >> 3, tag & 7
        value: int | bytes
        if wire == 0:
            value, offset = read_varint(data, offset)
        else:
            if wire == 2:
                size, offset = read_varint(data, offset)
            elif wire in (1, 5):
                size = 8 if wire == 1 else 4
            else:
                raise WireError(f"unsupported wire type {wire}")
            value, offset = data[offset:offset + size], offset + size
            if offset > len(data):
                raise WireError("truncated field")
        yield number, wire, value
