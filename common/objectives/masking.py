"""Masked-LM masking in bulk, shared by every objective that masks.

google-research/bert's rule: of a sequence's candidate positions (not
[CLS]/[SEP]/padding), ``num_to_predict`` are chosen uniformly (or whole
words at a time), then each chosen one becomes [MASK] with probability 0.8,
stays itself with 0.1 and becomes a random vocabulary id with 0.1.  The
positions are reported in increasing order with their original ids.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from common import kernels


def num_to_predict(sequence_lengths: np.ndarray, masked_lm_prob: float, max_predictions: int) -> np.ndarray:
    """min(max_predictions_per_seq, max(1, int(round(len(tokens) * masked_lm_prob))))
    with Python 3's round-half-even, as BERT runs it."""
    rounded = np.round(sequence_lengths.astype(np.float64) * masked_lm_prob).astype(np.int64)
    return np.minimum(max_predictions, np.maximum(1, rounded))


def select_tokens(candidates: np.ndarray, budget: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A uniformly random subset of ``budget`` candidates per row (or all of
    them if fewer): BERT's shuffle-then-take-the-first, drawn by sequential
    selection sampling (Knuth's algorithm S), one numpy step per column."""
    n, length = candidates.shape
    kernel = kernels.compiled
    if kernel is not None and candidates.dtype == bool:
        draws = rng.random((n, length))
        selected = np.empty((n, length), dtype=bool)
        kernel.select_tokens(np.require(candidates, bool, "C"), np.require(budget, np.int64, "CA"), draws,
                             n, length, selected)
        return selected
    need = budget.astype(np.int64).copy()
    remaining = candidates.sum(axis=1).astype(np.int64)
    draws = rng.random((n, length))
    selected = np.zeros((n, length), dtype=bool)
    for column in range(length):
        candidate = candidates[:, column]
        take = candidate & (draws[:, column] * remaining < need)
        selected[:, column] = take
        need -= take
        remaining -= candidate
    return selected


def word_index(candidates: np.ndarray, starts_word: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each candidate position's word (0, 1, ... per row; -1 off candidates)
    and each row's word count.  ``starts_word`` says which candidates begin a
    word; the first candidate of a row always does."""
    first = np.argmax(candidates, axis=1)
    starts = candidates & starts_word
    rows = np.arange(len(candidates))
    starts[rows, first] = candidates[rows, first]
    word_of = np.where(candidates, np.cumsum(starts, axis=1) - 1, -1)
    return word_of, starts.sum(axis=1)


def select_whole_words(candidates: np.ndarray, starts_word: np.ndarray, budget: np.ndarray,
                       rng: np.random.Generator) -> np.ndarray:
    """BERT's whole-word selection: shuffle the words, take each one that
    still fits in the budget, skip the ones that do not."""
    n, length = candidates.shape
    word_of, word_count = word_index(candidates, starts_word)

    rows = np.repeat(np.arange(n), length).reshape(n, length)
    sizes = np.zeros((n, length), dtype=np.int64)
    np.add.at(sizes, (rows[candidates], word_of[candidates]), 1)

    keys = rng.random((n, length))
    keys[np.arange(length)[None, :] >= word_count[:, None]] = np.inf
    order = np.argsort(keys, axis=1, kind="stable")
    sizes_in_order = np.take_along_axis(sizes, order, axis=1)

    taken_in_order = np.zeros((n, length), dtype=bool)
    count = np.zeros(n, dtype=np.int64)
    for column in range(int(word_count.max(initial=0))):
        size = sizes_in_order[:, column]
        fits = (size > 0) & (count + size <= budget)
        taken_in_order[:, column] = fits
        count += np.where(fits, size, 0)

    taken_word = np.zeros((n, length), dtype=bool)
    np.put_along_axis(taken_word, order, taken_in_order, axis=1)
    return candidates & np.take_along_axis(taken_word, np.maximum(word_of, 0), axis=1)


@dataclass
class MaskedLM:
    """The masked inputs and run_pretraining.py's three prediction features."""

    input_ids: np.ndarray  # (n, length) int32
    masked_lm_positions: np.ndarray  # (n, max_predictions) int32
    masked_lm_ids: np.ndarray  # int32
    masked_lm_weights: np.ndarray  # float32


def apply_masks(original: np.ndarray, selected: np.ndarray, max_predictions: int, mask_id: int, vocab_size: int,
                rng: np.random.Generator) -> MaskedLM:
    """80% [MASK], 10% the original token, 10% a random vocabulary id, at
    the selected positions; positions listed in increasing order (BERT sorts them)."""
    if selected.shape != original.shape:
        raise ValueError(f"selected positions of shape {selected.shape} for ids of shape {original.shape}")
    n = len(original)
    kernel = kernels.compiled
    if kernel is not None and original.dtype == np.int32 and original.ndim == 2 and selected.dtype == bool:
        return _apply_masks_compiled(kernel, original, selected, max_predictions, mask_id, vocab_size, rng)
    # A position's rank among its row's selected ones is its column.
    rows, columns = np.nonzero(selected)
    per_row = np.bincount(rows, minlength=n)
    rank = np.arange(len(rows)) - np.repeat(np.cumsum(per_row) - per_row, per_row)
    labels = original[rows, columns]

    count = len(rows)
    replace_draw = rng.random(count)
    keep_draw = rng.random(count)
    random_words = rng.integers(0, vocab_size, size=count)
    input_ids = original.copy()
    input_ids[rows, columns] = np.where(replace_draw < 0.8, mask_id, np.where(keep_draw < 0.5, labels, random_words))

    positions = np.zeros((n, max_predictions), dtype=np.int32)
    ids = np.zeros((n, max_predictions), dtype=np.int32)
    weights = np.zeros((n, max_predictions), dtype=np.float32)
    positions[rows, rank] = columns
    ids[rows, rank] = labels
    weights[rows, rank] = 1.0
    return MaskedLM(input_ids, positions, ids, weights)


def _apply_masks_compiled(kernel, original: np.ndarray, selected: np.ndarray, max_predictions: int, mask_id: int,
                          vocab_size: int, rng: np.random.Generator) -> MaskedLM:
    """:func:`apply_masks` with the same draws, the per-position work in C (common/kernels.py)."""
    n, length = original.shape
    selected = np.require(selected, bool, "C")
    count = int(np.count_nonzero(selected))
    replace_draw = np.ascontiguousarray(rng.random(count), dtype=np.float64)
    keep_draw = np.ascontiguousarray(rng.random(count), dtype=np.float64)
    random_words = np.ascontiguousarray(rng.integers(0, vocab_size, size=count), dtype=np.int64)
    input_ids = np.array(original, dtype=np.int32, order="C")
    positions = np.zeros((n, max_predictions), dtype=np.int32)
    ids = np.zeros((n, max_predictions), dtype=np.int32)
    weights = np.zeros((n, max_predictions), dtype=np.float32)
    kernel.apply_masks(selected, replace_draw, keep_draw, random_words, n, length, max_predictions, count, mask_id,
                       input_ids, positions, ids, weights)
    return MaskedLM(input_ids, positions, ids, weights)
