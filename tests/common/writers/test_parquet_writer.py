"""--output-format parquet: the same records as TFRecord, read by pyarrow
and by Hugging Face datasets, the same bytes every time, LDDL's bins."""

from __future__ import annotations

import os

import numpy as np
import pyarrow.dataset as ds
import pytest

from common.job.config import JobConfig
from common.job.params import Component
from common.job.tasks import plan_tasks
from common.storage import LocalStorage
from common.tokenization import Vocabulary, load_tokenizer
from common.writers import writer_named
from tests.support.helpers import VOCAB, WIKI, need_shared
from tests.support.run_configs import steps_of
from worker.pipeline import TaskProcessor

OBJECTIVE = Component("bert", {"dupe_factor": 2, "max_seq_length": 128})


@pytest.fixture(scope="module")
def vocabulary():
    need_shared()
    return Vocabulary.from_tokenizer(load_tokenizer(vocab_file=str(VOCAB)))


def run_job(vocabulary, output, writer: Component, objective: Component = OBJECTIVE) -> list:
    config = JobConfig(data_uri=str(WIKI), output_uri=str(output), reader=Component("wikiextractor"),
                       steps=steps_of("blingfire"), tokenizer_json="", objective=objective, writer=writer)
    processor = TaskProcessor(config, vocabulary, LocalStorage(str(output)))
    corpus = LocalStorage(str(WIKI))
    files = []
    for task in plan_tasks(corpus.list_inputs(), 512 * 1024):
        files += processor.process(task, processor.reader.read(corpus, task)).files
    return files


def test_same_records_as_tfrecord_field_by_field(vocabulary, tmp_path):
    from tests.support.tf_reader import read_examples

    tf_files = run_job(vocabulary, tmp_path / "tf", Component("tfrecord"))
    pq_files = run_job(vocabulary, tmp_path / "pq", Component("parquet"))
    assert all(f.name.startswith("train/part-") for f in pq_files), "the training side in the Hub's train/"
    assert [f.name.split(".")[0] for f in tf_files] == [f.name.removeprefix("train/").split(".")[0] for f in pq_files]
    for tf_file, pq_file in zip(tf_files, pq_files):
        examples = read_examples(str(tmp_path / "tf" / tf_file.name))
        table = ds.dataset(str(tmp_path / "pq" / pq_file.name), format="parquet").to_table()
        assert table.num_rows == len(examples) == tf_file.records == pq_file.records
        assert str(table.schema.field("input_ids").type) == "list<element: int32>"
        assert str(table.schema.field("next_sentence_labels").type) == "int32"
        assert str(table.schema.field("masked_lm_weights").type) == "list<element: float>"
        rows = table.to_pydict()
        for i, example in enumerate(examples):
            for name, value in example.items():
                ours = np.atleast_1d(np.asarray(rows[name][i]))
                assert ours.shape == value.shape and (ours == value).all(), (pq_file.name, i, name)


def test_huggingface_datasets_reads_it(vocabulary, tmp_path):
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    import datasets

    files = run_job(vocabulary, tmp_path / "pq", Component("parquet"))
    dataset = datasets.load_dataset("parquet", data_files=[str(tmp_path / "pq" / f.name) for f in files],
                                    split="train", cache_dir=str(tmp_path / "cache"))
    assert len(dataset) == sum(f.records for f in files)
    row = dataset[0]
    assert len(row["input_ids"]) == 128 and row["input_ids"][0] == vocabulary.special.cls
    assert set(dataset.column_names) == {"input_ids", "input_mask", "segment_ids", "masked_lm_positions",
                                         "masked_lm_ids", "masked_lm_weights", "next_sentence_labels"}


def test_same_records_same_bytes(vocabulary, tmp_path):
    first = run_job(vocabulary, tmp_path / "a", Component("parquet"))
    second = run_job(vocabulary, tmp_path / "b", Component("parquet"))
    assert [(f.name, f.sha256, f.bytes) for f in first] == [(f.name, f.sha256, f.bytes) for f in second]
    for f in first:
        data = (tmp_path / "a" / f.name).read_bytes()
        assert writer_named("parquet").count_records(f.name, data) == f.records
        with pytest.raises(ValueError, match="not a readable Parquet file"):
            writer_named("parquet").count_records(f.name, data[:-20])


def test_bins_hold_lddls_length_ranges(vocabulary, tmp_path):
    plain = run_job(vocabulary, tmp_path / "plain", Component("parquet"))
    binned = run_job(vocabulary, tmp_path / "bins", Component("parquet", {"bin_size": 32}))
    assert {f.name.split("/")[0] for f in binned} == {"train"}
    assert {f.name.split("/")[1] for f in binned} <= {f"bin-{k:03d}" for k in range(1, 5)}
    assert len({f.name.split("/")[1] for f in binned}) >= 3
    assert sum(f.records for f in binned) == sum(f.records for f in plain)
    everything = []
    for f in binned:
        k = int(f.name.split("/")[1].split("-")[1])
        lengths = [sum(mask) for mask in ds.dataset(str(tmp_path / "bins" / f.name)).to_table().column(
            "input_mask").to_pylist()]
        assert all((k - 1) * 32 < length <= k * 32 for length in lengths), f.name
        everything += [tuple(r) for r in ds.dataset(str(tmp_path / "bins" / f.name)).to_table().column(
            "input_ids").to_pylist()]
    expected = [tuple(r) for f in plain
                for r in ds.dataset(str(tmp_path / "plain" / f.name)).to_table().column("input_ids").to_pylist()]
    assert sorted(everything) == sorted(expected)


def test_unmasked_roberta_blocks_keep_their_narrow_types(vocabulary, tmp_path):
    files = run_job(vocabulary, tmp_path / "r", Component("parquet"),
                    Component("roberta", {"masking": "none", "max_seq_length": 64}))
    table = ds.dataset(str(tmp_path / "r" / files[0].name)).to_table()
    assert str(table.schema.field("special_tokens_mask").type) == "list<element: int8>"
    assert {"input_ids", "input_mask", "special_tokens_mask", "word_starts"} <= set(table.column_names)


@pytest.mark.parametrize("objective", [
    Component("albert", {"dupe_factor": 1, "max_seq_length": 128}),
    Component("electra", {}),
    Component("roberta", {"masking": "static", "max_seq_length": 128}),
    Component("roberta", {"masking": "none", "max_seq_length": 128}),
], ids=["albert", "electra", "roberta-static", "roberta-none"])
def test_every_objective_writes_the_same_records_in_both_formats(vocabulary, tmp_path, objective):
    """Each objective's features, read back with its own TFRecord spec and
    with pyarrow: the same values, record by record."""
    from common.objectives import objective_named
    from tests.support.tf_reader import read_with_spec, spec_of

    features = objective_named(objective.name)(objective_named(objective.name).make_params(objective.params),
                                                vocabulary.special).features
    tf_files = run_job(vocabulary, tmp_path / "tf", Component("tfrecord"), objective)
    pq_files = run_job(vocabulary, tmp_path / "pq", Component("parquet"), objective)
    assert len(tf_files) == len(pq_files) >= 3
    compared = 0
    for tf_file, pq_file in zip(tf_files, pq_files):
        examples = read_with_spec(str(tmp_path / "tf" / tf_file.name), spec_of(features))
        rows = ds.dataset(str(tmp_path / "pq" / pq_file.name), format="parquet").to_table().to_pydict()
        assert set(rows) == {f.name for f in features}
        assert len(examples) == len(rows["input_ids"]) == tf_file.records == pq_file.records > 0
        for i, example in enumerate(examples):
            for name, value in example.items():
                ours = np.atleast_1d(np.asarray(rows[name][i]))
                assert ours.shape == value.shape and (ours == value).all(), (pq_file.name, i, name)
            compared += 1
    assert compared > 500
