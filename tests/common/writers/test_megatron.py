"""The Megatron format reads what it writes: real jobs' pairs (sentence and document levels, each task's and
the merged ones of the finish stage) through the axis, judged by megatron-core's own IndexedDataset."""

import numpy as np
import pytest

from common.objectives.base import Ragged
from common.writers import writer_named
from tests.common.writers.jobs import listed_files, read_through_axis, run_job, small_corpus

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module", params=["sentence", "document"])
def output(request, tmp_path_factory):
    corpus = small_corpus(tmp_path_factory.mktemp("corpus") / "wiki")
    return request.param, run_job(corpus, tmp_path_factory.mktemp(request.param) / "out", "--objective", "tokens",
                                  "--output-format", "megatron", "--megatron-level", request.param)


def megatron_documents(prefix) -> tuple[list[list[int]], list[list[int]]]:
    """Each document's token ids and its sequences' lengths, as megatron-core reads the pair."""
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    dataset = IndexedDataset(str(prefix))
    ends = dataset.document_indices.tolist()
    ids, lengths = [], []
    for start, end in zip(ends[:-1], ends[1:]):
        sequences = [dataset[i] for i in range(start, end)]
        ids.append([int(t) for s in sequences for t in s])
        lengths.append([len(s) for s in sequences])
    return ids, lengths


def check_pair(out, index_name: str) -> list[dict]:
    """The pair read through the axis equals megatron-core's reading; its records."""
    writer, columns, records = read_through_axis(out, index_name)
    assert writer is writer_named("megatron")
    assert isinstance(columns["input_ids"], Ragged) and isinstance(columns["sequence_lengths"], Ragged)
    ids, lengths = megatron_documents(out / index_name[:-len(".idx")])
    assert len(records) == len(ids) > 0
    assert [r["input_ids"].tolist() for r in records] == ids
    assert [r["sequence_lengths"].tolist() for r in records] == lengths
    return records


def test_each_tasks_pair_reads_back_as_megatron_core_reads_it(output):
    level, out = output
    files = listed_files(out)
    data, indexes = [f for f in files if f["name"].endswith(".bin")], [f for f in files if f["name"].endswith(".idx")]
    assert len(indexes) == len(data) >= 2
    for listed in data:  # a .bin holds no records of its own: read with its index
        _, columns, records = read_through_axis(out, listed["name"])
        assert columns is None and records == []
    documents = [record for listed in indexes for record in check_pair(out, listed["name"])]
    sequences = np.concatenate([r["sequence_lengths"] for r in documents])
    if level == "document":  # one sequence a document, ending with the EOD id ([SEP])
        assert (np.array([len(r["sequence_lengths"]) for r in documents]) == 1).all()
        assert all(r["input_ids"][-1] == 102 for r in documents)
    else:
        assert len(sequences) > len(documents)
    assert sum(f["records"] for f in indexes) == len(sequences)  # the manifest counts sequences


def test_the_merged_pairs_hold_every_tasks_documents_in_order(output):
    _, out = output
    merged = [f for f in listed_files(out, finish=True) if f["name"].endswith(".idx")]
    assert [f["name"] for f in merged] == ["megatron/merged-00000.idx"]
    ours = check_pair(out, merged[0]["name"])
    tasks = [r for f in listed_files(out) if f["name"].endswith(".idx") for r in read_through_axis(out, f["name"])[2]]
    assert [r["input_ids"].tolist() for r in ours] == [r["input_ids"].tolist() for r in tasks]


def test_an_index_without_its_data_is_a_value_error(output):
    _, out = output
    name = next(f["name"] for f in listed_files(out) if f["name"].endswith(".idx"))
    with pytest.raises(ValueError, match=r"\.bin is missing"):
        list(writer_named("megatron").read_records(name, (out / name).read_bytes(), lambda other: None))
