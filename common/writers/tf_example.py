"""``tf.train.Example`` records back into numpy arrays, without protobuf or TensorFlow.

The TFRecord format's reading side (TFRecordWriter.read_columns: the loader
and mlm-verify read through it).  The loader decodes whole shards, so decoding must not cost a Python loop
per record.  Records this project writes (common/writers/tfrecord.py) all
share one layout: the same features in the same order, each an int64 or
float list of a fixed length; only varint widths differ between records.
:func:`decode_examples` therefore walks the layout *in lockstep* over all
records of a shard (one cursor per record, one numpy step per field) and
decodes each feature's packed varints for every record at once.  Records
that do not share a layout (written by another tool, keys reordered,
unpacked lists) go through :func:`decode_example_slow`, one record at a
time; the result is the same.

Wire layout (tensorflow/core/example/{example,feature}.proto):
  Example  { Features features = 1; }
  Features { map<string, Feature> feature = 1; }   entry: key = 1, value = 2
  Feature  { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3; }
  *List    { repeated value = 1 [packed]; }
"""

from __future__ import annotations

import struct

import numpy as np

from common.protobuf_wire import WireError, fields, read_varint

_KEY = 0x0A  # field 1, length-delimited (Example.features, Features.feature, entry key, packed values)
_VALUE = 0x12  # field 2, length-delimited (entry value; FloatList in a Feature)
_FLOAT_LIST, _INT64_LIST = 0x12, 0x1A


class ExampleError(ValueError):
    """Records that are not Examples of fixed-length int64/float lists."""


class _Irregular(Exception):
    """The records do not share one layout: decode them one by one."""


def decode_examples(buffer: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> dict[str, np.ndarray]:
    """Every record's features as (records, length) arrays: ints as int32
    when they fit (token ids, positions), else int64; floats as float32.
    ``buffer`` (uint8) holds the records at ``starts`` with ``lengths``."""
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    if len(starts) == 0:
        return {}
    try:
        return _decode_lockstep(buffer, starts, starts + lengths)
    except _Irregular:
        rows = [decode_example_slow(buffer[s:s + n].tobytes()) for s, n in zip(starts.tolist(), lengths.tolist())]
        return _stack(rows)


# --------------------------------------------------------------------------
# All records at once
# --------------------------------------------------------------------------

def _varint(buffer: np.ndarray, cursor: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The varint at each cursor (at most 5 bytes: lengths, not values) and the cursors after it."""
    width = 5
    positions = np.minimum(cursor[:, None] + np.arange(width), len(buffer) - 1)
    digits = buffer[positions].astype(np.int64)
    ends = digits < 0x80
    if not ends.any(axis=1).all():
        raise _Irregular
    size = np.argmax(ends, axis=1) + 1
    used = np.arange(width)[None, :] < size[:, None]
    value = ((digits & 0x7F) << (7 * np.arange(width))[None, :])
    return np.where(used, value, 0).sum(axis=1), cursor + size


def _expect(buffer: np.ndarray, cursor: np.ndarray, byte: int) -> np.ndarray:
    if (cursor >= len(buffer)).any() or not (buffer[cursor] == byte).all():
        raise _Irregular
    return cursor + 1


def _ragged_indices(starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Concatenated ``range(start, start + size)`` for every row."""
    total = int(sizes.sum())
    first = np.cumsum(sizes) - sizes
    return np.repeat(starts - first, sizes) + np.arange(total)


def _packed_varints(buffer: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The packed varints of every row's byte range, as a (rows, count) int64
    array; every row must hold the same count (fixed-length features)."""
    rows = len(starts)
    if sizes.min() == sizes.max():  # every row as wide: a (rows, size) byte matrix
        data = buffer[starts[:, None] + np.arange(int(sizes[0]))]
        if not (data & 0x80).any():  # one byte per value (masks, segment ids, positions)
            return data.astype(np.int64)
        data = data.reshape(-1)
    else:
        data = buffer[_ragged_indices(starts, sizes)]
    terminal = data < 0x80
    row_ends = np.cumsum(sizes)
    if not terminal[row_ends[sizes > 0] - 1].all():
        raise _Irregular  # a varint running over its row's end
    ends_before = np.concatenate(([0], np.cumsum(terminal)))[np.concatenate(([0], row_ends))]
    per_row = np.diff(ends_before)
    count = int(per_row[0])
    if not (per_row == count).all():
        raise _Irregular
    ends = np.flatnonzero(terminal)
    firsts = np.concatenate(([0], ends[:-1] + 1))
    widths = ends - firsts + 1
    widest = int(widths.max()) if widths.size else 0
    if widest > 9:
        raise _Irregular  # negative int64s (10 bytes): rare, decoded one by one
    values = (data[firsts] & 0x7F).astype(np.int64)
    for k in range(1, widest):
        more = widths > k
        values += np.where(more, data[np.minimum(firsts + k, len(data) - 1)] & 0x7F, 0).astype(np.int64) << (7 * k)
    return values.reshape(rows, count)


def _decode_lockstep(buffer: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> dict[str, np.ndarray]:
    cursor = _expect(buffer, starts, _KEY)
    size, cursor = _varint(buffer, cursor)
    if not (cursor + size == ends).all():
        raise _Irregular
    out: dict[str, np.ndarray] = {}
    while True:
        at_end = cursor >= ends
        if at_end.all():
            return out
        if at_end.any():
            raise _Irregular
        cursor = _expect(buffer, cursor, _KEY)
        entry_size, cursor = _varint(buffer, cursor)
        entry_end = cursor + entry_size
        cursor = _expect(buffer, cursor, _KEY)
        key_size, cursor = _varint(buffer, cursor)
        if key_size.min() != key_size.max():
            raise _Irregular
        width = int(key_size[0])
        keys = buffer[cursor[:, None] + np.arange(width)]
        if not (keys == keys[0]).all():
            raise _Irregular
        key = keys[0].tobytes().decode("utf-8", errors="replace")
        cursor = _expect(buffer, cursor + width, _VALUE)
        feature_size, cursor = _varint(buffer, cursor)
        kind = buffer[cursor]
        if not (kind == kind[0]).all() or int(kind[0]) not in (_FLOAT_LIST, _INT64_LIST):
            raise _Irregular
        cursor = cursor + 1
        list_size, cursor = _varint(buffer, cursor)
        list_end = cursor + list_size
        if not (list_end == entry_end).all() or key in out:
            raise _Irregular
        if (list_size == 0).all():
            values = np.zeros((len(cursor), 0), dtype=np.float32 if kind[0] == _FLOAT_LIST else np.int64)
        else:
            cursor = _expect(buffer, cursor, _KEY)  # packed
            packed_size, cursor = _varint(buffer, cursor)
            if not (cursor + packed_size == list_end).all():
                raise _Irregular
            if kind[0] == _FLOAT_LIST:
                if packed_size.min() != packed_size.max() or packed_size[0] % 4:
                    raise _Irregular
                raw = buffer[cursor[:, None] + np.arange(int(packed_size[0]))]
                values = np.ascontiguousarray(raw).view("<f4").astype(np.float32)
            else:
                values = _packed_varints(buffer, cursor, packed_size)
        out[key] = _narrow(values)
        cursor = entry_end


def _narrow(values: np.ndarray) -> np.ndarray:
    if values.dtype == np.int64 and (values.size == 0 or (values.min() >= -2**31 and values.max() < 2**31)):
        return values.astype(np.int32)
    return values


# --------------------------------------------------------------------------
# One record at a time
# --------------------------------------------------------------------------

def _read_varint(data: bytes, offset: int) -> tuple[int, int]:
    try:
        return read_varint(data, offset)
    except WireError as error:
        raise ExampleError(str(error)) from None


def _fields(data: bytes):
    try:
        yield from fields(data)
    except WireError as error:
        raise ExampleError(str(error)) from None


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def decode_example_slow(data: bytes) -> dict[str, np.ndarray]:
    """One serialized Example's int64 and float lists (packed or not, any order)."""
    features: dict[str, np.ndarray] = {}
    for number, wire, example_field in _fields(data):
        if number != 1 or wire != 2:
            continue
        for entry_number, entry_wire, entry in _fields(example_field):
            if entry_number != 1 or entry_wire != 2:
                continue
            key, feature = "", b""
            for number_, _, value in _fields(entry):
                if number_ == 1:
                    key = value.decode("utf-8", errors="replace")
                elif number_ == 2:
                    feature = value
            values: list = []
            kind = "int"
            for list_number, _, list_message in _fields(feature):
                if list_number == 1:
                    raise ExampleError(f"feature {key!r} is a bytes list: only int64 and float lists can be batched")
                kind = "float" if list_number == 2 else "int"
                for value_number, value_wire, value in _fields(list_message):
                    if value_number != 1:
                        continue
                    if kind == "float":
                        raw = value if value_wire in (2, 5) else b""
                        values += struct.unpack(f"<{len(raw) // 4}f", raw)
                    elif value_wire == 2:
                        offset = 0
                        while offset < len(value):
                            number_value, offset = _read_varint(value, offset)
                            values.append(_signed(number_value))
                    else:
                        values.append(_signed(value))
            features[key] = np.asarray(values, dtype=np.float32 if kind == "float" else np.int64)
    return features


def _stack(rows: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    keys = list(rows[0])
    out = {}
    for key in keys:
        try:
            column = [row[key] for row in rows]
        except KeyError:
            raise ExampleError(f"feature {key!r} is missing from some records") from None
        if len({len(values) for values in column}) != 1:
            raise ExampleError(f"feature {key!r} varies in length between records: it cannot be batched")
        out[key] = _narrow(np.stack(column))
    if any(set(row) != set(keys) for row in rows):
        raise ExampleError("records hold different features")
    return out
