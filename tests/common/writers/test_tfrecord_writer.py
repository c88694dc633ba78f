"""Our Example encoder and TFRecord framing, judged by TensorFlow."""

import io

import numpy as np
import pytest

from common.writers.tfrecord import (
    CorruptShard,
    ShardWriter,
    encode_examples,
    encode_records,
    frame_records,
    read_records,
    varints,
)
from tests.support.tf_reader import read_examples

tf = pytest.importorskip("tensorflow")


def random_features(rng, n, seq, pred, vocab):
    return {
        "input_ids": rng.integers(0, vocab, (n, seq)),
        "input_mask": rng.integers(0, 2, (n, seq)),
        "segment_ids": rng.integers(0, 2, (n, seq)),
        "masked_lm_positions": rng.integers(0, seq, (n, pred)),
        "masked_lm_ids": rng.integers(0, vocab, (n, pred)),
        "masked_lm_weights": rng.random((n, pred)).astype(np.float32),
        "next_sentence_labels": rng.integers(0, 2, (n, 1)),
    }


@pytest.mark.parametrize("values", [
    [0, 1, 127, 128, 300, 16383, 16384, 2 ** 21, 2 ** 28 + 5, 2 ** 35 - 1],  # computed digit by digit
    [0, 1, 127, 128, 300, 16383, 16384, 30521, 2 ** 20 - 1],  # token ids: looked up in a table
    [0, 5, 127],  # one byte each
], ids=["arithmetic", "table", "bytes"])
def test_varints_match_protobuf(values):
    values = np.array([values])
    encoded = varints(values)
    expected = b""
    for v in values[0].tolist():
        while True:
            byte = v & 0x7F
            v >>= 7
            expected += bytes([byte | (0x80 if v else 0)])
            if not v:
                break
    assert encoded.data.tobytes() == expected
    assert encoded.lengths.tolist() == [len(expected)]


@pytest.mark.parametrize("seq,pred,vocab", [(128, 20, 30522), (512, 80, 250000), (8, 2, 10)])
def test_examples_parse_identically_in_tensorflow(tmp_path, seq, pred, vocab):
    rng = np.random.default_rng(seq)
    features = random_features(rng, 300, seq, pred, vocab)
    framed = encode_records(features)
    assert framed == frame_records(encode_examples(features))  # the bulk framing equals the simple one
    path = tmp_path / "shard.tfrecord"
    path.write_bytes(framed)
    examples = read_examples(str(path), seq, pred)
    assert len(examples) == 300
    for i, example in enumerate(examples):
        for key, values in features.items():
            np.testing.assert_array_equal(example[key], values[i])


def test_same_bytes_as_tensorflows_own_serializer_parse(tmp_path):
    """Not byte-identical to TF's serializer (map order is unspecified in
    protobuf), but every record decodes to the same Example proto."""
    rng = np.random.default_rng(1)
    features = random_features(rng, 20, 16, 4, 30522)
    records = encode_examples(features)
    start = 0
    for i, length in enumerate(records.lengths.tolist()):
        ours = tf.train.Example.FromString(records.data[start:start + length].tobytes())
        start += length
        theirs = tf.train.Example(features=tf.train.Features(feature={
            key: (tf.train.Feature(float_list=tf.train.FloatList(value=values[i].tolist()))
                  if values.dtype.kind == "f" else
                  tf.train.Feature(int64_list=tf.train.Int64List(value=values[i].tolist())))
            for key, values in features.items()}))
        assert ours == theirs


@pytest.mark.parametrize("compression", ["", "gzip"])
def test_shard_writer_streams_batches(tmp_path, compression):
    rng = np.random.default_rng(2)
    buffer = io.BytesIO()
    writer = ShardWriter(buffer, compression)
    batches = [random_features(rng, n, 32, 5, 30522) for n in (7, 0, 50)]
    for features in batches:
        if len(features["input_ids"]):
            writer.write(encode_records(features), len(features["input_ids"]))
    digest = writer.close()
    path = tmp_path / "shard"
    path.write_bytes(buffer.getvalue())
    examples = read_examples(str(path), 32, 5, "GZIP" if compression else "")
    assert len(examples) == writer.records == 57
    import hashlib
    assert hashlib.sha256(buffer.getvalue()).hexdigest() == digest
    np.testing.assert_array_equal(examples[-1]["input_ids"], batches[-1]["input_ids"][-1])


def test_read_records_checks_framing_like_tensorflow():
    features = random_features(np.random.default_rng(4), 30, 16, 3, 30522)
    framed = encode_records(features)
    records = encode_examples(features)
    assert b"".join(bytes(r) for r in read_records(framed)) == records.data.tobytes()
    assert [len(r) for r in read_records(framed)] == records.lengths.tolist()
    length = int(records.lengths[0])
    cases = {
        "bad length checksum at byte 0": framed[:8] + bytes([framed[8] ^ 1]) + framed[9:],
        "bad data checksum in the record at byte 0": framed[:12] + bytes([framed[12] ^ 1]) + framed[13:],
        f"truncated record at byte {16 + length}": framed[:16 + length + 20],
        f"truncated record header at byte {16 + length}": framed[:16 + length + 5],
    }
    for message, damaged in cases.items():
        with pytest.raises(CorruptShard, match=message):
            list(read_records(damaged))
