"""--objective tokens --output-format megatron: Megatron-LM's indexed
dataset layout, read back with a reader written from that layout, every
document's ids the tokenizer's for the same text."""

from __future__ import annotations

import numpy as np
import pytest

from common.job.params import Component
from common.objectives import Feature, TokenizedDocuments
from common.objectives.tokens import TokensObjective
from common.readers import ParseReport
from common.segmenters.sentences import Segmenter, split_segments
from common.storage import LocalStorage
from common.tokenization import SpecialIds
from common.writers.megatron import IndexedDataset, MegatronWriter, best_fitting_dtype
from tests.common.writers.test_parquet_writer import run_job, vocabulary  # noqa: F401  (the BERT vocabulary, loaded once)
from tests.support.helpers import WIKI


def read_back(output, files) -> list[IndexedDataset]:
    pairs = {}
    for f in files:
        pairs.setdefault(f.name.rsplit(".", 1)[0], {})[f.name.rsplit(".", 1)[1]] = f
    datasets = []
    for both in pairs.values():  # in the tasks' order
        index = IndexedDataset.parse_index((output / both["idx"].name).read_bytes())
        assert both["idx"].records == len(index.sequence_lengths)
        datasets.append(index.with_data((output / both["bin"].name).read_bytes()))
    return datasets


def expected_documents(vocabulary) -> list[list[list[int]]]:
    """Each document's sentences as the tokenizer encodes them, from the text."""
    from common.readers import reader_named

    reader = reader_named("wikiextractor")()
    corpus = LocalStorage(str(WIKI))
    documents = []
    for f in corpus.list_inputs():
        for document in reader.parse(corpus.read_all(f.path, f.version), 0, ParseReport()):
            sentences = split_segments(document.lines, Segmenter.BLINGFIRE)
            ids, lengths = vocabulary.encode_many(sentences)
            offsets = np.concatenate([[0], np.cumsum(lengths)])
            encoded = [ids[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:]) if b > a]
            if encoded:
                documents.append(encoded)
    return documents


@pytest.mark.parametrize("level", ["sentence", "document"])
def test_every_documents_ids_are_the_tokenizers(vocabulary, tmp_path, level):
    files = run_job(vocabulary, tmp_path, Component("megatron", {"megatron_level": level}), Component("tokens"))
    datasets = read_back(tmp_path, files)
    assert all(d.dtype == np.uint16 for d in datasets), "BERT's 30,522 ids fit uint16"
    ours = [[s.tolist() for s in document] for d in datasets for document in d.documents()]
    expected = expected_documents(vocabulary)
    if level == "document":  # one sequence per document, ending with Megatron's EOD ([SEP]), as --append-eod
        expected = [[[t for sentence in document for t in sentence] + [vocabulary.special.sep]]
                    for document in expected]
    assert ours == expected
    assert len(ours) == 103


def test_large_vocabularies_are_int32(tmp_path):
    starts = np.ones(70000, dtype=bool)
    special = SpecialIds(cls=None, sep=None, mask=None, pad=None, unk=0, vocab_size=70000, starts_word=starts)
    objective = TokensObjective(TokensObjective.make_params({}), special)
    writer = MegatronWriter(MegatronWriter.make_params({}), objective.features)
    documents = TokenizedDocuments.from_lists([[[69999, 5], [7]], [[65535, 65536, 1]]])
    output = LocalStorage(str(tmp_path))
    with writer.writing(output, "part-x") as task_output:
        for batch in objective.batches(documents, "t", 0):
            task_output.write(batch)
        files = task_output.commit()
    (dataset,) = read_back(tmp_path, [*map(lambda f: f, files)])
    assert dataset.dtype == np.int32 and best_fitting_dtype(70000) == np.int32
    assert [[s.tolist() for s in d] for d in dataset.documents()] == [[[69999, 5], [7]], [[65535, 65536, 1]]]
    assert dataset.document_indices.tolist() == [0, 2, 3]
    assert dataset.sequence_pointers.tolist() == [0, 8, 12]


def test_instances_are_refused(vocabulary):
    from common.objectives.bert import BertObjective

    features = BertObjective(BertObjective.make_params({}), vocabulary.special).features
    with pytest.raises(ValueError, match="megatron holds token sequences, not finished instances"):
        MegatronWriter.check_features(MegatronWriter.make_params({}), features)
    with pytest.raises(ValueError, match="--megatron-level must be one of"):
        MegatronWriter.make_params({"megatron_level": "paragraph"})


def test_a_damaged_index_is_reported(vocabulary, tmp_path):
    files = run_job(vocabulary, tmp_path, Component("megatron"), Component("tokens"))
    index = next(f for f in files if f.name.endswith(".idx"))
    data = (tmp_path / index.name).read_bytes()
    assert MegatronWriter.count_records(index.name, data) == index.records > 0
    for damaged in (data[:-8], b"MMIDIDY" + data[7:]):
        with pytest.raises(ValueError):
            MegatronWriter.count_records(index.name, damaged)


def test_tokens_records_in_parquet_keep_sentences(vocabulary, tmp_path):
    import pyarrow.dataset as ds

    files = run_job(vocabulary, tmp_path, Component("parquet"), Component("tokens"))
    table = ds.dataset([str(tmp_path / f.name) for f in files]).to_table()
    assert table.num_rows == 103
    expected = expected_documents(vocabulary)
    rows = table.to_pydict()
    for ids, lengths, sentences in zip(rows["input_ids"], rows["sentence_lengths"], expected):
        assert lengths == [len(s) for s in sentences]
        assert ids == [t for s in sentences for t in s]


def test_feature_bound_is_the_vocabulary(vocabulary):
    features = TokensObjective(TokensObjective.make_params({}), vocabulary.special).features
    assert features[0] == Feature("input_ids", "int32", None, bound=vocabulary.special.vocab_size)


def test_merged_pairs_hold_every_tasks_documents_in_order(tmp_path):
    """A job's pairs merged into one (Megatron-LM's merge_datasets): the same documents, in the data path
    list's order, read back by this project's reader and, when installed, by megatron-core's own."""
    from common.writers.megatron import merge_parts

    special = SpecialIds(cls=None, sep=None, mask=None, pad=None, unk=0, vocab_size=1000, starts_word=np.ones(1000, bool))
    objective = TokensObjective(TokensObjective.make_params({}), special)
    writer = MegatronWriter(MegatronWriter.make_params({}), objective.features)
    output = LocalStorage(str(tmp_path))
    parts = {"part-a": [[[1, 2], [3]], [[4]]], "part-b": [[[5, 6, 7]]], "part-c": [[[8], [9], [10, 11]]]}
    for stem, documents in parts.items():
        with writer.writing(output, stem) as task_output:
            for batch in objective.batches(TokenizedDocuments.from_lists(documents), stem, 0):
                task_output.write(batch)
            task_output.commit()
    files = merge_parts(output, ["part-a", "part-missing", "part-b", "part-c"], "megatron/merged-00000")
    assert [f.name for f in files] == ["megatron/merged-00000.bin", "megatron/merged-00000.idx"]
    (merged,) = read_back(tmp_path, files)
    expected = [document for documents in parts.values() for document in documents]
    assert [[s.tolist() for s in d] for d in merged.documents()] == expected
    assert merged.document_indices.tolist() == [0, 2, 3, 4, 7]
    try:
        from megatron.core.datasets.indexed_dataset import IndexedDataset as MegatronIndexedDataset
    except ImportError:
        return
    theirs = MegatronIndexedDataset(str(tmp_path / "megatron" / "merged-00000"))
    assert [theirs[i].tolist() for i in range(len(theirs))] == [s for d in expected for s in d]
    assert theirs.document_indices.tolist() == [0, 2, 3, 4, 7]
