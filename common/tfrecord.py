"""``tf.train.Example`` records and TFRecord framing, built in bulk with numpy.

Building one protobuf object per record costs more than everything else the
reference script does per instance.  The wire format of an Example holding
only int64 and float lists is simple, so a whole batch is encoded at once:
every nested length is computed from the values' varint sizes first, then
each piece of every record (tags, keys, length varints, packed values,
TFRecord framing) is written once, at its final offset, into one buffer.
Only the CRC32C of each record is a per-record call.  TensorFlow's own reader
is the judge of this encoder (see the tests); the worker does not need
TensorFlow.

Wire layout (proto field numbers from tensorflow/core/example):
  Example  { Features features = 1; }
  Features { map<string, Feature> feature = 1; }   entry: key = 1, value = 2
  Feature  { FloatList float_list = 2; Int64List int64_list = 3; }
  *List    { repeated value = 1 [packed]; }
TFRecord: uint64 length, uint32 masked CRC32C(length), data, uint32 masked CRC32C(data).
"""

from __future__ import annotations

import gzip
import hashlib
import struct
from dataclasses import dataclass
from typing import BinaryIO

import crc32c
import numpy as np

_KEY, _VALUE, _FLOAT_LIST, _INT64_LIST, _PACKED = 0x0A, 0x12, 0x12, 0x1A, 0x0A


def varint_sizes(values: np.ndarray) -> np.ndarray:
    """Bytes of each non-negative integer as a protobuf varint."""
    values = np.asarray(values)
    largest = int(values.max()) if values.size else 0
    if values.size and (values.min() < 0 or largest >= (1 << 35)):
        raise ValueError("varints take integers in [0, 2**35)")
    size = np.ones(values.shape, dtype=np.int64)
    k = 1
    while k < 5 and largest >= (1 << (7 * k)):
        size += values >= (1 << (7 * k))
        k += 1
    return size


def varint_bytes(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


@dataclass
class Ragged:
    """Per-row byte strings as one flat uint8 array plus row lengths."""

    data: np.ndarray  # uint8
    lengths: np.ndarray  # int64


def varints(values: np.ndarray) -> Ragged:
    """Protobuf varints of a (rows, columns) array, concatenated per row."""
    values = np.asarray(values)
    if values.ndim == 1:
        values = values[:, None]
    rows = values.shape[0]
    size = varint_sizes(values).reshape(-1)
    width = int(size.max()) if size.size else 1
    flat = values.reshape(-1).astype(np.uint64 if width > 4 else np.uint32)
    pieces = np.empty((flat.size, width), dtype=np.uint8)
    for k in range(width):
        more = (size > k + 1).astype(np.uint8) << 7
        pieces[:, k] = ((flat >> (7 * k)) & 0x7F).astype(np.uint8) | more
    data = pieces.reshape(-1) if width == 1 else pieces[np.arange(width)[None, :] < size[:, None]]
    return Ragged(data, size.reshape(rows, -1).sum(axis=1))


class _Layout:
    """Pieces of every record, in order; offsets are decided in :meth:`build`."""

    def __init__(self, rows: int):
        self.rows = rows
        self.pieces: list[tuple[str, object, np.ndarray | int]] = []  # (kind, payload, width)

    def constant(self, value: bytes) -> None:
        if self.pieces and self.pieces[-1][0] == "constant":
            _, previous, _ = self.pieces.pop()
            value = previous + value
        self.pieces.append(("constant", value, len(value)))

    def fixed(self, matrix: np.ndarray) -> None:
        """The same number of bytes in every row: a (rows, width) uint8 matrix."""
        matrix = np.ascontiguousarray(matrix).view(np.uint8).reshape(self.rows, -1)
        self.pieces.append(("fixed", matrix, matrix.shape[1]))

    def ragged(self, part: Ragged) -> None:
        self.pieces.append(("ragged", part, part.lengths))

    def varint(self, values: np.ndarray) -> None:
        """One varint per row; a constant when every row has the same value
        (the nested lengths of fixed-size features)."""
        if values.size and values.min() == values.max():
            self.constant(varint_bytes(int(values[0])))
        else:
            self.ragged(varints(values))

    def integers(self, values: np.ndarray) -> np.ndarray:
        """Packed int64 values; returns their byte length per row."""
        if values.size == 0 or values.max() < 128:  # one byte each: the values themselves
            self.fixed(values.astype(np.uint8))
            return np.full(self.rows, values.shape[1], dtype=np.int64)
        part = varints(values)
        self.ragged(part)
        return part.lengths

    def row_lengths(self) -> np.ndarray:
        total = np.zeros(self.rows, dtype=np.int64)
        for _, _, width in self.pieces:
            total += width
        return total

    def build(self, out: np.ndarray, row_start: np.ndarray) -> None:
        """Write every piece of every row at its offset in ``out``."""
        offset = row_start.copy()
        for kind, payload, width in self.pieces:
            if kind == "constant":
                if width == 1:
                    out[offset] = payload[0]
                else:
                    out[offset[:, None] + np.arange(width)] = np.frombuffer(payload, dtype=np.uint8)
            elif kind == "fixed":
                if width:
                    out[offset[:, None] + np.arange(width)] = payload
            else:
                part: Ragged = payload
                if part.data.size:
                    source_start = np.zeros(self.rows, dtype=np.int64)
                    np.cumsum(part.lengths[:-1], out=source_start[1:])
                    out[np.arange(part.data.size, dtype=np.int64) + np.repeat(offset - source_start, part.lengths)] = part.data
            offset += width


def _example_layout(features: dict[str, np.ndarray], layout: _Layout) -> None:
    """Append one Example's pieces per row to ``layout``."""
    rows = layout.rows
    entries = []
    # Lengths first, innermost out, from the values' sizes alone.
    for key, values in features.items():
        values = np.asarray(values)
        if values.dtype.kind == "f":
            packed_length = np.full(rows, 4 * values.shape[1], dtype=np.int64)
        elif values.size == 0 or values.max() < 128:
            packed_length = np.full(rows, values.shape[1], dtype=np.int64)
        else:
            packed_length = varint_sizes(values).sum(axis=1)
        list_length = 1 + varint_sizes(packed_length) + packed_length
        feature_length = 1 + varint_sizes(list_length) + list_length
        key_bytes = key.encode()
        entry_length = 2 + len(key_bytes) + 1 + varint_sizes(feature_length) + feature_length
        entries.append((key_bytes, values, packed_length, list_length, feature_length, entry_length))
    features_length = sum(1 + varint_sizes(e[5]) + e[5] for e in entries)

    layout.constant(bytes([_KEY]))
    layout.varint(features_length)
    for key_bytes, values, packed_length, list_length, feature_length, entry_length in entries:
        layout.constant(bytes([_KEY]))
        layout.varint(entry_length)
        layout.constant(bytes([_KEY, len(key_bytes)]) + key_bytes + bytes([_VALUE]))
        layout.varint(feature_length)
        layout.constant(bytes([_FLOAT_LIST if values.dtype.kind == "f" else _INT64_LIST]))
        layout.varint(list_length)
        layout.constant(bytes([_PACKED]))
        layout.varint(packed_length)
        if values.dtype.kind == "f":
            layout.fixed(values.astype("<f4"))
        else:
            layout.integers(values)


def encode_examples(features: dict[str, np.ndarray]) -> Ragged:
    """Serialized ``tf.train.Example`` for each row of the feature arrays."""
    rows = len(next(iter(features.values())))
    layout = _Layout(rows)
    _example_layout(features, layout)
    lengths = layout.row_lengths()
    row_start = np.zeros(rows, dtype=np.int64)
    np.cumsum(lengths[:-1], out=row_start[1:])
    out = np.empty(int(lengths.sum()), dtype=np.uint8)
    layout.build(out, row_start)
    return Ragged(out, lengths)


def _masked_crc(data) -> int:
    crc = crc32c.crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


_LENGTH_CRCS: dict[int, int] = {}


def encode_records(features: dict[str, np.ndarray]) -> bytes:
    """TFRecord-framed Examples for every row, as the bytes of a shard."""
    rows = len(next(iter(features.values())))
    if rows == 0:
        return b""
    example = _Layout(rows)
    _example_layout(features, example)
    data_length = example.row_lengths()
    crcs = np.empty(rows, dtype="<u4")
    for i, length in enumerate(data_length.tolist()):
        crc = _LENGTH_CRCS.get(length)
        if crc is None:
            crc = _LENGTH_CRCS[length] = _masked_crc(struct.pack("<Q", length))
        crcs[i] = crc
    record_length = 12 + data_length + 4
    row_start = np.zeros(rows, dtype=np.int64)
    np.cumsum(record_length[:-1], out=row_start[1:])
    out = np.empty(int(record_length.sum()), dtype=np.uint8)
    out[row_start[:, None] + np.arange(8)] = data_length.astype("<u8").view(np.uint8).reshape(rows, 8)
    out[row_start[:, None] + np.arange(8, 12)] = crcs.view(np.uint8).reshape(rows, 4)
    example.build(out, row_start + 12)
    view = memoryview(out)
    for i, (start, length) in enumerate(zip((row_start + 12).tolist(), data_length.tolist())):
        crcs[i] = _masked_crc(view[start:start + length])
    out[(row_start + 12 + data_length)[:, None] + np.arange(4)] = crcs.view(np.uint8).reshape(rows, 4)
    return out.tobytes()


def frame_records(records: Ragged) -> bytes:
    """TFRecord framing of already serialized records."""
    pieces = []
    data = records.data.tobytes()
    start = 0
    for length in records.lengths.tolist():
        body = data[start:start + length]
        start += length
        header = struct.pack("<Q", length)
        pieces += [header, struct.pack("<I", _masked_crc(header)), body, struct.pack("<I", _masked_crc(body))]
    return b"".join(pieces)


class ShardWriter:
    """Streams framed records into a file, optionally as GZIP (TFRecord's
    ``compression_type="GZIP"``), and tracks the file's size and sha256."""

    def __init__(self, file: BinaryIO, compression: str = ""):
        self._file = file
        self._sha256 = hashlib.sha256()
        self.bytes_written = 0
        self.records = 0
        # mtime=0 and no file name: the same records give the same bytes.
        self._gzip = gzip.GzipFile(filename="", mode="wb", fileobj=_Tee(self), mtime=0) if compression == "gzip" else None

    def _emit(self, data: bytes) -> None:
        self._file.write(data)
        self._sha256.update(data)
        self.bytes_written += len(data)

    def write(self, framed: bytes, count: int) -> None:
        if self._gzip is not None:
            self._gzip.write(framed)
        else:
            self._emit(framed)
        self.records += count

    def close(self) -> str:
        """Flush everything; returns the file's sha256."""
        if self._gzip is not None:
            self._gzip.close()
        return self._sha256.hexdigest()


class _Tee:
    def __init__(self, writer: ShardWriter):
        self._writer = writer

    def write(self, data) -> int:
        self._writer._emit(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass
