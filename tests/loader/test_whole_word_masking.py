"""loader/masking.py with --whole-word-mask: every masked set is a union of the records' words, the share
of masked tokens is BERT's, 80/10/10 holds, and the draws depend on (seed, epoch, record) only."""

from __future__ import annotations

import numpy as np
import pytest

from loader.layout import Field, RecordLayout
from loader.masking import MASK_FIELDS, MaskingParams, remask, served_layout

MASK, VOCAB = 4, 30000
LENGTH = 128


def unmasked_records(n: int, seed: int) -> dict[str, np.ndarray]:
    """RoBERTa-like unmasked blocks: <s> text... </s> pad, words of 1 to 4 tokens, a separator inside."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(10, VOCAB, size=(n, LENGTH)).astype(np.int32)
    lengths = rng.integers(20, LENGTH + 1, size=n)
    positions = np.arange(LENGTH)[None, :]
    input_mask = (positions < lengths[:, None]).astype(np.int32)
    special = np.zeros((n, LENGTH), dtype=np.int8)
    special[:, 0] = 1
    special[np.arange(n), lengths - 1] = 1
    special[:, 10] = 1  # a separator between two documents of a block
    special[input_mask == 0] = 1
    starts = np.zeros((n, LENGTH), dtype=np.int8)
    for row in range(n):
        column = 1
        while column < LENGTH:
            starts[row, column] = 1
            column += int(rng.integers(1, 5))
    starts[special == 1] = 0
    slots = int(np.ceil(LENGTH * 0.15))
    return {"input_ids": ids, "input_mask": input_mask, "special_tokens_mask": special, "word_starts": starts,
            "masked_lm_positions": np.zeros((n, slots), np.int32), "masked_lm_ids": np.zeros((n, slots), np.int32),
            "masked_lm_weights": np.zeros((n, slots), np.float32)}


def words_of(features, row) -> list[set[int]]:
    maskable = (features["input_mask"][row] == 1) & (features["special_tokens_mask"][row] == 0)
    words, current = [], None
    for column in range(LENGTH):
        if not maskable[column]:
            current = None
            continue
        if current is None or features["word_starts"][row, column]:
            current = set()
            words.append(current)
        current.add(column)
    return words


PARAMS = MaskingParams(MASK, VOCAB, 0.15, None, whole_word=True)


def test_masked_sets_are_unions_of_whole_words_at_berts_share_and_80_10_10():
    features = unmasked_records(2000, 1)
    out = remask(features, np.arange(2000), seed=7, epoch=0, params=PARAMS)
    masked_total = tokens_total = multi = 0
    kinds = {"mask": 0, "same": 0, "random": 0}
    for row in range(2000):
        weights = out["masked_lm_weights"][row] > 0
        positions = set(out["masked_lm_positions"][row][weights].tolist())
        words = words_of(features, row)
        assert positions == set().union(*(w for w in words if w & positions))  # whole words only
        multi += sum(1 for w in words if w <= positions and len(w) > 1)
        text = (features["input_mask"][row] == 1).sum()
        budget = min(out["masked_lm_positions"].shape[1], max(1, int(round(text * 0.15))))
        assert len(positions) <= budget
        masked_total += len(positions)
        tokens_total += budget
        original = features["input_ids"][row]
        for position, label in zip(out["masked_lm_positions"][row][weights], out["masked_lm_ids"][row][weights]):
            assert label == original[position]
            now = out["input_ids"][row, position]
            kinds["mask" if now == MASK else "same" if now == label else "random"] += 1
        unmasked = sorted(set(range(LENGTH)) - positions)
        assert (out["input_ids"][row, unmasked] == original[unmasked]).all()
    assert multi > 1000
    assert masked_total / tokens_total > 0.95  # words that do not fit are skipped, shorter ones fill in
    total = sum(kinds.values())
    assert abs(kinds["mask"] / total - 0.8) < 0.02
    assert abs(kinds["same"] / total - 0.1) < 0.015 and abs(kinds["random"] / total - 0.1) < 0.015


def test_draws_depend_on_seed_epoch_and_record_only():
    features = unmasked_records(64, 2)
    ids = np.arange(1000, 1064)
    whole = remask(features, ids, seed=3, epoch=1, params=PARAMS)
    halves = [remask({k: v[s] for k, v in features.items()}, ids[s], seed=3, epoch=1, params=PARAMS)
              for s in (slice(0, 20), slice(20, 64))]
    for name in MASK_FIELDS + ("input_ids",):
        assert (np.concatenate([h[name] for h in halves]) == whole[name]).all()
    other = remask(features, ids, seed=3, epoch=2, params=PARAMS)
    assert not (other["masked_lm_positions"] == whole["masked_lm_positions"]).all()


def test_whole_word_mask_needs_word_starts():
    layout = RecordLayout((Field("input_ids", "int32", LENGTH), Field("input_mask", "int32", LENGTH),
                           Field("special_tokens_mask", "int8", LENGTH)))
    with pytest.raises(ValueError, match="--whole-word-mask needs records with word_starts"):
        served_layout(layout, PARAMS)
    served = served_layout(RecordLayout((*layout.fields, Field("word_starts", "int8", LENGTH))), PARAMS)
    assert [f.name for f in served.fields][-3:] == list(MASK_FIELDS)
