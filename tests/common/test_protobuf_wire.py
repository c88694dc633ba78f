"""The hand-written protobuf wire reader against protobuf's own encoding (TensorFlow's Example)."""

import pytest

from common.protobuf_wire import WireError, fields, read_varint


def test_fields_of_a_real_example_and_bad_bytes():
    tf = pytest.importorskip("tensorflow")
    example = tf.train.Example(features=tf.train.Features(feature={
        "ids": tf.train.Feature(int64_list=tf.train.Int64List(value=[1, 300, 2**40])),
        "w": tf.train.Feature(float_list=tf.train.FloatList(value=[0.5]))})).SerializeToString()
    ((number, wire, features),) = list(fields(example))
    assert (number, wire) == (1, 2)
    entries = {bytes(dict((n, v) for n, _, v in fields(entry))[1]): entry
               for _, _, entry in fields(features)}
    assert set(entries) == {b"ids", b"w"}
    for cut in (1, len(example) // 2, len(example) - 1):
        with pytest.raises(WireError):
            for _, _, inner in fields(example[:cut]):
                list(fields(inner))
    assert read_varint(bytes([0xAC, 0x02]), 0) == (300, 2)
    with pytest.raises(WireError, match="too long"):
        read_varint(bytes([0xFF] * 11), 0)
    with pytest.raises(WireError, match="wire type"):
        list(fields(bytes([0x0B])))  # field 1, wire type 3 (groups)
