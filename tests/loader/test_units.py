"""The loader's pure parts: manifest entries, the Example decoder (judged by
TensorFlow), the epoch order and partition, dynamic masking, messages."""

import gzip
from pathlib import Path

import numpy as np
import pytest

from common.writers import writer_named
from common.writers.tf_example import decode_example_slow, decode_examples
from common.writers.tfrecord import encode_records
from loader import messages
from loader.client import hf_views
from loader.masking import MaskingParams, candidates, remask, restore
from loader.order import EpochOrder, Partition
from loader.shards import DatasetError, ShardCache, ShardList, entry_files, format_for, open_dataset, read_shard


def test_entry_files_reads_both_manifest_shapes():
    new = {"task": "b", "records": 5, "shards": [{"name": "part-b.tfrecord", "records": 3, "sha256": "x", "bytes": 9},
                                                 {"name": "part-b-1.parquet", "records": 2, "sha256": "y", "bytes": 9},
                                                 {"name": "holdout/part-b.parquet", "records": 4, "sha256": "w",
                                                  "bytes": 8, "holdout": True}]}
    old = {"task": "a", "shard": "s3://bucket/out/part-a.tfrecord.gz", "records": 7, "sha256": "z"}
    empty_new, empty_old = {"task": "c", "records": 0, "shards": []}, {"task": "d", "records": 0, "shard": None}
    assert entry_files(new) == [("part-b.tfrecord", 3, 9, "", "x"), ("part-b-1.parquet", 2, 9, "", "y"),
                                ("holdout/part-b.parquet", 4, 8, "holdout", "w")]
    assert entry_files(old) == [("part-a.tfrecord.gz", 7, None, "", None)]
    assert entry_files(empty_new) == entry_files(empty_old) == []
    shards = ShardList.from_entries([new, empty_new, old, empty_old])
    assert shards.names == ("part-a.tfrecord.gz", "part-b.tfrecord", "part-b-1.parquet")  # sorted by task id
    assert shards.offsets.tolist() == [0, 7, 10, 12]
    held = ShardList.from_entries([new, empty_new, old, empty_old], split="holdout")
    assert held.names == ("holdout/part-b.parquet",) and held.records == 4


def test_files_the_loader_cannot_read_are_refused_before_serving():
    with pytest.raises(DatasetError, match="part-a.csv"):
        ShardList.from_entries([{"task": "a", "shards": [{"name": "part-a.csv", "records": 1}]}])
    assert format_for("x.tfrecord.gz") is writer_named("tfrecord")
    assert format_for("holdout/bin-002/part-x.parquet") is writer_named("parquet")


def test_no_manifest_is_a_one_line_error(tmp_path):
    with pytest.raises(DatasetError, match="no manifest"):
        open_dataset(str(tmp_path))


def _tf_rows(path: Path, compression: str = "") -> dict[str, np.ndarray]:
    from tests.support.tf_reader import read_examples

    examples = read_examples(str(path), compression=compression)
    return {key: np.stack([example[key] for example in examples]) for key in examples[0]}


def test_decoder_agrees_with_tensorflow_on_a_real_shard(loader_dataset):
    storage, shards = open_dataset(str(loader_dataset))
    cache = ShardCache(storage, shards, 1 << 30)
    for shard in (0, len(shards.names) - 1):
        ours = cache.columns(shard)
        theirs = _tf_rows(loader_dataset / shards.names[shard])
        assert set(ours) == set(theirs)
        for key in theirs:
            assert ours[key].shape == theirs[key].shape
            np.testing.assert_array_equal(ours[key], theirs[key].astype(ours[key].dtype))


def test_irregular_records_and_gzip_decode_like_regular_ones(tmp_path):
    rng = np.random.default_rng(1)
    features = {"input_ids": rng.integers(0, 2**34, (6, 5)), "w": rng.random((6, 3)).astype(np.float32),
                "small": rng.integers(0, 100, (6, 4))}
    data = encode_records(features)
    gz = tmp_path / "x.tfrecord.gz"
    gz.write_bytes(gzip.compress(data))
    for decoded in (read_shard("x.tfrecord", data), read_shard(gz.name, gz.read_bytes())):
        np.testing.assert_array_equal(decoded["input_ids"], features["input_ids"])
        np.testing.assert_array_equal(decoded["w"], features["w"])
        assert decoded["small"].dtype == np.int32
    # Examples serialized by protobuf (TensorFlow's), with negative int64s: the slow path, the same values.
    import tensorflow as tf

    def example(ints, floats):
        feature = {"a": tf.train.Feature(int64_list=tf.train.Int64List(value=ints)),
                   "b": tf.train.Feature(float_list=tf.train.FloatList(value=floats))}
        return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()

    bodies = [example([1, -300], [2.5]), example([4, 5], [3.5])]
    buffer = np.frombuffer(b"".join(bodies), dtype=np.uint8)
    lengths = np.array([len(b) for b in bodies])
    decoded = decode_examples(buffer, np.cumsum(lengths) - lengths, lengths)
    np.testing.assert_array_equal(decoded["a"], [[1, -300], [4, 5]])
    np.testing.assert_array_equal(decoded["b"], [[2.5], [3.5]])
    assert decode_example_slow(bodies[0])["a"].tolist() == [1, -300]


@pytest.mark.parametrize("records,world,batch", [(4295, 3, 64), (10, 4, 3), (7, 8, 2), (512, 2, 256)])
def test_partition_covers_every_position_once(records, world, batch):
    partition = Partition(records, world, batch)
    seen = []
    counts = []
    for rank in range(world):
        counts.append(partition.batches(rank))
        for k in range(partition.batches(rank)):
            start, stop = partition.span(rank, k)
            assert 0 < stop - start <= batch
            seen.extend(range(start, stop))
    assert sorted(seen) == list(range(records))
    assert max(counts) - min(counts) <= 1


@pytest.mark.parametrize("window", [1000, 100000])
def test_epoch_order_is_a_permutation_fixed_by_seed_and_epoch(window):
    counts = np.array([400, 0, 250, 1000, 3])
    order = EpochOrder(counts, seed=5, epoch=0, window=window)
    shard, index = order.locate(np.arange(counts.sum()))
    pairs = set(zip(shard.tolist(), index.tolist()))
    assert pairs == {(s, i) for s, n in enumerate(counts) for i in range(n)}
    again = EpochOrder(counts, seed=5, epoch=0, window=window).locate(np.arange(counts.sum()))
    assert (again[0] == shard).all() and (again[1] == index).all()
    other = EpochOrder(counts, seed=5, epoch=1, window=window).locate(np.arange(counts.sum()))
    assert not ((other[0] == shard).all() and (other[1] == index).all())
    # Asked out of order, in pieces: the same answers.
    positions = np.random.default_rng(0).permutation(counts.sum())[:300]
    piecewise = EpochOrder(counts, seed=5, epoch=0, window=window).locate(positions)
    assert (piecewise[0] == shard[positions]).all() and (piecewise[1] == index[positions]).all()


def _stored(loader_dataset, rows=64):
    storage, shards = open_dataset(str(loader_dataset))
    columns = ShardCache(storage, shards, 1 << 30).columns(0)
    return {name: array[:rows].copy() for name, array in columns.items()}


MASKING = MaskingParams(mask_id=103, vocab_size=30522)


def test_dynamic_masks_restore_originals_and_follow_berts_rule(loader_dataset):
    stored = _stored(loader_dataset, 256)
    original = restore(stored)
    assert not (original == 103).any()  # every [MASK] put back
    ids = np.arange(256) + 1000
    epoch0, epoch1 = (remask(stored, ids, 0, epoch, MASKING) for epoch in (0, 1))
    for masked in (epoch0, epoch1):
        np.testing.assert_array_equal(restore(masked), original)
        weights = masked["masked_lm_weights"] > 0
        length = stored["input_mask"].sum(axis=1)
        expected = np.minimum(20, np.maximum(1, np.round(length * 0.15))).astype(int)
        assert (weights.sum(axis=1) == expected).all()
        rows, slots = np.nonzero(weights)
        positions = masked["masked_lm_positions"][rows, slots]
        assert candidates(stored)[rows, positions].all()  # never [CLS], [SEP] or padding
        np.testing.assert_array_equal(masked["masked_lm_ids"][rows, slots], original[rows, positions])
        unchanged = np.ones_like(original, dtype=bool)
        unchanged[rows, positions] = False
        np.testing.assert_array_equal(masked["input_ids"][unchanged], original[unchanged])
        became = masked["input_ids"][rows, positions]
        share_mask = (became == 103).mean()
        assert 0.72 < share_mask < 0.88
        assert 0.05 < (became == original[rows, positions]).mean() < 0.17
    assert (epoch0["masked_lm_positions"] != epoch1["masked_lm_positions"]).any(axis=1).mean() > 0.9
    # A record's masks depend on (seed, epoch, record) only, not on its batch.
    alone = remask({k: v[5:6] for k, v in stored.items()}, ids[5:6], 0, 0, MASKING)
    for key in ("input_ids", "masked_lm_positions", "masked_lm_weights"):
        np.testing.assert_array_equal(alone[key][0], epoch0[key][5])


def test_hf_labels_are_the_originals_at_masked_positions(loader_dataset):
    stored = _stored(loader_dataset)
    views = hf_views(stored)
    assert views["attention_mask"] is stored["input_mask"]
    labels = views["labels"]
    original = restore(stored)
    masked = labels != -100
    assert masked.sum() == (stored["masked_lm_weights"] > 0).sum()
    np.testing.assert_array_equal(labels[masked], original[masked])


@pytest.mark.parametrize("frame", [
    b"\xc1garbage", messages.encode(messages.Credit(1, 2))[:-1],
    __import__("msgpack").packb({"v": 1, "t": "Credit", "session": "1", "consumed": 2}),
    __import__("msgpack").packb({"v": 1, "t": "Credit", "session": 1, "consumed": 2, "extra": 0}),
    __import__("msgpack").packb({"v": 1, "t": "Attach", "session": 1}),
    __import__("msgpack").packb({"v": 2, "t": "Credit", "session": 1, "consumed": 2}),
    __import__("msgpack").packb({"v": 1, "t": "Credit", "session": True, "consumed": 2}),
])
def test_malformed_messages_are_refused(frame):
    with pytest.raises(messages.MessageError):
        messages.decode(frame)


def test_messages_round_trip():
    attach = messages.Attach("c", 2, 1, 4, 3, 7, 8, "abc", 5, 256, True)
    assert messages.decode(messages.encode(attach)) == attach
    status = messages.Status("s", [messages.RankStatus("c", 1, 4, 0, 2, 3, 4)], dropped=1)
    assert messages.decode(messages.encode(status)) == status


def test_parquet_files_of_fixed_length_lists_are_read(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    ids = np.arange(12, dtype=np.int32).reshape(3, 4)
    weights = np.ones((3, 2), dtype=np.float32)
    table = pa.table({"input_ids": pa.array(list(ids), type=pa.list_(pa.int32())),
                      "masked_lm_weights": pa.array(list(weights), type=pa.list_(pa.float32())),
                      "next_sentence_labels": pa.array([0, 1, 0], type=pa.int32())})
    path = tmp_path / "part-x.parquet"
    pq.write_table(table, path)
    columns = read_shard(path.name, path.read_bytes())
    np.testing.assert_array_equal(columns["input_ids"], ids)
    np.testing.assert_array_equal(columns["masked_lm_weights"], weights)
    np.testing.assert_array_equal(columns["next_sentence_labels"], [[0], [1], [0]])
    pq.write_table(pa.table({"input_ids": pa.array([[1, 2], [3]], type=pa.list_(pa.int32()))}), path)
    with pytest.raises(ValueError, match="varies in length"):
        read_shard(path.name, path.read_bytes())


def test_the_mask_id_comes_from_the_tokenizer_as_the_ventilator_reads_it(tmp_path):
    """A model directory's own configuration names its mask token: the loader
    masks with the id the output was made with, not a guess by name."""
    import json

    from tokenizers import BertWordPieceTokenizer

    from loader.cli import mask_ids
    from tests.support.helpers import VOCAB, need_shared

    need_shared()
    assert mask_ids(str(VOCAB), None) == (103, 30522)
    model = tmp_path / "model"
    model.mkdir()
    BertWordPieceTokenizer(str(VOCAB), lowercase=True).save(str(model / "tokenizer.json"))
    (model / "tokenizer_config.json").write_text(json.dumps({"mask_token": "[unused0]"}))
    assert mask_ids(None, str(model)) == (1, 30522)


def test_separators_inside_a_block_are_never_maskable():
    """Without special_tokens_mask (BERT, RoBERTa --masking static), the
    first and closing ids are special wherever they stand: BERT's middle
    [SEP] and the separators between documents of a packed block."""
    from loader.masking import candidates

    cls, sep = 101, 102
    ids = np.array([[cls, 7, 8, sep, 9, 10, sep, 0],      # a packed block, one segment id
                    [cls, 7, sep, 9, 10, 11, sep, 0]])    # BERT: A, [SEP], B, [SEP]
    features = {"input_ids": ids, "input_mask": (np.arange(8) < 7).astype(np.int32)[None, :].repeat(2, 0),
                "segment_ids": np.array([[0] * 8, [0, 0, 0, 1, 1, 1, 1, 0]]),
                "masked_lm_positions": np.zeros((2, 2), np.int32), "masked_lm_ids": np.zeros((2, 2), np.int32),
                "masked_lm_weights": np.zeros((2, 2), np.float32)}
    assert candidates(features).astype(int).tolist() == [[0, 1, 1, 0, 1, 1, 0, 0], [0, 1, 0, 1, 1, 1, 0, 0]]
    # A stored mask whose 10% random replacement drew [SEP]'s id is judged by the original token.
    features["input_ids"] = ids.copy()
    features["input_ids"][0, 1] = sep
    features["masked_lm_positions"][0, 0], features["masked_lm_ids"][0, 0] = 1, 7
    features["masked_lm_weights"][0, 0] = 1.0
    assert candidates(features)[0, 1]


@pytest.mark.parametrize("dtype", ["object", "no-such-dtype", "U8", "V3", "datetime64[s]", "x" * 500])
def test_an_attached_whose_features_are_not_numbers_is_one_loader_error(dtype):
    """A well-typed Attached is hostile input to the rank too: a feature whose dtype numpy cannot read (or
    reads as objects or text) from a record's bytes was a TypeError deep in the first batch."""
    from loader.client import LoaderClient, LoaderError

    attached = messages.decode(messages.encode(messages.Attached(
        1, "server", "dataset", 10, 2, 0, False, 5,
        [messages.FeatureSpec("input_ids", "int32", 8), messages.FeatureSpec("hostile", dtype, 1)])))
    client = LoaderClient("127.0.0.1:1")
    try:
        with pytest.raises(LoaderError, match="feature 'hostile' as .* which is not a fixed-size number"):
            client._check_attached(attached)
        client._check_attached(messages.Attached(1, "server", "dataset", 10, 2, 0, False, 5,
                                                 [messages.FeatureSpec("input_ids", "int32", 8)]))
    finally:
        client.close()


class _Frame:
    """A received frame as the client reads one (its buffer and length)."""

    def __init__(self, data: bytes):
        self.buffer = memoryview(data)

    def __len__(self) -> int:
        return len(self.buffer)


def _token_attached(layout: str = "padded", pad_id: int = 0, batch_tokens: int = 64) -> messages.Attached:
    return messages.decode(messages.encode(messages.Attached(
        1, "server", "dataset", 10, 0, 0, False, 5, [messages.FeatureSpec("input_ids", "int32", 1)], batch_tokens,
        layout, pad_id)))


@pytest.mark.parametrize("attached, reason", [
    (_token_attached(layout="weird"), "batch layout .weird.: this client lays out"),
    (_token_attached(layout="flat", batch_tokens=0), "batch layout 'flat' without a token budget"),
    (_token_attached(pad_id=2**40), "pad id 1099511627776: it is not a token id"),
])
def test_a_token_batch_attached_the_client_cannot_lay_out_is_one_loader_error(attached, reason):
    """A well-typed Attached of token-budget batches is hostile input too: a layout the client does not know was
    a ValueError, a pad id past int32 an OverflowError, at the first batch."""
    from loader.client import LoaderClient, LoaderError

    client = LoaderClient("127.0.0.1:1")
    try:
        with pytest.raises(LoaderError, match=reason):
            client._check_attached(attached)
        client._check_attached(_token_attached())
    finally:
        client.close()


def test_a_padded_batch_over_its_budget_is_refused_before_it_is_laid_out():
    """Padded rows cost rows x the longest (the packer keeps that within --batch-tokens): a server sending
    10,000 one-token samples and one of 60 tokens, 10,060 tokens on the wire, would make the client allocate a
    10,001 x 60 matrix; at a million samples, terabytes."""
    from loader.client import LoaderClient, LoaderError

    client = LoaderClient("127.0.0.1:1")
    try:
        client._session.attached = _token_attached(batch_tokens=64)
        lengths = np.array([60] + [1] * 10_000, dtype="<i4")
        tokens = int(lengths.sum())
        frames = [_Frame(np.zeros(tokens, "<i4").tobytes()), _Frame(np.zeros(len(lengths), "<i8").tobytes()),
                  _Frame(lengths.tobytes())]
        header = messages.BatchHeader(1, 0, 0, False, len(lengths), tokens)
        with pytest.raises(LoaderError, match="malformed batch from the server"):
            client._token_batch(header, frames)
        lengths = np.array([30, 30], dtype="<i4")  # within the budget: laid out
        frames = [_Frame(np.ones(60, "<i4").tobytes()), _Frame(np.zeros(2, "<i8").tobytes()),
                  _Frame(lengths.tobytes())]
        batch = client._token_batch(messages.BatchHeader(1, 0, 0, False, 2, 60), frames)
        assert batch.features["input_ids"].shape == (2, 30)
    finally:
        client.close()
