"""ALBERT's instances: google-research/albert's create_pretraining_data.py.

What differs from BERT (common/objectives/bert.py, whose planning and layout
this reuses):

* sentence-order prediction: B is the rest of A's chunk, and half the time A
  and B are swapped and labelled 1 (``next_sentence_labels`` keeps its name,
  as in the reference).  A chunk of one segment still takes a random next
  segment from another document, labelled 1, as the reference does.
  ``--random-next-sentence`` restores BERT's next-sentence rule.
* n-gram masking: the candidates (words, with ``--do-whole-word-mask``, on by
  default as in the reference; else single pieces) are visited in random
  order, each proposing an n-gram of 1..``--ngram`` candidates from it with
  probability proportional to 1/n (``--favor-shorter-ngram``, on by default;
  off: proportional to 1/(ngram+1-n)), shortened while it would pass the
  prediction budget, skipped if still too long or if it overlaps a covered
  candidate.  The 80/10/10 rule is BERT's.
* the ``token_boundary`` feature: 1 on [CLS], [SEP] and every piece that
  begins a word.
* defaults: max_seq_length 512, dupe_factor 40, whole-word masking on.

Word starts come from the tokenizer (common/tokenization/word_boundaries.py:
``##``, ``▁``, ``Ġ`` or pre-tokenizer words); the reference's SentencePiece
rule also treats every punctuation piece and non-English piece as a word
start, which a per-tokenizer rule cannot reproduce exactly (docs/objectives.md).
The reference draws n from NumPy's unseeded global generator, so its own
output is not reproducible; ours is, from (seed, task, pass).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from common import kernels
from common.job.params import When, param
from common.objectives.base import LENGTH_HELP, Batch, Feature, Objective, derive_seed
from common.objectives.bert import BATCH_INSTANCES, BertParams, lay_out_pairs, plan_instances
from common.objectives.documents import TokenizedDocuments
from common.objectives.masking import apply_masks, num_to_predict, word_index
from common.tokenization.loading import ReferenceCasing


@dataclass(frozen=True)
class AlbertParams:
    """google-research/albert's create_pretraining_data.py flags, same names and defaults."""

    max_seq_length: int = param(512, "Tokens per instance, [CLS] and [SEP]s included.  " + LENGTH_HELP,
                                shared=True)
    max_predictions_per_seq: int = param(20, "At most this many masked positions per instance.", shared=True)
    masked_lm_prob: float = param(0.15, "Share of an instance's tokens to mask.", shared=True)
    short_seq_prob: float = param(0.1, "Probability of a shorter target length for a document.", shared=True)
    dupe_factor: int = param(40, "Passes over each task's documents, each with different masks.", shared=True)
    do_whole_word_mask: bool = param(True, "Mask whole words (all their pieces) instead of single pieces.", shared=True)
    ngram: int = param(3, "ALBERT: mask n-grams of up to this many words.")
    favor_shorter_ngram: bool = param(True, "ALBERT: n-gram lengths with probability proportional to 1/n.",
                                      when=When(lambda params: params.ngram > 1, "--ngram 2 or more"))
    random_next_sentence: bool = param(False, "ALBERT: BERT's random next sentence instead of sentence order.")
    random_seed: int = param(12345, "Every random choice depends on it, the task and the pass only.", shared=True)

    def validate(self) -> None:
        BertParams.validate(self)  # the same flags, the same limits
        if self.ngram < 1:
            raise ValueError("--ngram must be at least 1")

    def ngram_probabilities(self) -> np.ndarray:
        weights = 1.0 / np.arange(1, self.ngram + 1)
        if not self.favor_shorter_ngram:
            weights = weights[::-1]
        return weights / weights.sum()


def _take(covered: list[bool], cumulative: list[int], first: int, n: int, words: int, count: int, limit: int) -> int:
    """The reference's step for one candidate: the n-gram of n candidates
    from ``first`` (fewer at the end), shortened while it would pass the
    budget; skipped if still too long or if it overlaps a covered candidate.
    Returns the tokens it covered."""
    last = min(first + n, words)
    size = cumulative[last] - cumulative[first]
    while count + size > limit and last - first > 1:
        last -= 1
        size = cumulative[last] - cumulative[first]
    if count + size > limit or any(covered[first:last]):
        return 0
    covered[first:last] = [True] * (last - first)
    return size


def walk_row(order: list[int], ngrams: list[int], cumulative: list[int], words: int, limit: int,
             covered: list[bool], count: int = 0) -> int:
    """One row's walk down its order, one candidate at a time (the reference's
    loop), from ``count`` tokens already covered; returns the final count."""
    for first, n in zip(order, ngrams):
        if count >= limit:
            break
        count += _take(covered, cumulative, first, n, words, count, limit)
    return count


#: The lockstep walk hands the rows still walking back to Python once this few are left.
_LOCKSTEP_MIN_ROWS = 24


def _walk(orders: np.ndarray, lengths: np.ndarray, cumulative: np.ndarray, word_count: np.ndarray,
          budget: np.ndarray, ngram: int) -> np.ndarray:
    """Every row's walk, all rows in lockstep: step t takes each row's t-th
    candidate at once (numpy over the rows still walking).  The same steps as
    :func:`walk_row`, so the same result; the few rows that walk long after
    the others finish in Python.  Returns covered [rows, words]."""
    n_rows, length = orders.shape
    covered = np.zeros((n_rows, length + ngram), dtype=bool)  # + ngram: reads past a row's end stay False
    count = np.zeros(n_rows, dtype=np.int64)
    active = np.flatnonzero((word_count > 0) & (budget > 0))
    step = 0
    while len(active) >= _LOCKSTEP_MIN_ROWS:
        first = orders[active, step]
        room = np.minimum(lengths[active, step], word_count[active] - first)
        base = cumulative[active, first]
        used = count[active]
        limit = budget[active]
        # The longest n-gram from ``first`` of at most ``room`` words that fits the budget (0: none).
        take = np.zeros(len(active), dtype=np.int64)
        size = np.zeros(len(active), dtype=np.int64)
        for words in range(1, ngram + 1):
            within = words <= room
            size_here = cumulative[active, np.minimum(first + words, length)] - base
            fits = within & (used + size_here <= limit)
            take = np.where(fits, words, take)
            size = np.where(fits, size_here, size)
        overlap = np.zeros(len(active), dtype=bool)
        for j in range(ngram):
            overlap |= (j < take) & covered[active, first + j]
        take[overlap] = 0
        for j in range(ngram):
            hit = j < take
            covered[active[hit], first[hit] + j] = True
        count[active] = used + np.where(take > 0, size, 0)
        step += 1
        still = (count[active] < limit) & (step < word_count[active])
        active = active[still]
    for row in active.tolist():  # the stragglers, from where the lockstep left them
        words = int(word_count[row])
        covered_row = covered[row, :words].tolist()
        walk_row(orders[row, step:words].tolist(), lengths[row, step:words].tolist(), cumulative[row].tolist(),
                 words, int(budget[row]), covered_row, int(count[row]))
        covered[row, :words] = covered_row
    return covered[:, :length]


def select_ngrams(candidates: np.ndarray, starts_word: np.ndarray, budget: np.ndarray, params: AlbertParams,
                  rng: np.random.Generator) -> np.ndarray:
    """ALBERT's n-gram selection.  The draws (each row's order of candidates
    and each candidate's n) are made for the whole batch at once, then every
    row walks down its order until its budget is met (:func:`_walk`, or the
    compiled kernel with the same draws: common/kernels.py)."""
    n_rows, length = candidates.shape
    word_of, word_count = word_index(candidates, starts_word)
    thresholds = np.cumsum(params.ngram_probabilities())[:-1]
    kernel = kernels.compiled
    if kernel is not None and candidates.dtype == bool:  # the same draws, the sort and the walk in C
        keys = rng.random((n_rows, length))
        draws = rng.random((n_rows, length))
        selected = np.empty((n_rows, length), dtype=bool)
        kernel.select_ngrams(np.require(candidates, bool, "C"), np.require(word_of, np.int64, "CA"),
                             np.require(word_count, np.int64, "CA"), keys, draws,
                             np.require(thresholds, np.float64, "CA"), np.require(budget, np.int64, "CA"),
                             n_rows, length, params.ngram, selected)
        return selected
    # Pieces per word: a count of (row, word) pairs over the candidate positions.
    flat_word = (np.arange(n_rows)[:, None] * length + word_of)[candidates]
    sizes = np.bincount(flat_word, minlength=n_rows * length).reshape(n_rows, length)
    cumulative = np.concatenate([np.zeros((n_rows, 1), dtype=np.int64), np.cumsum(sizes, axis=1)], axis=1)
    keys = rng.random((n_rows, length))
    keys[np.arange(length)[None, :] >= word_count[:, None]] = np.inf
    orders = np.argsort(keys, axis=1, kind="stable")
    # n for every candidate, by inverse transform (rng.choice per call is slower for the same distribution):
    # 1 + the thresholds a uniform draw passes.
    draws = rng.random((n_rows, length))
    lengths = np.ones((n_rows, length), dtype=np.int64)
    for threshold in thresholds:
        lengths += draws >= threshold
    covered = _walk(orders, lengths, cumulative, word_count, budget.astype(np.int64), params.ngram)
    return candidates & np.take_along_axis(covered, np.maximum(word_of, 0), axis=1)


class AlbertObjective(Objective):
    """Masked LM with n-gram masking plus sentence-order prediction, read by
    google-research/albert's run_pretraining.py."""

    name = "albert"
    reference_casing = ReferenceCasing(lower_case=True, sentencepiece_strips_accents=True)  # preprocess_text
    Params = AlbertParams
    needs = ("cls", "sep", "mask", "pad")

    @property
    def uses_word_starts(self) -> bool:
        return self.params.do_whole_word_mask  # n-grams of words; else of pieces

    @property
    def features(self) -> list[Feature]:
        seq, predictions = self.params.max_seq_length, self.params.max_predictions_per_seq
        return [Feature("input_ids", "int32", seq), Feature("input_mask", "int32", seq),
                Feature("segment_ids", "int32", seq), Feature("token_boundary", "int32", seq),
                Feature("masked_lm_positions", "int32", predictions), Feature("masked_lm_ids", "int32", predictions),
                Feature("masked_lm_weights", "float32", predictions), Feature("next_sentence_labels", "int32", 1)]

    @property
    def passes(self) -> int:
        return self.params.dupe_factor

    def batches(self, documents: TokenizedDocuments, task_key: str, pass_index: int) -> Iterator[Batch]:
        params = self.params
        plan = plan_instances(documents, params, random.Random(derive_seed(params.random_seed, task_key, pass_index,
                                                                           "plan")),
                              sentence_order=not params.random_next_sentence)
        rng = np.random.default_rng(derive_seed(params.random_seed, task_key, pass_index, "mask"))
        plan = plan.take(rng.permutation(len(plan)))  # the reference shuffles its instances
        for start in range(0, len(plan), BATCH_INSTANCES):
            part = plan.take(np.arange(start, min(start + BATCH_INSTANCES, len(plan))))
            yield self._batch(documents, part, rng)

    def _batch(self, documents: TokenizedDocuments, plan, rng: np.random.Generator) -> Batch:
        params, special = self.params, self.special
        layout = lay_out_pairs(documents.tokens, plan, params.max_seq_length, special, documents.word_starts)
        if layout.word_start is not None:
            word_start = layout.word_start
        else:
            word_start = layout.candidates & special.starts_word[
                np.clip(layout.original, 0, len(special.starts_word) - 1)]
        # Without whole-word masking every piece is a candidate of its own.
        groups = word_start if params.do_whole_word_mask else layout.candidates
        budget = num_to_predict(layout.sequence_length, params.masked_lm_prob, params.max_predictions_per_seq)
        selected = select_ngrams(layout.candidates, groups, budget, params, rng)
        masked = apply_masks(layout.original, selected, params.max_predictions_per_seq, special.mask,
                             special.vocab_size, rng)
        positions = np.arange(params.max_seq_length)
        in_sequence = positions[None, :] < layout.sequence_length[:, None]
        token_boundary = (word_start | (in_sequence & ~layout.candidates)).astype(np.int32)
        return Batch({
            "input_ids": masked.input_ids,
            "input_mask": layout.input_mask,
            "segment_ids": layout.segment_ids,
            "token_boundary": token_boundary,
            "masked_lm_positions": masked.masked_lm_positions,
            "masked_lm_ids": masked.masked_lm_ids,
            "masked_lm_weights": masked.masked_lm_weights,
            "next_sentence_labels": plan.is_random_next.astype(np.int32)[:, None],
        })
