"""--objective tokens --max-seq-length N: documents as [CLS] chunk [SEP] records, none of their tokens lost."""

import numpy as np
import pytest

from common.objectives.base import Ragged
from common.objectives.documents import TokenizedDocuments
from common.objectives.tokens import TokensObjective, TokensParams, document_ids
from common.tokenization.vocabulary import SpecialIds

SPECIAL = SpecialIds(cls=1, sep=2, mask=3, pad=0, unk=4, vocab_size=1000, starts_word=np.ones(1000, dtype=bool))


def records(documents, max_seq_length, task="part-a"):
    objective = TokensObjective(TokensParams(max_seq_length=max_seq_length), SPECIAL)
    batches = list(objective.batches(documents, task, 0))
    names = [f.name for f in objective.features]
    assert all(list(b.columns) == names for b in batches)
    return batches


def test_long_documents_become_consecutive_chunks_with_their_ids():
    rng = np.random.default_rng(0)
    lengths = [1, 4, 5, 6, 17, 300]  # around the 4 text tokens a 6-token chunk holds
    documents = TokenizedDocuments.from_lists(
        [[list(rng.integers(10, 1000, size=n // 2 or 1)), list(rng.integers(10, 1000, size=n - n // 2))]
         if n > 1 else [[7]] for n in lengths])
    (batch,) = records(documents, 6)
    ids, doc, index = batch.columns["input_ids"], batch.columns["document_id"][:, 0], batch.columns["chunk_index"][:, 0]
    rows = list(ids.rows())
    assert all(len(r) <= 6 and r[0] == 1 and r[-1] == 2 and len(r) > 2 for r in rows)
    assert [len(r) - 2 for r in rows][:6] == [1, 4, 4, 1, 4, 2]  # greedy: full chunks, then the rest
    expected_ids = document_ids("part-a", 0, len(lengths))
    for d, n in enumerate(lengths):
        mine = [(i, r) for r, e, i in zip(rows, doc, index) if e == expected_ids[d]]
        assert [i for i, _ in mine] == list(range(-(-n // 4)))
        start, end = documents.segment_offsets[documents.document_offsets[d]], \
            documents.segment_offsets[documents.document_offsets[d + 1]]
        assert np.concatenate([r[1:-1] for _, r in mine]).tolist() == documents.tokens[start:end].tolist()
    assert len(set(expected_ids.tolist())) == len(lengths) and (expected_ids >= 0).all()
    assert not set(document_ids("part-b", 0, 6).tolist()) & set(expected_ids.tolist())


def test_zero_keeps_whole_documents_as_before():
    documents = TokenizedDocuments.from_lists([[[10, 11], [12]], [[13, 14, 15]]])
    (batch,) = records(documents, 0)
    assert [r.tolist() for r in batch.columns["input_ids"].rows()] == [[10, 11, 12], [13, 14, 15]]
    assert isinstance(batch.columns["sentence_lengths"], Ragged)
    assert TokensObjective.component(TokensParams()).params == {}, "off by default: the job (and its id) as before"


def test_bad_lengths_and_tokenizers_are_refused():
    with pytest.raises(ValueError, match="at least 3"):
        TokensObjective.make_params({"max_seq_length": 2})
    no_cls = SpecialIds(cls=None, sep=2, mask=3, pad=0, unk=4, vocab_size=10, starts_word=np.ones(10, dtype=bool))
    TokensObjective(TokensParams(), no_cls)
    with pytest.raises(ValueError, match="cls and sep"):
        TokensObjective(TokensParams(max_seq_length=8), no_cls)


def test_megatron_takes_whole_documents_only():
    from common.writers.megatron import MegatronParams, MegatronWriter

    MegatronWriter.check_features(MegatronParams(), TokensObjective(TokensParams(), SPECIAL).features)
    with pytest.raises(ValueError, match="megatron holds whole documents"):
        MegatronWriter.check_features(MegatronParams(), TokensObjective(TokensParams(max_seq_length=64), SPECIAL).features)
