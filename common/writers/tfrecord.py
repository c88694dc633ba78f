"""``tf.train.Example`` records and TFRecord framing, built in bulk with numpy.

Building one protobuf object per record costs more than everything else the
reference script does per instance.  The wire format of an Example holding
only int64 and float lists is simple, so a whole batch is encoded at once:
every nested length is computed from the values' varint sizes first, each
record is laid out as one row of a byte matrix (varints at their widest,
token ids looked up in a table) with a mask of the bytes it keeps, and one
boolean compaction lays the records end to end.
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
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import BinaryIO

import crc32c
import numpy as np

from common import kernels
from common.job.params import param
from common.objectives.base import Batch, Feature
from common.steps import sides
from common.writers.base import HashingFile, OutputFile, ShardFile, TaskOutput, Writer
from common.writers.tf_example import decode_examples

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
class RowBytes:
    """Per-row byte strings as one flat uint8 array plus row lengths."""

    data: np.ndarray  # uint8
    lengths: np.ndarray  # int64


def varints(values: np.ndarray) -> RowBytes:
    """Protobuf varints of a (rows, columns) array, concatenated per row."""
    values = np.asarray(values)
    if values.ndim == 1:
        values = values[:, None]
    digits, keep, lengths = _varint_digits(values)
    return RowBytes(digits.reshape(-1) if keep is None else digits[keep], lengths)


_TABLE_LIMIT = 1 << 20


@lru_cache(maxsize=8)
def _varint_table(entries: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For every value below ``entries``: its varint as 4 bytes packed in a
    uint32, which of those bytes it uses (also packed), and its size."""
    values = np.arange(entries, dtype=np.uint32)
    size = varint_sizes(values)
    digits = np.zeros((entries, 4), dtype=np.uint8)
    for k in range(4):
        digits[:, k] = ((values >> (7 * k)) & 0x7F).astype(np.uint8) | ((size > k + 1).astype(np.uint8) << 7)
    keep = np.arange(4)[None, :] < size[:, None]
    return digits.view("<u4").reshape(entries), keep.view("<u4").reshape(entries), size


def _varint_digits(values: np.ndarray) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """Each row's varints at their widest, as a (rows, columns * width) byte
    matrix; the mask of the bytes they use (None: all); bytes used per row.
    Token ids (values below 2**20) are looked up in a table: one gather
    instead of arithmetic per byte."""
    rows = values.shape[0]
    largest = int(values.max()) if values.size else 0
    if largest < 128 and (values.size == 0 or values.min() >= 0):  # one byte each: the values themselves
        return values.astype(np.uint8), None, np.full(rows, values.shape[1], dtype=np.int64)
    if values.min() >= 0 and largest < _TABLE_LIMIT:
        digits, keep, size = _varint_table(max(128, 1 << largest.bit_length()))
        return (np.take(digits, values).view(np.uint8).reshape(rows, -1),
                np.take(keep, values).view(bool).reshape(rows, -1),
                np.take(size, values).sum(axis=1))
    size = varint_sizes(values)
    width = int(size.max())
    flat = values.astype(np.uint64 if width > 4 else np.uint32)
    position = np.arange(width)
    digits = ((flat[:, :, None] >> (7 * position).astype(flat.dtype)) & 0x7F).astype(np.uint8)
    digits |= (position < size[:, :, None] - 1).astype(np.uint8) << 7  # continuation bits
    return digits.reshape(rows, -1), (position < size[:, :, None]).reshape(rows, -1), size.sum(axis=1)


class _Layout:
    """Every record as one row of a (rows, width) byte matrix plus a mask of
    the bytes each row keeps.

    Pieces are appended in record order; a varint takes its widest size in
    every row and masks off the bytes a row does not use.  One boolean
    compaction (``matrix[keep]``) then lays all records end to end: no
    per-byte index arithmetic, no per-record Python.
    """

    def __init__(self, rows: int):
        self.rows = rows
        self.pieces: list[tuple[np.ndarray, np.ndarray | None]] = []  # (bytes, keep mask or None)
        self.lengths = np.zeros(rows, dtype=np.int64)  # bytes each row keeps

    def constant(self, value: bytes) -> None:
        self.pieces.append((np.frombuffer(value, dtype=np.uint8)[None, :], None))
        self.lengths += len(value)

    def add(self, piece: np.ndarray, keep: np.ndarray | None, lengths: np.ndarray | int) -> None:
        """A (rows, width) byte matrix of which each row keeps ``lengths``
        bytes, chosen by ``keep`` (None: all of them)."""
        self.pieces.append((piece, keep))
        self.lengths += lengths

    def fixed(self, matrix: np.ndarray) -> None:
        """The same number of bytes in every row."""
        matrix = np.ascontiguousarray(matrix).view(np.uint8).reshape(self.rows, -1)
        self.add(matrix, None, matrix.shape[1])

    def varint(self, values: np.ndarray) -> None:
        """One varint per row; a constant when every row has the same value
        (the nested lengths of fixed-size features)."""
        if values.size and values.min() == values.max():
            self.constant(varint_bytes(int(values[0])))
        else:
            self.add(*_varint_digits(values[:, None]))

    def build(self) -> np.ndarray:
        """All rows' kept bytes, end to end."""
        width = sum(piece.shape[1] for piece, _ in self.pieces)
        matrix = np.empty((self.rows, width), dtype=np.uint8)
        keep = None
        column = 0
        for piece, mask in self.pieces:
            end = column + piece.shape[1]
            matrix[:, column:end] = piece
            if mask is not None:
                if keep is None:
                    keep = np.ones((self.rows, width), dtype=bool)
                keep[:, column:end] = mask
            column = end
        return matrix.reshape(-1) if keep is None else matrix[keep]


def _example_layout(features: dict[str, np.ndarray], layout: _Layout) -> None:
    """Append one Example's pieces per row to ``layout``."""
    rows = layout.rows
    entries = []
    # Values and lengths first, innermost out, from the values' sizes alone.
    for key, values in features.items():
        values = np.asarray(values)
        if values.dtype.kind == "f":
            packed = (values.astype("<f4").view(np.uint8).reshape(rows, -1), None,
                      np.full(rows, 4 * values.shape[1], dtype=np.int64))
        else:
            packed = _varint_digits(values)
        packed_length = packed[2]
        list_length = 1 + varint_sizes(packed_length) + packed_length
        feature_length = 1 + varint_sizes(list_length) + list_length
        key_bytes = key.encode()
        entry_length = 2 + len(key_bytes) + 1 + varint_sizes(feature_length) + feature_length
        entries.append((key_bytes, values.dtype.kind, packed, packed_length, list_length, feature_length,
                        entry_length))
    features_length = sum(1 + varint_sizes(e[-1]) + e[-1] for e in entries)

    layout.constant(bytes([_KEY]))
    layout.varint(features_length)
    for key_bytes, kind, packed, packed_length, list_length, feature_length, entry_length in entries:
        layout.constant(bytes([_KEY]))
        layout.varint(entry_length)
        layout.constant(bytes([_KEY, len(key_bytes)]) + key_bytes + bytes([_VALUE]))
        layout.varint(feature_length)
        layout.constant(bytes([_FLOAT_LIST if kind == "f" else _INT64_LIST]))
        layout.varint(list_length)
        layout.constant(bytes([_PACKED]))
        layout.varint(packed_length)
        layout.add(*packed)


def encode_examples(features: dict[str, np.ndarray]) -> RowBytes:
    """Serialized ``tf.train.Example`` for each row of the feature arrays."""
    rows = len(next(iter(features.values())))
    layout = _Layout(rows)
    _example_layout(features, layout)
    return RowBytes(layout.build(), layout.lengths)


def _masked_crc(data) -> int:
    crc = crc32c.crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


_LENGTH_CRCS: dict[int, int] = {}


def _kernel_specs(features: dict[str, np.ndarray], rows: int) -> list[tuple[bytes, str, np.ndarray, int]] | None:
    """The features as the compiled encoder takes them (common/kernels.py): (key, 'i' int32 / 'q' int64 /
    'f' float32, C-contiguous values, width); None for what only the numpy encoder handles."""
    specs = []
    for key, values in features.items():
        values = np.asarray(values)
        key_bytes = key.encode()
        if values.ndim != 2 or len(values) != rows or len(key_bytes) > 127:
            return None
        if values.dtype.kind == "f":
            specs.append((key_bytes, "f", np.require(values, "<f4", "CA"), values.shape[1]))
        elif values.dtype.kind in "biu" and values.dtype.itemsize <= 4 and values.dtype != np.uint32:
            specs.append((key_bytes, "i", np.require(values, np.int32, "CA"), values.shape[1]))
        elif values.dtype.kind in "iu" and values.dtype.itemsize <= 8 and values.dtype != np.uint64:
            specs.append((key_bytes, "q", np.require(values, np.int64, "CA"), values.shape[1]))
        else:
            return None
    return specs


def encode_records(features: dict[str, np.ndarray]) -> bytes:
    """TFRecord-framed Examples for every row, as the bytes of a shard."""
    rows = len(next(iter(features.values())))
    if rows == 0:
        return b""
    kernel = kernels.compiled
    specs = _kernel_specs(features, rows) if kernel is not None else None
    if kernel is not None and specs is not None:
        return kernel.encode_records(specs, rows)
    example = _Layout(rows)
    _example_layout(features, example)
    data_length = example.lengths.copy()
    length_crcs = np.empty(rows, dtype="<u4")
    for i, length in enumerate(data_length.tolist()):
        crc = _LENGTH_CRCS.get(length)
        if crc is None:
            crc = _LENGTH_CRCS[length] = _masked_crc(struct.pack("<Q", length))
        length_crcs[i] = crc
    # Framing around each Example: length, its CRC, [data], then the data's
    # CRC, which is filled in once the data is laid out.
    framed = _Layout(rows)
    framed.fixed(data_length.astype("<u8"))
    framed.fixed(length_crcs)
    framed.pieces += example.pieces
    framed.lengths += data_length
    framed.fixed(np.zeros((rows, 4), dtype=np.uint8))
    out = framed.build()
    record_end = np.cumsum(framed.lengths)
    data_start = record_end - framed.lengths + 12
    view = memoryview(out)
    spans = zip(data_start.tolist(), (record_end - 4).tolist())
    data_crcs = np.fromiter((_masked_crc(view[start:end]) for start, end in spans),
                            dtype="<u4", count=rows)
    out[(record_end - 4)[:, None] + np.arange(4)] = data_crcs.view(np.uint8).reshape(rows, 4)
    return out.tobytes()


class CorruptShard(ValueError):
    """A TFRecord file whose framing or checksums are wrong."""


def read_records(data: bytes) -> Iterator[memoryview]:
    """The records of a TFRecord file, each length and data CRC checked as
    TensorFlow's reader checks them."""
    view = memoryview(data)
    offset = 0
    while offset < len(view):
        if len(view) - offset < 12:
            raise CorruptShard(f"truncated record header at byte {offset}")
        length, length_crc = struct.unpack_from("<QI", view, offset)
        if _masked_crc(view[offset:offset + 8]) != length_crc:
            raise CorruptShard(f"bad length checksum at byte {offset}")
        end = offset + 12 + length
        if end + 4 > len(view):
            raise CorruptShard(f"truncated record at byte {offset}")
        body = view[offset + 12:end]
        if _masked_crc(body) != struct.unpack_from("<I", view, end)[0]:
            raise CorruptShard(f"bad data checksum in the record at byte {offset}")
        yield body
        offset = end + 4


def frame_records(records: RowBytes) -> bytes:
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
    ``compression_type="GZIP"``); the file's size and sha256 are kept as it
    is written (a :class:`~common.writers.base.HashingFile`)."""

    def __init__(self, file: BinaryIO, compression: str = ""):
        self._file = file if isinstance(file, HashingFile) else HashingFile(file)
        self.records = 0
        # mtime=0 and no file name: the same records give the same bytes.
        self._gzip = gzip.GzipFile(filename="", mode="wb", fileobj=self._file, mtime=0) \
            if compression == "gzip" else None

    @property
    def bytes_written(self) -> int:
        return self._file.bytes

    def write(self, framed: bytes, count: int) -> None:
        (self._gzip or self._file).write(framed)
        self.records += count

    def close(self) -> str:
        """Flush everything; returns the file's sha256."""
        if self._gzip is not None:
            self._gzip.close()
        return self._file.sha256


@dataclass(frozen=True)
class TFRecordParams:
    gzip: bool = param(False, "Write GZIP-compressed TFRecords (TFRecordDataset(..., compression_type='GZIP')).")


class _TFRecordTaskOutput(TaskOutput):
    def __init__(self, output, name: str, compression: str):
        self._file = OutputFile(output, name)
        self._writer = ShardWriter(self._file, compression)

    def write(self, batch: Batch) -> None:
        self._writer.write(encode_records(batch.columns), len(batch))

    def commit(self) -> list[ShardFile]:
        self._writer.close()
        return [self._file.commit(self._writer.records)]

    def abort(self) -> None:
        self._file.abort()


class TFRecordWriter(Writer):
    """``tf.train.Example`` records in TFRecord files, as TensorFlow trainers
    (run_pretraining.py, ALBERT's, ELECTRA's) read them; ints as int64 lists."""

    name = "tfrecord"
    Params = TFRecordParams
    suffixes = (".tfrecord", ".tfrecord.gz")
    @classmethod
    def reading_text(cls) -> str:
        where = "; ".join(f"the {side.label} side: {side.directory}/part-*" for side in sides())
        return cls.reading.replace(cls._SIDES, f"   # {where}" if where else "")

    _SIDES = "<sides>"
    reading = "\n".join([
        "```python",
        "import glob, json",
        "import tensorflow as tf",
        "info = json.load(open(\"dataset_info.json\"))",
        "spec = {name: tf.io.FixedLenFeature(f[\"shape\"],",
        "                                    tf.float32 if f[\"dtype\"].startswith(\"float\") else tf.int64)",
        "        for name, f in info[\"features\"].items()}",
        "files = sorted(glob.glob(\"part-*.tfrecord*\"))<sides>",  # each step's side: reading_text
        "ds = tf.data.TFRecordDataset(files, compression_type=info[\"format_details\"][\"compression\"])",
        "ds = ds.map(lambda record: tf.io.parse_single_example(record, spec))   # run_pretraining.py's features",
        "```",
        "",
        "or serve it to trainer ranks with this project's loader: `python -m loader --data path/to/this/directory`."])
    exact_dtypes = False  # the decoder narrows int64 lists to int32 where they fit

    @classmethod
    def check_features(cls, params, features: list[Feature]) -> None:
        variable = [f.name for f in features if f.length is None]
        if variable:
            raise ValueError(f"tfrecord writes fixed-length features; {', '.join(variable)} vary in length "
                             f"(use --output-format parquet, mds, litdata or megatron)")

    def open(self, output, stem: str) -> TaskOutput:
        return _TFRecordTaskOutput(output, self.names(stem)[0], "gzip" if self.params.gzip else "")

    def names(self, stem: str) -> tuple[str, ...]:
        return (stem + (".tfrecord.gz" if self.params.gzip else ".tfrecord"),)

    @classmethod
    def count_records(cls, name: str, data: bytes) -> int:
        return sum(1 for _ in read_records(cls._raw(name, data)))

    @staticmethod
    def _raw(name: str, data: bytes) -> bytes:
        try:
            return gzip.decompress(data) if name.endswith(".gz") else data
        except (OSError, EOFError) as error:
            raise CorruptShard(f"corrupt gzip data: {error}") from None

    @classmethod
    def stored_features(cls, params, features: list[Feature], special) -> dict[str, dict]:
        """tf.train.Example holds int64 and float lists only: what a trainer's FixedLenFeature declares."""
        return {f.name: {"dtype": "float32" if f.dtype.startswith("float") else "int64", "shape": [f.length]}
                for f in features}

    @classmethod
    def format_details(cls, params, features: list[Feature], special) -> dict:
        return {"compression": "GZIP" if params.gzip else "", "record": "tf.train.Example"}

    @classmethod
    def read_columns(cls, name: str, data: bytes, companion) -> dict:
        """Every record's features as (records, length) arrays (common/writers/tf_example.py: no TensorFlow)."""
        raw = cls._raw(name, data)
        lengths = np.fromiter((len(record) for record in read_records(raw)), dtype=np.int64)
        starts = np.cumsum(lengths + 16) - lengths - 4  # each record: length, its CRC, the data, its CRC
        return decode_examples(np.frombuffer(raw, dtype=np.uint8), starts, lengths)

