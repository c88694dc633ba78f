"""--output-format parquet --column-names hf: Hugging Face's column names and ``labels``, read by the real
``datasets`` and ``BertForPreTraining``, and read back through the format axis (mlm-verify, the loader) as
the objective's features."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from common.job.config import JobConfig
from common.job.params import Component
from common.job.tasks import plan_tasks
from common.storage import LocalStorage
from common.tokenization import Vocabulary, load_tokenizer
from common.writers import writer_named
from tests.common.writers.jobs import listed_files, read_through_axis, run_job, small_corpus
from tests.support.helpers import REPO, VOCAB
from tests.support.run_configs import steps_of
from worker.pipeline import TaskProcessor

HF = {"input_mask": "attention_mask", "segment_ids": "token_type_ids", "next_sentence_labels": "next_sentence_label"}
BERT = ["--output-format", "parquet", "--dupe-factor", "2"]
#: transformers 4 with the tokenizers and huggingface_hub it pins, installed apart by .ci/run.
TRANSFORMERS4 = REPO / ".ci" / "transformers4"


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> tuple[Path, Path]:
    """The same BERT job through the real command line, with our column names and with Hugging Face's."""
    root = tmp_path_factory.mktemp("hfcols")
    corpus = small_corpus(root / "corpus")
    return run_job(corpus, root / "ours", *BERT), run_job(corpus, root / "hf", *BERT, "--column-names", "hf")


def expected_labels(row: dict) -> list[int]:
    """-100 everywhere, the original id at each masked position (restored from masked_lm_*)."""
    labels = [-100] * len(row["input_ids"])
    for position, original, weight in zip(row["masked_lm_positions"], row["masked_lm_ids"], row["masked_lm_weights"]):
        if weight > 0:
            labels[position] = original
    return labels


@pytest.mark.e2e
def test_datasets_reads_huggingfaces_names_and_labels_row_by_row(outputs):
    import datasets

    ours, hf = outputs
    names = [f["name"] for f in listed_files(hf)]
    assert names == [f["name"] for f in listed_files(ours)] and names
    load = lambda out: datasets.load_dataset("parquet", data_files=[str(out / n) for n in names], split="train")  # noqa: E731
    theirs, mine = load(hf), load(ours)
    assert theirs.column_names == ["input_ids", "attention_mask", "token_type_ids", "masked_lm_positions",
                                   "masked_lm_ids", "masked_lm_weights", "next_sentence_label", "labels"]
    assert len(theirs) == len(mine) > 200
    masked = 0
    for row, reference in zip(theirs, mine):
        for feature, value in reference.items():  # every other bit of information the same
            assert row[HF.get(feature, feature)] == value, feature
        assert row["labels"] == expected_labels(reference)
        for position, label in enumerate(row["labels"]):
            if label != -100:  # a masked position: the original token, which input_ids may no longer hold
                masked += 1
                assert reference["masked_lm_ids"][reference["masked_lm_positions"].index(position)] == label
    assert masked > 10 * len(theirs)
    # the dataset card names the files' columns: load_dataset(OUT) casts to them with no data_files
    carded = datasets.load_dataset(str(hf), split="train")
    assert carded.column_names == theirs.column_names and len(carded) == len(theirs)


@pytest.mark.e2e
def test_read_back_by_feature_names_verified_and_served(outputs):
    from loader.shards import ShardCache, open_dataset

    ours, hf = outputs
    info_ours, info_hf = (json.loads((out / "dataset_info.json").read_text()) for out in outputs)
    assert info_hf["features"] == info_ours["features"]  # described by the objective's names ...
    details = info_hf["format_details"]  # ... with the files' names beside them
    assert info_ours["format_details"]["column_names"] == "ours" and details["column_names"] == "hf"
    assert details["columns"] == HF and set(details["added_columns"]) == {"labels"}
    assert details["added_columns"]["labels"]["shape"] == info_hf["features"]["input_ids"]["shape"]
    for f in listed_files(hf):
        _, columns, records = read_through_axis(hf, f["name"])
        _, reference, reference_records = read_through_axis(ours, f["name"])
        assert list(columns) == list(reference)  # mapped back, labels dropped
        for name in reference:
            assert np.array_equal(columns[name], reference[name]), name
        assert len(records) == len(reference_records)
    verify = subprocess.run([sys.executable, "-m", "sink.verify", str(hf)], cwd=REPO, capture_output=True,
                            text=True, timeout=120)
    assert verify.returncode == 0, verify.stderr
    served = []
    for out in outputs:
        storage, shards = open_dataset(str(out))
        cache = ShardCache(storage, shards, 1 << 30)
        served.append([cache.columns(i) for i in range(len(shards.names))])
    for mine, theirs in zip(*served):
        assert set(mine) == set(theirs) and all(np.array_equal(mine[k], theirs[k]) for k in mine)


@pytest.mark.e2e
def test_verify_catches_labels_that_disagree_with_masked_lm(outputs, tmp_path):
    import shutil

    _, hf = outputs
    broken = tmp_path / "broken"
    shutil.copytree(hf, broken)
    name = listed_files(broken)[0]["name"]
    table = pq.read_table(broken / name)
    labels = table.column("labels").to_pylist()
    labels[0] = [-100] * len(labels[0])  # the first record's masked positions lose their labels
    table = table.set_column(table.schema.get_field_index("labels"), "labels",
                             pa.array(labels, type=table.schema.field("labels").type))
    pq.write_table(table, broken / name, compression="zstd")
    verify = subprocess.run([sys.executable, "-m", "sink.verify", str(broken)], cwd=REPO, capture_output=True,
                            text=True, timeout=120)
    assert verify.returncode == 1
    assert "labels disagree with masked_lm_*" in verify.stderr


def test_column_names_other_than_ours_or_hf_are_refused():
    parquet = writer_named("parquet")
    assert parquet.make_params({"column_names": "hf"}).column_names == "hf"
    with pytest.raises(ValueError, match="--column-names must be ours or hf, not 'torch'"):
        parquet.make_params({"column_names": "torch"})
    assert "column_names" not in parquet.component(parquet.make_params({})).params  # opt-in: no job id moves


@pytest.mark.parametrize("objective", [Component("roberta", {"masking": "none", "max_seq_length": 128}),
                                       Component("electra", {"max_seq_length": 128})])
def test_unmasked_outputs_are_renamed_only(objective, tmp_path):
    """No masked positions, so no labels (the collator masks at train time): the renames alone."""
    vocabulary = Vocabulary.from_tokenizer(load_tokenizer(vocab_file=str(VOCAB)))
    corpus = small_corpus(tmp_path / "corpus", 20_000)
    tables = {}
    for naming in ("ours", "hf"):
        writer = Component("parquet", {"column_names": naming})
        config = JobConfig(data_uri=str(corpus), output_uri=str(tmp_path / naming), reader=Component("wikiextractor"),
                           steps=steps_of("blingfire"), tokenizer_json="", objective=objective, writer=writer)
        processor = TaskProcessor(config, vocabulary, LocalStorage(str(tmp_path / naming)))
        storage = LocalStorage(str(corpus))
        (task,) = plan_tasks(storage.list_inputs(), 1 << 30)
        (shard,) = processor.process(task, processor.reader.read(storage, task)).files
        tables[naming] = pq.read_table(tmp_path / naming / shard.name)
        columns, _ = read_through_axis(tmp_path / naming, shard.name)[1:]
        tables[naming + "-read"] = columns
    ours, hf = tables["ours"], tables["hf"]
    assert hf.column_names == [HF.get(name, name) for name in ours.column_names]
    assert "labels" not in hf.column_names and "attention_mask" in hf.column_names
    assert all(hf.column(i).equals(ours.column(i)) for i in range(ours.num_columns)) and ours.num_rows > 10
    assert list(tables["hf-read"]) == ours.column_names


@pytest.mark.e2e
def test_bert_for_pretraining_takes_the_rows_as_they_are(outputs):
    """A tiny BertForPreTraining (transformers 4, in a subprocess) forwards a batch of hf rows with no collate."""
    if not (TRANSFORMERS4 / "transformers").is_dir():
        if os.environ.get("CI"):
            pytest.fail(f"{TRANSFORMERS4} is missing: .ci/run installs transformers 4 there")
        pytest.skip(f"transformers 4 is not installed in {TRANSFORMERS4} (see .ci/run)")
    _, hf = outputs
    shard = hf / listed_files(hf)[0]["name"]
    env = {**os.environ, "PYTHONPATH": str(TRANSFORMERS4), "USE_TF": "0", "USE_TORCH": "1",
           "TRANSFORMERS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", FORWARD, str(shard)], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert np.isfinite(result["loss"]) and result["loss"] > 0
    assert result["prediction_shape"] == [8, 128, 30522] and result["relationship_shape"] == [8, 2]


FORWARD = r'''
import json, sys
import pyarrow.parquet as pq, torch
import transformers
from transformers import BertConfig, BertForPreTraining
assert transformers.__version__.startswith("4."), transformers.__version__
rows = pq.read_table(sys.argv[1]).slice(0, 8).to_pydict()
batch = {name: torch.tensor(rows[name]) for name in
         ("input_ids", "attention_mask", "token_type_ids", "labels", "next_sentence_label")}
torch.manual_seed(0)
model = BertForPreTraining(BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                      intermediate_size=64, max_position_embeddings=128))
out = model(**batch)
print(json.dumps({"loss": float(out.loss), "prediction_shape": list(out.prediction_logits.shape),
                  "relationship_shape": list(out.seq_relationship_logits.shape)}))
'''
