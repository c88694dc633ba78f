"""``tf.train.Example`` records and TFRecord framing, built in bulk with numpy.

Building one protobuf object per record costs more than everything else the
reference script does per instance.  The wire format of an Example holding
only int64 and float lists is simple, so a whole batch is encoded at once:
varints, nested lengths and keys are computed as arrays and scattered into
one buffer.  Only the CRC32C of each record is a per-record call.
TensorFlow's own reader is the judge of this encoder (see the tests); the
worker does not need TensorFlow.

Wire layout (proto field numbers from tensorflow/core/example):
  Example  { Features features = 1; }
  Features { map<string, Feature> feature = 1; }   entry: key = 1, value = 2
  Feature  { FloatList float_list = 2; Int64List int64_list = 3; }
  *List    { repeated value = 1 [packed]; }
"""

from __future__ import annotations

import gzip
import hashlib
import struct
from dataclasses import dataclass
from typing import BinaryIO

import crc32c
import numpy as np

_LENGTH_DELIMITED = {1: 0x0A, 2: 0x12, 3: 0x1A}  # field number -> tag byte


@dataclass
class Ragged:
    """Per-row byte strings as one flat uint8 array plus row lengths."""

    data: np.ndarray  # uint8
    lengths: np.ndarray  # int64

    @classmethod
    def constant(cls, value: bytes, rows: int) -> "Ragged":
        return cls(np.tile(np.frombuffer(value, dtype=np.uint8), rows),
                   np.full(rows, len(value), dtype=np.int64))

    @classmethod
    def fixed(cls, matrix: np.ndarray) -> "Ragged":
        matrix = np.ascontiguousarray(matrix)
        rows = matrix.shape[0]
        flat = matrix.view(np.uint8).reshape(rows, -1)
        return cls(flat.reshape(-1), np.full(rows, flat.shape[1], dtype=np.int64))


def varints(values: np.ndarray) -> Ragged:
    """Protobuf varints of a (rows, columns) array of non-negative integers."""
    values = np.asarray(values)
    if values.ndim == 1:
        values = values[:, None]
    rows = values.shape[0]
    flat = values.reshape(-1).astype(np.uint64)
    if flat.size and (values.min() < 0 or flat.max() >= (1 << 35)):
        raise ValueError("varints() takes integers in [0, 2**35)")
    count = np.ones(flat.shape, dtype=np.int64)
    for k in range(1, 5):
        count += flat >= (1 << (7 * k))
    pieces = np.empty((flat.size, 5), dtype=np.uint8)
    for k in range(5):
        more = count > k + 1
        pieces[:, k] = ((flat >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8) | (more.astype(np.uint8) << 7)
    data = pieces[np.arange(5)[None, :] < count[:, None]]
    return Ragged(data, count.reshape(rows, -1).sum(axis=1))


def concat_rows(parts: list[Ragged]) -> Ragged:
    """Row-wise concatenation: row i is parts[0] row i + parts[1] row i + ..."""
    lengths = sum(part.lengths for part in parts)
    rows = len(lengths)
    row_start = np.zeros(rows, dtype=np.int64)
    np.cumsum(lengths[:-1], out=row_start[1:])
    out = np.empty(int(lengths.sum()), dtype=np.uint8)
    offset_in_row = np.zeros(rows, dtype=np.int64)
    for part in parts:
        if part.data.size:
            source_start = np.zeros(rows, dtype=np.int64)
            np.cumsum(part.lengths[:-1], out=source_start[1:])
            shift = np.repeat(row_start + offset_in_row - source_start, part.lengths)
            out[np.arange(part.data.size, dtype=np.int64) + shift] = part.data
        offset_in_row += part.lengths
    return Ragged(out, lengths)


def _length_prefixed(tag: int, body: Ragged) -> list[Ragged]:
    rows = len(body.lengths)
    return [Ragged.constant(bytes([tag]), rows), varints(body.lengths), body]


def _feature(key: str, values: np.ndarray) -> Ragged:
    """One map entry ``key -> Feature`` for every row."""
    rows = values.shape[0]
    if values.dtype.kind == "f":
        packed = Ragged.fixed(values.astype("<f4"))
        list_field = 2
    else:
        packed = varints(values)
        list_field = 3
    value_list = concat_rows(_length_prefixed(0x0A, packed))
    feature = concat_rows(_length_prefixed(_LENGTH_DELIMITED[list_field], value_list))
    key_bytes = key.encode()
    key_part = Ragged.constant(bytes([0x0A, len(key_bytes)]) + key_bytes, rows)
    entry = concat_rows([key_part] + _length_prefixed(0x12, feature))
    return concat_rows(_length_prefixed(0x0A, entry))


def encode_examples(features: dict[str, np.ndarray]) -> Ragged:
    """Serialized ``tf.train.Example`` for each row of the feature arrays."""
    entries = [_feature(key, np.asarray(values)) for key, values in features.items()]
    return concat_rows(_length_prefixed(0x0A, concat_rows(entries)))


def _masked_crc(data) -> int:
    crc = crc32c.crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame_records(records: Ragged) -> bytes:
    """TFRecord framing: length, masked CRC32C of the length, data, masked CRC32C of the data."""
    rows = len(records.lengths)
    if rows == 0:
        return b""
    lengths = records.lengths
    data = memoryview(records.data)
    header = np.empty((rows, 12), dtype=np.uint8)
    header[:, :8] = lengths.astype("<u8").view(np.uint8).reshape(rows, 8)
    footer = np.empty(rows, dtype="<u4")
    length_crcs: dict[int, int] = {}
    start = 0
    for i, length in enumerate(lengths.tolist()):
        crc = length_crcs.get(length)
        if crc is None:
            crc = length_crcs[length] = _masked_crc(struct.pack("<Q", length))
        header[i, 8:] = np.frombuffer(struct.pack("<I", crc), dtype=np.uint8)
        footer[i] = _masked_crc(data[start:start + length])
        start += length
    framed = concat_rows([Ragged.fixed(header), records, Ragged.fixed(footer[:, None])])
    return framed.data.tobytes()


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
