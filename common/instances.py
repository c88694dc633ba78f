"""BERT training instances with google-research/bert's semantics, in bulk.

create_pretraining_data.py builds every instance token by token in Python.
Here the work is split in two:

* :func:`plan_instances` runs BERT's control flow per document (target
  length, A/B split, random next with its random document and the unused
  segments put back, truncate_seq_pair) but only over *segment* offsets:
  every instance's A and B are contiguous token ranges of the task's flat
  token array, so a plan is four integers and a label.
* :func:`build_batch` turns a whole plan into padded arrays and masks it with
  numpy: candidate selection (plain or whole-word), the 80/10/10 rule and the
  sorted masked positions, for all instances at once.

Random choices are drawn from generators seeded by (seed, task, dupe pass)
only, so output does not depend on which worker ran a task or when.  The
draws follow BERT's distributions exactly; where BERT flips one coin per
removed token while truncating, we draw the equivalent binomial count.
"""

from __future__ import annotations

import bisect
import hashlib
import random
from dataclasses import dataclass

import numpy as np

from common.config import BertParams


@dataclass
class TokenizedDocuments:
    """A task's documents as one flat token array.

    Segment ``s`` is ``tokens[segment_offsets[s]:segment_offsets[s + 1]]``;
    document ``d`` is segments ``document_offsets[d]`` to
    ``document_offsets[d + 1]``.  Every document has at least one segment and
    every segment at least one token.
    """

    tokens: np.ndarray  # int32
    segment_offsets: list[int]
    document_offsets: list[int]

    @property
    def num_documents(self) -> int:
        return len(self.document_offsets) - 1

    @classmethod
    def from_lists(cls, documents: list[list[list[int]]]) -> "TokenizedDocuments":
        """From nested token lists (documents of segments); for tests and tools."""
        tokens: list[int] = []
        segment_offsets = [0]
        document_offsets = [0]
        for document in documents:
            for segment in document:
                if segment:
                    tokens.extend(segment)
                    segment_offsets.append(len(tokens))
            if len(segment_offsets) - 1 > document_offsets[-1]:
                document_offsets.append(len(segment_offsets) - 1)
        return cls(np.asarray(tokens, dtype=np.int32), segment_offsets, document_offsets)

    @classmethod
    def from_segments(cls, tokens: np.ndarray, segment_lengths: np.ndarray,
                      segments_per_document: np.ndarray) -> tuple["TokenizedDocuments", int]:
        """From a tokenizer's flat output: drops segments without a token and
        then documents without a segment; returns how many documents were dropped."""
        segment_lengths = np.asarray(segment_lengths, dtype=np.int64)
        segments_per_document = np.asarray(segments_per_document, dtype=np.int64)
        document_of = np.repeat(np.arange(len(segments_per_document)), segments_per_document)
        kept = segment_lengths > 0
        kept_per_document = np.bincount(document_of[kept], minlength=len(segments_per_document))
        usable = kept_per_document[kept_per_document > 0]
        segment_offsets = np.concatenate([[0], np.cumsum(segment_lengths[kept])])
        document_offsets = np.concatenate([[0], np.cumsum(usable)])
        documents = cls(tokens, segment_offsets.tolist(), document_offsets.tolist())
        return documents, len(segments_per_document) - len(usable)


@dataclass
class InstancePlan:
    """Instances as token ranges: A is ``tokens[a_start:a_start + a_length]``."""

    a_start: np.ndarray
    a_length: np.ndarray
    b_start: np.ndarray
    b_length: np.ndarray
    is_random_next: np.ndarray  # bool

    def __len__(self) -> int:
        return len(self.a_start)

    def take(self, order: np.ndarray) -> "InstancePlan":
        return InstancePlan(self.a_start[order], self.a_length[order], self.b_start[order],
                            self.b_length[order], self.is_random_next[order])


def derive_seed(random_seed: int, task_key: str, dupe_index: int, purpose: str) -> int:
    """A 64-bit seed from (seed, task, dupe pass, purpose) only."""
    text = f"{random_seed}\x00{task_key}\x00{dupe_index}\x00{purpose}".encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "little")


def truncation_counts(a_length: int, b_length: int, max_num_tokens: int) -> tuple[int, int]:
    """How many tokens truncate_seq_pair removes from A and from B.

    BERT removes one token at a time from the longer side (B on ties); the
    counts depend only on the lengths, so they have a closed form.
    """
    excess = a_length + b_length - max_num_tokens
    if excess <= 0:
        return 0, 0
    from_a = from_b = 0
    if a_length > b_length:
        from_a = min(excess, a_length - b_length)
    elif b_length > a_length:
        from_b = min(excess, b_length - a_length)
    excess -= from_a + from_b
    # Equal lengths now: B, A, B, A, ...
    from_b += (excess + 1) // 2
    from_a += excess // 2
    return from_a, from_b


def _heads(rng: random.Random, flips: int) -> int:
    """Binomial(flips, 1/2): how many of BERT's per-token coin flips say
    'front' (``del trunc_tokens[0]``)."""
    return rng.getrandbits(flips).bit_count() if flips else 0


def plan_instances(documents: TokenizedDocuments, params: BertParams, rng: random.Random) -> InstancePlan:
    """One dupe pass of create_instances_from_document over every document."""
    segment_offsets = documents.segment_offsets
    document_offsets = documents.document_offsets
    num_documents = documents.num_documents
    max_num_tokens = params.max_seq_length - 3
    short_seq_prob = params.short_seq_prob

    a_starts: list[int] = []
    a_lengths: list[int] = []
    b_starts: list[int] = []
    b_lengths: list[int] = []
    random_next: list[bool] = []

    for document_index in range(num_documents):
        first_segment = document_offsets[document_index]
        end_segment = document_offsets[document_index + 1]

        # BERT picks the target length once per document.
        target_seq_length = max_num_tokens
        if rng.random() < short_seq_prob:
            target_seq_length = rng.randint(2, max_num_tokens)

        chunk_start = first_segment
        while chunk_start < end_segment:
            # BERT adds segments until the chunk reaches the target length or
            # the document ends: the chunk's last segment, by bisection.
            i = bisect.bisect_left(segment_offsets, segment_offsets[chunk_start] + target_seq_length,
                                   chunk_start + 1, end_segment) - 1
            chunk_size = i - chunk_start + 1
            a_end = 1 if chunk_size < 2 else rng.randint(1, chunk_size - 1)
            a_start = segment_offsets[chunk_start]
            a_length = segment_offsets[chunk_start + a_end] - a_start

            if chunk_size == 1 or rng.random() < 0.5:
                is_random = True
                target_b_length = target_seq_length - a_length
                for _ in range(10):
                    random_document = rng.randint(0, num_documents - 1)
                    if random_document != document_index:
                        break
                random_first = document_offsets[random_document]
                random_end = document_offsets[random_document + 1]
                random_start = random_first + rng.randint(0, random_end - random_first - 1)
                b_start = segment_offsets[random_start]
                # Segments from random_start until B reaches its target
                # (at least one segment, at most to the document's end).
                last = bisect.bisect_left(segment_offsets, b_start + target_b_length,
                                          random_start + 1, random_end)
                b_length = segment_offsets[last] - b_start
                # Put the unused segments back.
                i -= chunk_size - a_end
            else:
                is_random = False
                b_start = segment_offsets[chunk_start + a_end]
                b_length = segment_offsets[i + 1] - b_start

            from_a, from_b = truncation_counts(a_length, b_length, max_num_tokens)
            if from_a:
                a_start += _heads(rng, from_a)
                a_length -= from_a
            if from_b:
                b_start += _heads(rng, from_b)
                b_length -= from_b

            a_starts.append(a_start)
            a_lengths.append(a_length)
            b_starts.append(b_start)
            b_lengths.append(b_length)
            random_next.append(is_random)
            chunk_start = i + 1

    return InstancePlan(
        np.asarray(a_starts, dtype=np.int64), np.asarray(a_lengths, dtype=np.int64),
        np.asarray(b_starts, dtype=np.int64), np.asarray(b_lengths, dtype=np.int64),
        np.asarray(random_next, dtype=bool))


@dataclass
class SpecialIds:
    cls: int
    sep: int
    mask: int
    pad: int
    vocab_size: int
    is_continuation: np.ndarray  # bool per id, for whole-word masking


@dataclass
class InstanceBatch:
    """run_pretraining.py's features for a batch of instances, zero-padded."""

    input_ids: np.ndarray  # (n, max_seq_length) int32 (written as int64 features)
    input_mask: np.ndarray
    segment_ids: np.ndarray
    masked_lm_positions: np.ndarray  # (n, max_predictions_per_seq) int32
    masked_lm_ids: np.ndarray
    masked_lm_weights: np.ndarray  # float32
    next_sentence_labels: np.ndarray  # (n, 1) int32

    def __len__(self) -> int:
        return len(self.input_ids)

    def features(self) -> dict[str, np.ndarray]:
        return {
            "input_ids": self.input_ids,
            "input_mask": self.input_mask,
            "segment_ids": self.segment_ids,
            "masked_lm_positions": self.masked_lm_positions,
            "masked_lm_ids": self.masked_lm_ids,
            "masked_lm_weights": self.masked_lm_weights,
            "next_sentence_labels": self.next_sentence_labels,
        }


def num_to_predict(sequence_lengths: np.ndarray, params: BertParams) -> np.ndarray:
    """min(max_predictions_per_seq, max(1, int(round(len(tokens) * masked_lm_prob))))
    with Python 3's round-half-even, as BERT runs it."""
    rounded = np.round(sequence_lengths.astype(np.float64) * params.masked_lm_prob).astype(np.int64)
    return np.minimum(params.max_predictions_per_seq, np.maximum(1, rounded))


def build_batch(tokens: np.ndarray, plan: InstancePlan, params: BertParams, special: SpecialIds,
                rng: np.random.Generator) -> InstanceBatch:
    """Lay out ``[CLS] A [SEP] B [SEP]`` for every planned instance and mask them."""
    n = len(plan)
    positions = np.arange(params.max_seq_length, dtype=np.int32)
    rows_index = np.arange(n)
    # Per-row scalars as (n, 1) columns, broadcast against the positions.
    a_length = plan.a_length.astype(np.int32)[:, None]
    b_first = a_length + 2
    sequence_length = b_first + plan.b_length.astype(np.int32)[:, None] + 1

    in_a = (positions >= 1) & (positions <= a_length)
    in_b = (positions >= b_first) & (positions < sequence_length - 1)
    candidates = in_a | in_b
    # Position p of a row reads token (offset + p): A's offset before B, B's from there on.
    offset = np.where(positions < b_first, plan.a_start[:, None] - 1, plan.b_start[:, None] - b_first)
    source = np.where(candidates, offset + positions, 0)
    original = np.where(candidates, tokens[source] if len(tokens) else 0, special.pad).astype(np.int32)
    original[:, 0] = special.cls
    original[rows_index, a_length[:, 0] + 1] = special.sep
    original[rows_index, sequence_length[:, 0] - 1] = special.sep

    input_mask = (positions < sequence_length).astype(np.int32)
    segment_ids = ((positions >= b_first) & (positions < sequence_length)).astype(np.int32)

    budget = num_to_predict(sequence_length[:, 0], params)
    if params.do_whole_word_mask:
        selected = _select_whole_words(original, candidates, budget, special, rng)
    else:
        selected = _select_tokens(candidates, budget, rng)

    # Selected positions in increasing order (BERT sorts by index): a
    # position's rank among its row's selected ones is its column.
    rows, columns = np.nonzero(selected)
    per_row = np.bincount(rows, minlength=n)
    rank = np.arange(len(rows)) - np.repeat(np.cumsum(per_row) - per_row, per_row)
    labels = original[rows, columns]

    # 80% [MASK], 10% the original token, 10% a random vocabulary word.
    count = len(rows)
    replace_draw = rng.random(count)
    keep_draw = rng.random(count)
    random_words = rng.integers(0, special.vocab_size, size=count)
    input_ids = original.copy()
    input_ids[rows, columns] = np.where(replace_draw < 0.8, special.mask,
                                        np.where(keep_draw < 0.5, labels, random_words))

    predictions = params.max_predictions_per_seq
    masked_lm_positions = np.zeros((n, predictions), dtype=np.int32)
    masked_lm_ids = np.zeros((n, predictions), dtype=np.int32)
    masked_lm_weights = np.zeros((n, predictions), dtype=np.float32)
    masked_lm_positions[rows, rank] = columns
    masked_lm_ids[rows, rank] = labels
    masked_lm_weights[rows, rank] = 1.0

    return InstanceBatch(
        input_ids=input_ids,
        input_mask=input_mask,
        segment_ids=segment_ids,
        masked_lm_positions=masked_lm_positions,
        masked_lm_ids=masked_lm_ids,
        masked_lm_weights=masked_lm_weights,
        next_sentence_labels=plan.is_random_next.astype(np.int32)[:, None],
    )


def _select_tokens(candidates: np.ndarray, budget: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A uniformly random subset of ``budget`` candidates per row (or all of
    them if fewer): BERT's shuffle-then-take-the-first, drawn by sequential
    selection sampling (Knuth's algorithm S), one numpy step per column."""
    n, length = candidates.shape
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


def _select_whole_words(original: np.ndarray, candidates: np.ndarray, budget: np.ndarray,
                        special: SpecialIds, rng: np.random.Generator) -> np.ndarray:
    """BERT's whole-word selection: shuffle the words, take each one that
    still fits in the budget, skip the ones that do not."""
    n, length = candidates.shape
    continuation = special.is_continuation[np.clip(original, 0, len(special.is_continuation) - 1)]
    # A candidate starts a new word unless it is a '##' piece; the first
    # candidate always starts one.  As in BERT, a '##' piece opening B joins
    # the last word of A ([SEP] is not a candidate).
    starts_word = candidates & (~continuation)
    starts_word[:, 1] = candidates[:, 1]
    word_of = np.cumsum(starts_word, axis=1) - 1  # word index per position
    word_of = np.where(candidates, word_of, -1)
    word_count = starts_word.sum(axis=1)

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
