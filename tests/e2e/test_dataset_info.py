"""Outputs that describe themselves (OUT/dataset_info.json, every format), checked by mlm-verify, and the
Parquet output's dataset card (OUT/README.md) read by the real ``datasets`` with no data_files."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from common.steps import split_of
from tests.support.factories import finished_run, wiki_prefix
from tests.support.helpers import REPO, VOCAB, manifest

pytestmark = pytest.mark.e2e

SMALL = ["--vocab-file", VOCAB, "--task-size", "64K", "--workers", "2"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """~300 KB of whole documents: a few tasks, seconds per job."""
    return wiki_prefix(tmp_path_factory.mktemp("corpus"), 300_000)


def run(corpus, output, *args):
    return finished_run(corpus, output, *SMALL, *args, timeout=180).output


def verify(output) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sink.verify", str(output)], cwd=REPO, capture_output=True,
                          text=True, timeout=120)


def vocab_ids() -> dict[str, int]:
    return {line.rstrip("\n"): i for i, line in enumerate(VOCAB.read_text(encoding="utf-8").splitlines(True))}


@pytest.fixture(scope="module")
def tfrecord_output(corpus, tmp_path_factory):
    return run(corpus, tmp_path_factory.mktemp("tf") / "out", "--dupe-factor", "1", "--max-seq-length", "64",
               "--max-predictions-per-seq", "10", "--holdout-fraction", "0.2")


@pytest.fixture(scope="module")
def parquet_output(corpus, tmp_path_factory):
    return run(corpus, tmp_path_factory.mktemp("pq") / "out", "--output-format", "parquet", "--bin-size", "32",
               "--max-seq-length", "64", "--dupe-factor", "1", "--holdout-fraction", "0.25")


def test_tfrecord_output_says_what_tensorflow_needs_to_parse_it(tfrecord_output):
    """A trainer's FixedLenFeature spec built from dataset_info.json alone parses every record."""
    import tensorflow as tf

    info = json.loads((tfrecord_output / "dataset_info.json").read_text())
    assert (info["format"], info["sequence_length"], info["max_predictions_per_seq"]) == ("tfrecord", 64, 10)
    assert info["feature_names"] == ["input_ids", "input_mask", "segment_ids", "masked_lm_positions",
                                     "masked_lm_ids", "masked_lm_weights", "next_sentence_labels"]
    assert info["features"]["masked_lm_weights"] == {"dtype": "float32", "shape": [10]}
    assert info["features"]["input_ids"] == {"dtype": "int64", "shape": [64]}
    ids = vocab_ids()
    tokenizer = info["tokenizer"]
    assert tokenizer["vocab_size"] == len(ids) and tokenizer["lower_case"] is True
    assert {role: s["id"] for role, s in tokenizer["special_tokens"].items()} == {
        "cls": ids["[CLS]"], "sep": ids["[SEP]"], "mask": ids["[MASK]"], "pad": ids["[PAD]"], "unk": ids["[UNK]"]}
    assert info["objective"]["name"] == "bert" and info["objective"]["masked_lm_prob"] == 0.15
    assert info["complete"] is True and info["holdout"]["fraction"] == 0.2
    assert "--max-seq-length 64" in info["made_by"]["command"] and info["made_by"]["version"].startswith("0.")
    entries = manifest(tfrecord_output).values()
    assert info["records"] == sum(e["records"] for e in entries) > 0
    spec = {name: tf.io.FixedLenFeature(f["shape"], tf.float32 if f["dtype"] == "float32" else tf.int64)
            for name, f in info["features"].items()}
    parsed = 0
    for entry in entries:
        for shard in entry["shards"]:
            for record in tf.data.TFRecordDataset(str(tfrecord_output / shard["name"])):
                example = tf.io.parse_single_example(record, spec)
                assert example["input_ids"].shape == (64,)
                parsed += 1
    assert parsed == info["records"] + info["holdout_totals"]["records"]
    assert verify(tfrecord_output).returncode == 0


def test_verify_checks_the_files_against_the_description(tfrecord_output, tmp_path):
    copy = tmp_path / "out"
    shutil.copytree(tfrecord_output, copy)
    info = json.loads((copy / "dataset_info.json").read_text())
    info["features"]["input_ids"]["shape"] = [128]
    info["tokenizer"]["vocab_size"] = 1000
    (copy / "dataset_info.json").write_text(json.dumps(info))
    result = verify(copy)
    assert result.returncode == 1
    assert "input_ids holds 64 values a record, dataset_info.json says 128" in result.stderr
    assert "is not below the vocabulary's size 1000" in result.stderr
    (copy / "dataset_info.json").unlink()
    result = verify(copy)
    assert result.returncode == 1 and "no dataset_info.json" in result.stderr


def refused_by_load_dataset(output) -> str:
    """What ``datasets.load_dataset(OUT)`` (offline, a local path) says of an output it cannot read."""
    import datasets

    with pytest.raises(datasets.exceptions.DataFilesNotFoundError):
        datasets.load_dataset(str(output))
    return (output / "README.md").read_text()


def test_load_dataset_does_not_misread_a_tfrecord_output_and_the_card_says_how_to_read_it(tfrecord_output):
    card = refused_by_load_dataset(tfrecord_output)  # not manifest.jsonl and summary.json read as JSON data
    assert '  - split: train\n    path: "part-*.tfrecord"' in card
    assert '  - split: validation\n    path: "holdout/part-*.tfrecord"' in card
    assert "tf.data.TFRecordDataset" in card and "python -m loader" in card


def test_megatron_output_names_its_dtype_and_eod(corpus, tmp_path):
    output = run(corpus, tmp_path / "out", "--objective", "tokens", "--output-format", "megatron",
                 "--megatron-level", "document")
    card = refused_by_load_dataset(output)
    assert "--data-path $(cat megatron_data_path.txt)" in card
    info = json.loads((output / "dataset_info.json").read_text())
    assert info["features"]["input_ids"] == {"dtype": "uint16", "shape": [None]}
    assert info["format_details"]["eod_id"] == vocab_ids()["[SEP]"] and info["format_details"]["dtype_code"] == 8
    assert info["sequence_length"] is None
    assert verify(output).returncode == 0
    info["features"]["input_ids"]["dtype"] = "int32"
    (output / "dataset_info.json").write_text(json.dumps(info))
    result = verify(output)
    assert result.returncode == 1 and "input_ids is uint16, dataset_info.json says int32" in result.stderr


def test_load_dataset_follows_the_card_splits_and_bins(parquet_output):
    """datasets.load_dataset(OUT): train is the training side, validation the held-out side, row for row;
    each bin is a config of its own."""
    import datasets
    import pyarrow.parquet as pq

    card = (parquet_output / "README.md").read_text()
    assert card.startswith("---\n") and "license: unknown" in card and "config_name: bin-002" in card
    info = json.loads((parquet_output / "dataset_info.json").read_text())
    assert info["tokenizer"]["sha256"] in card and info["made_by"]["command"] in card

    def rows(holdout: bool, where: str = "") -> list:
        names = sorted(f["name"] for e in manifest(parquet_output).values() for f in e["shards"]
                       if (split_of(f) == "holdout") == holdout and where in f["name"])
        return sorted(tuple(r) for n in names for r in pq.read_table(parquet_output / n)["input_ids"].to_pylist())

    loaded = datasets.load_dataset(str(parquet_output))
    assert sorted(loaded) == ["train", "validation"]
    assert loaded["train"].column_names == info["feature_names"]
    train, held = rows(False), rows(True)
    assert len(train) > len(held) > 0
    assert sorted(tuple(r) for r in loaded["train"]["input_ids"]) == train
    assert sorted(tuple(r) for r in loaded["validation"]["input_ids"]) == held
    binned = datasets.load_dataset(str(parquet_output), "bin-002")
    assert sorted(tuple(r) for r in binned["train"]["input_ids"]) == rows(False, "bin-002/")
    lengths = np.asarray(binned["train"]["input_mask"]).sum(axis=1)
    assert (lengths > 32).all() and (lengths <= 64).all()


def test_the_card_lists_exactly_the_sides_on_disk(parquet_output, tmp_path):
    """A step's own side (here the held-out files moved to a side "test", as a plugin step writes one) is a
    split of its name at its files' directory: no validation split at validation/ that does not exist."""
    import datasets

    from common.describe.dataset_card import write_card
    from common.storage import LocalStorage

    output = tmp_path / "out"
    shutil.copytree(parquet_output, output)
    shutil.move(output / "validation", output / "test")  # Parquet's held-out side is the Hub's validation/
    lines = (output / "manifest.jsonl").read_text().splitlines()
    moved = [line.replace('"validation/', '"test/').replace('"split": "holdout"', '"split": "test"') for line in lines]
    (output / "manifest.jsonl").write_text("\n".join(moved) + "\n")
    write_card(LocalStorage(str(output)), None)
    card = (output / "README.md").read_text()
    assert "holdout/" not in card.split("\n---\n")[0] and "validation" not in card.split("\n---\n")[0]
    assert 'path: "test/' in card.split("\n---\n")[0]
    loaded = datasets.load_dataset(str(output))
    assert sorted(loaded) == ["test", "train"]
    assert loaded["test"].num_rows == sum(f["records"] for line in moved for f in json.loads(line)["shards"]
                                          if f.get("split") == "test") > 0


def test_an_output_without_bins_or_holdout_loads_as_one_train_split(corpus, tmp_path):
    import datasets

    output = run(corpus, tmp_path / "out", "--output-format", "parquet", "--objective", "roberta",
                 "--max-seq-length", "64")
    loaded = datasets.load_dataset(str(output))
    assert list(loaded) == ["train"]
    assert loaded["train"].num_rows == sum(e["records"] for e in manifest(output).values()) > 0
    assert verify(output).returncode == 0
