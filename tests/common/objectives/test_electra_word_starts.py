"""ELECTRA's ``--word-starts``: where words begin, beside the reference's
examples, for whole-word masking at train time.  The examples themselves
(input_ids, input_mask, segment_ids) are the same bytes with it or without."""

from __future__ import annotations

import numpy as np
import pytest

from common.job.params import Component
from common.objectives.documents import TokenizedDocuments
from common.objectives.electra import ElectraObjective, ElectraParams
from common.tokenization.vocabulary import SpecialIds


def documents(seed: int) -> TokenizedDocuments:
    """Random documents of random sentences; a word is 1 to 3 tokens."""
    rng = np.random.default_rng(seed)
    segment_lengths = rng.integers(1, 40, size=300)
    tokens = rng.integers(1000, 30000, size=int(segment_lengths.sum())).astype(np.int32)
    starts = np.zeros(len(tokens), dtype=bool)
    position = 0
    while position < len(tokens):
        starts[position] = True
        position += int(rng.integers(1, 4))
    segment_offsets = np.concatenate([[0], np.cumsum(segment_lengths)]).tolist()
    cuts = sorted(set(rng.integers(1, 300, size=20).tolist()))
    return TokenizedDocuments(tokens, segment_offsets, [0, *cuts, 300], starts)


SPECIAL = SpecialIds(cls=101, sep=102, mask=103, pad=0, unk=100, vocab_size=30522,
                     starts_word=np.ones(30522, dtype=bool))


def run(params: ElectraParams, docs: TokenizedDocuments) -> dict:
    batches = list(ElectraObjective(params, SPECIAL).batches(docs, "task", 0))
    return {name: np.concatenate([b.columns[name] for b in batches]) for name in batches[0].columns}


@pytest.mark.parametrize("seed,length", [(1, 128), (2, 24), (3, 512)])
def test_word_starts_mark_the_documents_words_and_change_nothing_else(seed, length):
    docs = documents(seed)
    plain = run(ElectraParams(max_seq_length=length), docs)
    marked = run(ElectraParams(max_seq_length=length, word_starts=True), docs)
    assert set(plain) == {"input_ids", "input_mask", "segment_ids"}
    assert set(marked) == set(plain) | {"special_tokens_mask", "word_starts"}
    for name in plain:
        assert plain[name].tobytes() == marked[name].tobytes()

    ids, mask, special, starts = (marked[n] for n in ("input_ids", "input_mask", "special_tokens_mask",
                                                      "word_starts"))
    is_special = (ids == SPECIAL.cls) | (ids == SPECIAL.sep) | (mask == 0)
    assert (special.astype(bool) == is_special).all()  # random tokens are >= 1000: no collision
    assert not starts[is_special].any()
    # Every word start of the task's tokens stays one; a token that continues a word is marked only where
    # a sentence piece opens (a cut cannot leave half a word at a piece's start: pieces begin sentences).
    token_starts = {}
    for row_ids, row_starts, row_text in zip(ids, starts, ~is_special):
        for token, start in zip(row_ids[row_text], row_starts[row_text]):
            token_starts.setdefault(int(token), set()).add(bool(start))
    opens = {int(docs.tokens[o]) for o in docs.segment_offsets[:-1]}
    for token, seen in token_starts.items():
        expected = {bool(docs.word_starts[i]) for i in np.flatnonzero(docs.tokens == token)}
        assert seen <= expected | ({True} if token in opens else set())
    assert starts.sum() < (~is_special).sum()  # words of several tokens are there to mask whole


def test_word_starts_off_is_not_recorded_in_the_job():
    """An opt-in switch left off is not part of the job, so ELECTRA jobs keep the ids they had."""
    assert ElectraObjective.component(ElectraParams()) == Component(
        "electra", {"max_seq_length": 128, "blanks_separate_docs": True, "random_seed": 12345})
    assert ElectraObjective.component(ElectraParams(word_starts=True)).params["word_starts"] is True
