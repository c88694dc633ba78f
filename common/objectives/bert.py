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
import random
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from common import kernels
from common.job.params import param
from common.objectives.base import LENGTH_HELP, Batch, Feature, Objective, check_length, derive_seed
from common.objectives.documents import TokenizedDocuments
from common.objectives.masking import apply_masks, num_to_predict, select_tokens, select_whole_words
from common.tokenization.vocabulary import SpecialIds


@dataclass(frozen=True)
class BertParams:
    """google-research/bert's create_pretraining_data.py flags, same names and defaults."""

    max_seq_length: int = param(128, "Tokens per instance, [CLS] and [SEP]s included.  " + LENGTH_HELP,
                                shared=True)
    max_predictions_per_seq: int = param(20, "At most this many masked positions per instance.", shared=True)
    masked_lm_prob: float = param(0.15, "Share of an instance's tokens to mask.", shared=True)
    short_seq_prob: float = param(0.1, "Probability of a shorter target length for a document.", shared=True)
    dupe_factor: int = param(10, "Passes over each task's documents, each with different masks.", shared=True)
    do_whole_word_mask: bool = param(False, "Mask whole words (all their pieces) instead of single pieces.",
                                     shared=True)
    random_seed: int = param(12345, "Every random choice depends on it, the task and the pass only.", shared=True)

    def validate(self) -> None:
        """Raise ValueError with a one-line reason for settings BERT cannot use."""
        if self.max_seq_length < 5:
            raise ValueError("--max-seq-length must be at least 5 ([CLS] A [SEP] B [SEP] with A and B non-empty)")
        check_length(self.max_seq_length)
        if self.max_predictions_per_seq < 1:
            raise ValueError("--max-predictions-per-seq must be at least 1")
        if not 0.0 < self.masked_lm_prob <= 1.0:
            raise ValueError("--masked-lm-prob must be in (0, 1]")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise ValueError("--short-seq-prob must be in [0, 1]")
        if self.dupe_factor < 1:
            raise ValueError("--dupe-factor must be at least 1")


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

    def take(self, order: np.ndarray) -> InstancePlan:
        return InstancePlan(self.a_start[order], self.a_length[order], self.b_start[order],
                            self.b_length[order], self.is_random_next[order])


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


def plan_instances(documents: TokenizedDocuments, params, rng: random.Random,
                   sentence_order: bool = False) -> InstancePlan:
    """One dupe pass of create_instances_from_document over every document.

    ``sentence_order`` is ALBERT's rule (google-research/albert's script
    without ``random_next_sentence``): a chunk of one segment still takes a
    random next segment, but otherwise B follows A, swapped with A half the
    time (labelled 1), instead of coming from another document.

    With the compiled kernels (common/kernels.py) the same loop runs in C
    on a copy of ``rng``'s state, which it leaves where Python's would be."""
    kernel = kernels.compiled
    if kernel is not None and type(rng) is random.Random and _plan_kernel_agrees(kernel):
        return _plan_instances_compiled(kernel, documents, params.max_seq_length - 3, params.short_seq_prob, rng,
                                        sentence_order)
    return _plan_instances_python(documents, params.max_seq_length - 3, params.short_seq_prob, rng, sentence_order)


def _plan_instances_compiled(kernel, documents: TokenizedDocuments, max_num_tokens: int, short_seq_prob: float,
                             rng: random.Random, sentence_order: bool) -> InstancePlan:
    version, words, gauss_next = rng.getstate()
    state = np.array(words, dtype=np.int64)
    segment_offsets, document_offsets = documents.offset_arrays
    slots = documents.num_segments
    columns = [np.empty(slots, dtype=np.int64) for _ in range(4)]
    random_next = np.empty(slots, dtype=bool)
    made = kernel.plan_instances(state, np.require(segment_offsets, np.int64, "CA"),
                                 np.require(document_offsets, np.int64, "CA"), slots, documents.num_documents,
                                 max_num_tokens, short_seq_prob, sentence_order, *columns, random_next)
    rng.setstate((version, tuple(state.tolist()), gauss_next))
    a_start, a_length, b_start, b_length = (column[:made] for column in columns)
    return InstancePlan(a_start, a_length, b_start, b_length, random_next[:made])


@lru_cache(maxsize=4)
def _plan_kernel_agrees(kernel) -> bool:
    """The C plan makes the Python plan's draws on this interpreter's ``random`` (its methods are Python code
    that could change between releases): checked once per process on a sample that takes every branch
    (one-segment documents, truncation by more than 32 tokens, short targets), both rules, before it is used."""
    sample = random.Random(33)
    documents = TokenizedDocuments.from_lists([
        [[1] * sample.randint(1, 300 if d % 5 == 0 else 40) for _ in range(sample.randint(1, 12 if d % 4 else 1))]
        for d in range(40)])
    for seed in (1, 2):
        for sentence_order in (False, True):
            python_rng, compiled_rng = random.Random(seed), random.Random(seed)
            expected = _plan_instances_python(documents, 125, 0.3, python_rng, sentence_order)
            got = _plan_instances_compiled(kernel, documents, 125, 0.3, compiled_rng, sentence_order)
            if any(not np.array_equal(a, b) for a, b in zip(vars(expected).values(), vars(got).values())) or \
                    python_rng.getstate() != compiled_rng.getstate():
                return False
    return True


def _plan_instances_python(documents: TokenizedDocuments, max_num_tokens: int, short_seq_prob: float,
                           rng: random.Random, sentence_order: bool) -> InstancePlan:
    segment_offsets = documents.segment_offsets
    document_offsets = documents.document_offsets
    num_documents = documents.num_documents

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

            if chunk_size == 1 or (not sentence_order and rng.random() < 0.5):
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
                b_start = segment_offsets[chunk_start + a_end]
                b_length = segment_offsets[i + 1] - b_start
                is_random = sentence_order and rng.random() < 0.5
                if is_random:  # ALBERT: the two consecutive spans in the wrong order
                    a_start, a_length, b_start, b_length = b_start, b_length, a_start, a_length

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




#: Instances masked and encoded per numpy batch: bounds memory per pass.
BATCH_INSTANCES = 4096


@dataclass
class PairLayout:
    """``[CLS] A [SEP] B [SEP]`` for every planned instance, zero-padded: the
    unmasked ids, which positions may be masked, and the A/B segment ids."""

    original: np.ndarray  # (n, max_seq_length) int32
    candidates: np.ndarray  # bool: A's and B's tokens
    input_mask: np.ndarray  # int32
    segment_ids: np.ndarray  # int32
    sequence_length: np.ndarray  # (n,) int32
    #: Bool per position: a candidate that begins a word, from the documents'
    #: per-token word starts (None: use ``SpecialIds.starts_word`` per id).
    word_start: np.ndarray | None = None


def lay_out_pairs(tokens: np.ndarray, plan: InstancePlan, max_seq_length: int, special: SpecialIds,
                  word_starts: np.ndarray | None = None) -> PairLayout:
    kernel = kernels.compiled
    if kernel is not None and word_starts is None and tokens.dtype == np.int32:
        return _lay_out_pairs_compiled(kernel, tokens, plan, max_seq_length, special)
    positions = np.arange(max_seq_length, dtype=np.int32)
    rows_index = np.arange(len(plan))
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
    word_start = None
    if word_starts is not None:
        # A and B each open with a word (a truncated word counts as one): no word crosses [SEP].
        opens = (positions == 1) | (positions == b_first)
        word_start = candidates & ((word_starts[source] if len(word_starts) else False) | opens)
    return PairLayout(original, candidates, input_mask, segment_ids, sequence_length[:, 0], word_start)


def _lay_out_pairs_compiled(kernel, tokens: np.ndarray, plan: InstancePlan, max_seq_length: int,
                            special: SpecialIds) -> PairLayout:
    """:func:`lay_out_pairs` without word starts, in C (common/kernels.py)."""
    rows = len(plan)
    original = np.empty((rows, max_seq_length), dtype=np.int32)
    candidates = np.empty((rows, max_seq_length), dtype=bool)
    input_mask = np.empty((rows, max_seq_length), dtype=np.int32)
    segment_ids = np.empty((rows, max_seq_length), dtype=np.int32)
    sequence_length = np.empty(rows, dtype=np.int32)
    columns = [np.require(column, np.int64, "CA")
               for column in (plan.a_start, plan.a_length, plan.b_start, plan.b_length)]
    kernel.pair_layout(np.require(tokens, np.int32, "CA"), *columns, rows, max_seq_length, special.cls, special.sep,
                       special.pad, original, candidates, input_mask, segment_ids, sequence_length)
    return PairLayout(original, candidates, input_mask, segment_ids, sequence_length)


def select_masked(layout: PairLayout, masked_lm_prob: float, max_predictions: int, whole_word: bool,
                  special: SpecialIds, rng: np.random.Generator) -> np.ndarray:
    """Which positions BERT masks: ``num_to_predict`` candidates, single
    pieces or whole words.  As in BERT, a continuation piece opening B joins
    the last word of A ([SEP] is not a candidate)."""
    budget = num_to_predict(layout.sequence_length, masked_lm_prob, max_predictions)
    if whole_word:
        if layout.word_start is not None:
            return select_whole_words(layout.candidates, layout.word_start, budget, rng)
        starts_word = special.starts_word[np.clip(layout.original, 0, len(special.starts_word) - 1)]
        return select_whole_words(layout.candidates, starts_word, budget, rng)
    return select_tokens(layout.candidates, budget, rng)


BERT_FEATURES = [
    Feature("input_ids", "int32", None), Feature("input_mask", "int32", None), Feature("segment_ids", "int32", None),
    Feature("masked_lm_positions", "int32", None), Feature("masked_lm_ids", "int32", None),
    Feature("masked_lm_weights", "float32", None), Feature("next_sentence_labels", "int32", 1),
]


def build_batch(tokens: np.ndarray, plan: InstancePlan, params: BertParams, special: SpecialIds,
                rng: np.random.Generator, word_starts: np.ndarray | None = None) -> Batch:
    """run_pretraining.py's features for every planned instance, masked."""
    layout = lay_out_pairs(tokens, plan, params.max_seq_length, special, word_starts)
    selected = select_masked(layout, params.masked_lm_prob, params.max_predictions_per_seq,
                             params.do_whole_word_mask, special, rng)
    masked = apply_masks(layout.original, selected, params.max_predictions_per_seq, special.mask, special.vocab_size,
                         rng)
    return Batch({
        "input_ids": masked.input_ids,
        "input_mask": layout.input_mask,
        "segment_ids": layout.segment_ids,
        "masked_lm_positions": masked.masked_lm_positions,
        "masked_lm_ids": masked.masked_lm_ids,
        "masked_lm_weights": masked.masked_lm_weights,
        "next_sentence_labels": plan.is_random_next.astype(np.int32)[:, None],
    })


class BertObjective(Objective):
    """google-research/bert's create_pretraining_data.py: masked LM plus
    next-sentence prediction, read by its run_pretraining.py."""

    name = "bert"
    Params = BertParams
    needs = ("cls", "sep", "mask", "pad")

    @property
    def uses_word_starts(self) -> bool:
        return self.params.do_whole_word_mask

    @property
    def features(self) -> list[Feature]:
        seq, predictions = self.params.max_seq_length, self.params.max_predictions_per_seq
        lengths = {"input_ids": seq, "input_mask": seq, "segment_ids": seq, "masked_lm_positions": predictions,
                   "masked_lm_ids": predictions, "masked_lm_weights": predictions, "next_sentence_labels": 1}
        return [Feature(f.name, f.dtype, lengths[f.name]) for f in BERT_FEATURES]

    @property
    def passes(self) -> int:
        return self.params.dupe_factor

    def batches(self, documents: TokenizedDocuments, task_key: str, pass_index: int) -> Iterator[Batch]:
        params = self.params
        plan = plan_instances(documents, params, random.Random(derive_seed(params.random_seed, task_key, pass_index,
                                                                           "plan")))
        mask_rng = np.random.default_rng(derive_seed(params.random_seed, task_key, pass_index, "mask"))
        plan = plan.take(mask_rng.permutation(len(plan)))  # BERT shuffles its instances
        for start in range(0, len(plan), BATCH_INSTANCES):
            part = plan.take(np.arange(start, min(start + BATCH_INSTANCES, len(plan))))
            yield build_batch(documents.tokens, part, params, special=self.special, rng=mask_rng,
                              word_starts=documents.word_starts)
