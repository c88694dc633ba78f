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
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from common.objectives.base import Batch, Feature, Objective, derive_seed
from common.objectives.bert import BATCH_INSTANCES, BertParams, lay_out_pairs, plan_instances
from common.objectives.documents import TokenizedDocuments
from common.objectives.masking import apply_masks, num_to_predict, word_index
from common.params import param


@dataclass(frozen=True)
class AlbertParams:
    """google-research/albert's create_pretraining_data.py flags, same names and defaults."""

    max_seq_length: int = param(512, "Tokens per instance, [CLS] and [SEP]s included.")
    max_predictions_per_seq: int = param(20, "At most this many masked positions per instance.")
    masked_lm_prob: float = param(0.15, "Share of an instance's tokens to mask.")
    short_seq_prob: float = param(0.1, "Probability of a shorter target length for a document.")
    dupe_factor: int = param(40, "Passes over each task's documents, each with different masks.")
    do_whole_word_mask: bool = param(True, "Mask whole words (all their pieces) instead of single pieces.")
    ngram: int = param(3, "ALBERT: mask n-grams of up to this many words.")
    favor_shorter_ngram: bool = param(True, "ALBERT: n-gram lengths with probability proportional to 1/n.")
    random_next_sentence: bool = param(False, "ALBERT: BERT's random next sentence instead of sentence order.")
    random_seed: int = param(12345, "Every random choice depends on it, the task and the pass only.")

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


def select_ngrams(candidates: np.ndarray, starts_word: np.ndarray, budget: np.ndarray, params: AlbertParams,
                  rng: np.random.Generator) -> np.ndarray:
    """ALBERT's n-gram selection.  The draws (each row's order of candidates
    and each candidate's n) are made for the whole batch at once; only the
    walk down each row's order, which stops at the budget, is a loop."""
    n_rows, length = candidates.shape
    word_of, word_count = word_index(candidates, starts_word)
    rows = np.repeat(np.arange(n_rows), length).reshape(n_rows, length)
    sizes = np.zeros((n_rows, length), dtype=np.int64)
    np.add.at(sizes, (rows[candidates], word_of[candidates]), 1)
    cumulative = np.concatenate([np.zeros((n_rows, 1), dtype=np.int64), np.cumsum(sizes, axis=1)], axis=1)
    keys = rng.random((n_rows, length))
    keys[np.arange(length)[None, :] >= word_count[:, None]] = np.inf
    orders = np.argsort(keys, axis=1, kind="stable")
    # n for every candidate, by inverse transform (rng.choice per call is slower for the same distribution).
    thresholds = np.cumsum(params.ngram_probabilities())[:-1]
    lengths = np.searchsorted(thresholds, rng.random((n_rows, length)), side="right") + 1
    covered = np.zeros((n_rows, length), dtype=bool)
    # The walk rarely goes further down a row's order than a few times the budget: hand Python that much.
    head = min(length, 4 * int(budget.max(initial=0)) + 8)
    for row, (order, ngrams, cumulative_row, words, limit) in enumerate(zip(
            orders[:, :head].tolist(), lengths[:, :head].tolist(), cumulative.tolist(), word_count.tolist(),
            budget.tolist())):
        covered_row = [False] * words
        count = 0
        walked = 0
        for first, n in zip(order[:words], ngrams):
            walked += 1
            if count >= limit:
                break
            count += _take(covered_row, cumulative_row, first, n, words, count, limit)
        if count < limit and walked == head < words:  # the rest of a long walk
            for first, n in zip(orders[row, head:words].tolist(), lengths[row, head:words].tolist()):
                if count >= limit:
                    break
                count += _take(covered_row, cumulative_row, first, n, words, count, limit)
        covered[row, :words] = covered_row
    return candidates & np.take_along_axis(covered, np.maximum(word_of, 0), axis=1)


class AlbertObjective(Objective):
    """Masked LM with n-gram masking plus sentence-order prediction, read by
    google-research/albert's run_pretraining.py."""

    name = "albert"
    Params = AlbertParams
    needs = ("cls", "sep", "mask", "pad")

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
