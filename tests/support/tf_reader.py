"""Reading shards back with TensorFlow's own reader: the judge of what we write."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def feature_spec(max_seq_length: int = 128, max_predictions_per_seq: int = 20):
    """run_pretraining.py's name_to_features."""
    import tensorflow as tf

    return {
        "input_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "input_mask": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "segment_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "masked_lm_positions": tf.io.FixedLenFeature([max_predictions_per_seq], tf.int64),
        "masked_lm_ids": tf.io.FixedLenFeature([max_predictions_per_seq], tf.int64),
        "masked_lm_weights": tf.io.FixedLenFeature([max_predictions_per_seq], tf.float32),
        "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
    }


def read_examples(path: str, max_seq_length: int = 128, max_predictions_per_seq: int = 20,
                  compression: str = "") -> list[dict]:

    return read_with_spec(path, feature_spec(max_seq_length, max_predictions_per_seq), compression)


def spec_of(features) -> dict:
    """TensorFlow's parse spec for an objective's features (common.objectives.Feature):
    what a trainer reading that objective's TFRecords declares."""
    import tensorflow as tf

    return {f.name: tf.io.FixedLenFeature([f.length], tf.float32 if f.dtype.startswith("float") else tf.int64)
            for f in features}


def read_with_spec(path: str, spec: dict, compression: str = "") -> list[dict]:
    examples: list[dict] = []
    for parsed in _parsed_batches(path, spec, compression):
        rows = len(next(iter(parsed.values())))
        examples.extend({k: v[i] for k, v in parsed.items()} for i in range(rows))
    return examples


def read_columns(path: str, max_seq_length: int = 128, max_predictions_per_seq: int = 20) -> dict:
    """run_pretraining.py's features of every record of the shard, one array per feature (a row per record, in
    order): the values :func:`read_examples` gives, for checks made on the whole shard at once."""
    import numpy as np

    batches = list(_parsed_batches(path, feature_spec(max_seq_length, max_predictions_per_seq)))
    return {name: np.concatenate([batch[name] for batch in batches]) for name in batches[0]} if batches else {}


def _parsed_batches(path: str, spec: dict, compression: str = ""):
    import tensorflow as tf

    # tf.io.parse_example over batches of records: the same values as parse_single_example record by record
    # (TensorFlow's own batched parser), without an eager call per record (a d=10 job has ~50k of them).
    dataset = tf.data.TFRecordDataset(path, compression_type=compression or None).batch(4096)
    for batch in dataset:
        yield {k: v.numpy() for k, v in tf.io.parse_example(batch, spec).items()}
