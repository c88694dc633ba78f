"""The Parquet format reads what it writes: real jobs' files (one file a task, sequence-length bins,
variable-length records) through the axis, judged by Hugging Face ``datasets`` and pyarrow."""

import json
import os

import numpy as np
import pytest

from common.writers import writer_named
from tests.common.writers.jobs import listed_files, read_through_axis, run_job, small_corpus

pytestmark = pytest.mark.e2e

JOBS = {"plain": ["--output-format", "parquet"],
        "binned": ["--output-format", "parquet", "--bin-size", "32"],
        "variable": ["--output-format", "parquet", "--objective", "tokens", "--task-size", "256K"]}  # one task: documents
# of several lengths in one file


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return small_corpus(tmp_path_factory.mktemp("corpus") / "wiki")


@pytest.fixture(scope="module", params=sorted(JOBS))
def output(request, corpus, tmp_path_factory):
    return request.param, run_job(corpus, tmp_path_factory.mktemp(request.param) / "out", *JOBS[request.param])


def test_every_file_reads_back_as_datasets_reads_it(output, tmp_path):
    import datasets

    os.environ["HF_DATASETS_OFFLINE"] = "1"
    kind, out = output
    info = json.loads((out / "dataset_info.json").read_text())
    files = listed_files(out)
    assert len(files) >= (1 if kind == "variable" else 2)
    if kind == "binned":
        # each side in its split's directory, its bins below it (train/bin-K/part-*.parquet)
        assert all(f["name"].startswith("train/bin-") for f in files)
        assert len({f["name"].rsplit("/", 1)[0] for f in files}) >= 2
    for listed in files:
        writer, columns, records = read_through_axis(out, listed["name"])
        assert writer is writer_named("parquet")
        theirs = datasets.load_dataset("parquet", data_files=[str(out / listed["name"])], split="train",
                                       cache_dir=str(tmp_path / "cache"))
        assert len(records) == len(theirs) == listed["records"] > 0
        assert set(columns) == set(theirs.column_names) == set(info["features"])
        for ours, reference in zip(records, theirs):
            for key, value in reference.items():
                assert ours[key].dtype == np.dtype(info["features"][key]["dtype"])
                np.testing.assert_array_equal(ours[key], np.asarray(value))


def test_columns_are_arrays_or_ragged_as_the_records_are(output):
    import pyarrow.parquet as pq

    from common.objectives.base import Ragged

    kind, out = output
    name = max(listed_files(out), key=lambda f: f["records"])["name"]  # documents of several lengths
    _, columns, records = read_through_axis(out, name)
    table = pq.read_table(out / name)
    for key, column in columns.items():
        theirs = table.column(key).to_pylist()
        if kind == "variable":
            assert isinstance(column, Ragged) and column.lengths.tolist() == [len(v) for v in theirs]
            assert len({len(v) for v in theirs}) > 1  # it does vary
        elif isinstance(theirs[0], list):
            assert column.shape == (len(theirs), len(theirs[0]))
        else:  # one value a record: a scalar column
            assert column.shape == (len(theirs),)
        assert [np.ravel(r[key]).tolist() for r in records] == [np.ravel(v).tolist() for v in theirs]


def test_a_cut_file_is_a_value_error():
    with pytest.raises(ValueError, match="not a readable Parquet file"):
        list(writer_named("parquet").read_records("part-x.parquet", b"PAR1 not really"))
