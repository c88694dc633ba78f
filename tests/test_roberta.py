"""RoBERTa / MLM-only blocks: fairseq's packing, exactly, and BERT's masking."""

from __future__ import annotations

import numpy as np
import pytest

from common.objectives import TokenizedDocuments
from common.objectives.roberta import RobertaObjective, RobertaParams
from common.params import Component
from common.tokenization import SpecialIds
from tests.test_corpus_statistics import corpus  # noqa: F401  (the shared corpus, tokenized once)

CLS, SEP, MASK, PAD = 2, 3, 4, 0
VOCAB = 1000
STARTS = np.ones(VOCAB, dtype=bool)
STARTS[500:] = False  # ids >= 500 continue a word
SPECIAL = SpecialIds(cls=CLS, sep=SEP, mask=MASK, pad=PAD, unk=1, vocab_size=VOCAB, starts_word=STARTS)


def reference_blocks(documents: list[list[list[int]]], capacity: int, cross: bool, separator: int) -> list[list[int]]:
    """fairseq's TokenBlockDataset, break_mode "complete" (cross) or
    "complete_doc", written plainly: whole sentences while they fit; a
    separator between documents when blocks cross them; a sentence longer
    than a block cut into block-sized pieces (the one change)."""
    blocks: list[list[int]] = []
    current: list[int] | None = None
    for d, document in enumerate(documents):
        if not cross and current is not None:
            blocks.append(current)
            current = None
        for s, sentence in enumerate(document):
            piece = ([separator] if cross and d > 0 and s == 0 else []) + sentence
            if current is not None and len(current) + len(piece) > capacity:
                blocks.append(current)
                current = None
            if current is None:
                if piece and piece[0] == separator and cross and d > 0 and s == 0:
                    piece = piece[1:]
                while len(piece) > capacity:
                    blocks.append(piece[:capacity])
                    piece = piece[capacity:]
                current = []
            current = current + piece
    if current is not None:
        blocks.append(current)
    return blocks


def block_contents(objective, documents) -> list[list[int]]:
    blocks = objective.blocks(documents)
    return [blocks.stream[s:s + n].tolist() for s, n in zip(blocks.start.tolist(), blocks.length.tolist())]


@pytest.mark.parametrize("pack", ["full-sentences", "doc-sentences"])
@pytest.mark.parametrize("max_seq_length", [16, 128, 512])
def test_blocks_are_fairseqs_on_the_corpus(corpus, pack, max_seq_length):  # noqa: F811
    vocabulary, documents, as_lists = corpus
    objective = RobertaObjective(RobertaParams(max_seq_length=max_seq_length, pack=pack), vocabulary.special)
    ours = block_contents(objective, documents)
    expected = reference_blocks(as_lists, max_seq_length - 2, pack == "full-sentences", vocabulary.special.sep)
    assert ours == expected
    assert all(0 < len(block) <= max_seq_length - 2 for block in ours)
    # Nothing lost, nothing repeated: the blocks are the token stream (less separators opening a block).
    flat = [t for block in ours for t in block if t != vocabulary.special.sep]
    assert flat == documents.tokens.tolist()


def test_random_documents_pack_like_the_reference():
    rng = np.random.default_rng(3)
    for _ in range(200):
        documents = [[rng.integers(5, 900, rng.integers(1, 30)).tolist() for _ in range(rng.integers(1, 6))]
                     for _ in range(rng.integers(1, 6))]
        tokenized = TokenizedDocuments.from_lists(documents)
        for pack in ("full-sentences", "doc-sentences"):
            capacity = int(rng.integers(3, 40))
            objective = RobertaObjective(RobertaParams(max_seq_length=capacity + 2, pack=pack), SPECIAL)
            assert block_contents(objective, tokenized) == reference_blocks(documents, capacity,
                                                                            pack == "full-sentences", SEP)


def _all(objective, documents):
    batches = [b for p in range(objective.passes) for b in objective.batches(documents, "task", p)]
    return {name: np.concatenate([b.columns[name] for b in batches]) for name in batches[0].columns}


def test_static_masking_follows_berts_rule(corpus):  # noqa: F811
    vocabulary, documents, _ = corpus
    special = vocabulary.special
    params = RobertaParams(max_seq_length=128, masked_lm_prob=0.3, dupe_factor=3)
    columns = _all(RobertaObjective(params, special), documents)
    weights = columns["masked_lm_weights"].astype(bool)
    lengths = columns["input_mask"].sum(axis=1)
    masked = weights.sum(axis=1)
    expected = np.minimum(params.predictions, np.maximum(1, np.round(lengths * 0.3)))
    assert (masked == expected).all()
    replaced = np.take_along_axis(columns["input_ids"], columns["masked_lm_positions"], axis=1)[weights]
    labels = columns["masked_lm_ids"][weights]
    share_mask = (replaced == special.mask).mean()
    share_same = (replaced == labels).mean()
    n = weights.sum()
    # Binomial bounds, 5 standard deviations: the rule itself, not a tuned figure.
    assert abs(share_mask - 0.8) < 5 * np.sqrt(0.16 / n)
    assert abs(share_same - (0.1 + 0.1 / special.vocab_size)) < 5 * np.sqrt(0.09 / n)
    positions = columns["masked_lm_positions"][weights]
    assert (positions >= 1).all()
    assert not np.isin(labels, [special.cls, special.sep, special.pad]).any()  # separators are never masked
    # Passes draw different masks.
    rows = len(columns["input_ids"]) // 3
    assert not np.array_equal(columns["masked_lm_positions"][:rows], columns["masked_lm_positions"][rows:2 * rows])


def test_unmasked_blocks_carry_what_train_time_masking_needs(corpus):  # noqa: F811
    vocabulary, documents, _ = corpus
    special = vocabulary.special
    columns = _all(RobertaObjective(RobertaParams(max_seq_length=64, masking="none"), special), documents)
    ids, mask = columns["input_ids"], columns["input_mask"].astype(bool)
    special_mask = columns["special_tokens_mask"].astype(bool)
    assert (ids[:, 0] == special.cls).all()
    assert (special_mask == (~mask | np.isin(ids, [special.cls, special.sep]))).all()
    assert not (ids == special.mask).any()
    starts = columns["word_starts"].astype(bool)
    assert not (starts & special_mask).any()
    # A WordPiece word starts exactly where a piece lacks '##'.
    assert (starts[~special_mask] == special.starts_word[ids[~special_mask]]).all()


def test_whole_word_masking_takes_whole_words(corpus):  # noqa: F811
    vocabulary, documents, _ = corpus
    special = vocabulary.special
    params = RobertaParams(max_seq_length=128, masked_lm_prob=0.2, do_whole_word_mask=True)
    columns = _all(RobertaObjective(params, special), documents)
    ids = columns["input_ids"].copy()
    weights = columns["masked_lm_weights"].astype(bool)
    rows, cols = np.nonzero(weights)
    original = ids.copy()
    original[rows, columns["masked_lm_positions"][rows, cols]] = columns["masked_lm_ids"][rows, cols]
    for row in range(0, len(ids), 7):
        chosen = set(columns["masked_lm_positions"][row][weights[row]].tolist())
        length = int(columns["input_mask"][row].sum())
        for position in range(1, length - 1):
            continues = not special.starts_word[original[row, position]]
            if continues and position > 1:
                assert (position in chosen) == (position - 1 in chosen), (row, position)


@pytest.mark.parametrize("given,reason", [
    ({"masking": "none", "dupe_factor": 2}, "--dupe-factor applies to --masking static"),
    ({"pack": "documents"}, "--pack must be one of"),
    ({"masked_lm_prob": 1.0}, "--masked-lm-prob must be in"),
    ({"short_seq_prob": 0.1}, "--short-seq-prob does not apply to roberta"),
])
def test_bad_settings_are_refused(given, reason):
    with pytest.raises(ValueError, match=reason):
        RobertaObjective.make_params(given)


def test_no_mask_token_is_fine_unmasked_only():
    special = SpecialIds(cls=CLS, sep=SEP, mask=None, pad=PAD, unk=1, vocab_size=VOCAB, starts_word=STARTS)
    RobertaObjective(RobertaParams(masking="none"), special)
    with pytest.raises(ValueError, match="--masking static needs the tokenizer's mask token"):
        RobertaObjective(RobertaParams(masking="static"), special)


def test_component_round_trip():
    params = RobertaObjective.make_params({"pack": "doc-sentences", "masked_lm_prob": 0.3})
    component = RobertaObjective.component(params)
    assert component == Component("roberta", {**component.params})
    assert RobertaObjective.make_params(component.params) == params
