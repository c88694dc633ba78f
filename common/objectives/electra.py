"""ELECTRA's pre-training examples: google-research/electra's
build_pretraining_dataset.py (its ExampleBuilder), in bulk.

The reference feeds sentences (lines) to a stateful builder one at a time:
they pile up until they reach a target length (max_seq_length, or with
probability 0.05 after each example a random length in [5, max_seq_length]),
or until a document ends (a blank line), and then become one example.  With
probability 0.1 the example has one segment; otherwise each sentence goes to
the first segment while that stays under (target - 3) // 2 tokens (or, the
first time it would not, with probability 0.5), the rest to the second; the
first segment is cut to max_seq_length - 2 tokens and the second to what is
left.  No masking and no labels: ELECTRA's pretrain_data.py reads
``input_ids``, ``input_mask`` and ``segment_ids`` and masks at train time.

Here :func:`plan_examples` runs exactly that control flow, with the same
random draws in the same order (Python's ``random.Random``), over segment
offsets only: an example is a list of token ranges per segment, so the
tokens are gathered with numpy once, for a whole batch of examples.

Task boundaries: the reference's builder lives for a whole file, and at the
end of each file it turns what is left into an example.  A task is our file:
its builder starts fresh (target max_seq_length, no sentences) and its last
example is written, as the reference does at the end of its input.  Since a
document end already closes an example, the only state a task does not
inherit is the previous example's random shorter target.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from common.job.params import param
from common.objectives.base import LENGTH_HELP, Batch, Feature, Objective, check_length, derive_seed
from common.objectives.documents import TokenizedDocuments

#: The reference's "one segment" first-segment target: larger than any example.
ONE_SEGMENT_TARGET = 100000
#: Examples laid out per numpy batch: bounds memory.
BATCH_EXAMPLES = 4096


@dataclass(frozen=True)
class ElectraParams:
    """build_pretraining_dataset.py's flags that shape examples (the
    tokenizer's own flags are the job's --vocab-file/--do-lower-case)."""

    max_seq_length: int = param(128, "Tokens per example, [CLS] and [SEP]s included.  " + LENGTH_HELP,
                                shared=True)
    blanks_separate_docs: bool = param(True, "A document's end closes the example being built (the reference's "
                                             "blank lines); off: examples run on across documents of a task.")
    random_seed: int = param(12345, "Every random choice depends on it and the task only.", shared=True)
    word_starts: bool = param(False, "ELECTRA: also write word_starts (1 at a token that begins a word: the "
                                     "tokenizer's words, and --word-segmenter's inside Han text) and "
                                     "special_tokens_mask, for whole-word masking at train time (and Parquet's "
                                     "--chinese-ref).", opt_in=True)

    def validate(self) -> None:
        if self.max_seq_length < 5:
            raise ValueError("--max-seq-length must be at least 5 (ELECTRA draws shorter targets in [5, max])")
        check_length(self.max_seq_length)


@dataclass
class ExamplePlan:
    """Examples as token ranges ("pieces"), in example order and, within an
    example, first segment then second, each in sentence order."""

    piece_example: np.ndarray  # int64: the example a piece belongs to
    piece_second: np.ndarray  # bool: the piece is in the second segment
    piece_start: np.ndarray  # int64: offset in the task's tokens
    piece_length: np.ndarray  # int64: after truncation (never 0)
    first_length: np.ndarray  # per example, after truncation
    second_length: np.ndarray

    def __len__(self) -> int:
        return len(self.first_length)


class _Builder:
    """The reference's ExampleBuilder over segment indices: collects the
    pieces of every example it creates."""

    def __init__(self, offsets: list[int], max_length: int, rng: random.Random):
        self.offsets = offsets
        self.max_length = max_length
        self.target_length = max_length
        self.rng = rng
        self.pieces: tuple[list, list, list, list] = ([], [], [], [])
        self.first_lengths: list[int] = []
        self.second_lengths: list[int] = []

    def create(self, first_segment: int, end_segment: int) -> None:
        """_create_example over segments [first_segment, end_segment)."""
        rng, offsets, max_length = self.rng, self.offsets, self.max_length
        if rng.random() < 0.1:
            first_target = ONE_SEGMENT_TARGET
        else:
            first_target = (self.target_length - 3) // 2
        first: list[int] = []
        second: list[int] = []
        first_length = second_length = 0
        for s in range(first_segment, end_segment):
            length = offsets[s + 1] - offsets[s]
            if (first_length == 0 or first_length + length < first_target
                    or (second_length == 0 and first_length < first_target and rng.random() < 0.5)):
                first.append(s)
                first_length += length
            else:
                second.append(s)
                second_length += length
        example = len(self.first_lengths)
        kept_first = self._keep(example, False, first, max_length - 2)
        kept_second = self._keep(example, True, second, max(0, max_length - kept_first - 3))
        self.first_lengths.append(kept_first)
        self.second_lengths.append(kept_second)
        if rng.random() < 0.05:
            self.target_length = rng.randint(5, max_length)
        else:
            self.target_length = max_length

    def _keep(self, example: int, second: bool, segments: list[int], budget: int) -> int:
        """Record the segments' pieces up to ``budget`` tokens (the reference's slice)."""
        examples, seconds, starts, lengths = self.pieces
        kept = 0
        for s in segments:
            if kept >= budget:
                break
            start = self.offsets[s]
            length = min(self.offsets[s + 1] - start, budget - kept)
            examples.append(example)
            seconds.append(second)
            starts.append(start)
            lengths.append(length)
            kept += length
        return kept

    def plan(self) -> ExamplePlan:
        examples, seconds, starts, lengths = self.pieces
        return ExamplePlan(np.asarray(examples, dtype=np.int64), np.asarray(seconds, dtype=bool),
                           np.asarray(starts, dtype=np.int64), np.asarray(lengths, dtype=np.int64),
                           np.asarray(self.first_lengths, dtype=np.int64),
                           np.asarray(self.second_lengths, dtype=np.int64))


def plan_examples(documents: TokenizedDocuments, params: ElectraParams, rng: random.Random) -> ExamplePlan:
    """The reference's add_line loop over a task's sentences, documents in order."""
    offsets = documents.segment_offsets
    builder = _Builder(offsets, params.max_seq_length, rng)
    if params.blanks_separate_docs:
        spans = [(documents.document_offsets[d], documents.document_offsets[d + 1])
                 for d in range(documents.num_documents)]
    else:
        spans = [(0, documents.num_segments)] if documents.num_segments else []
    for first_segment, end_segment in spans:
        start = first_segment
        while start < end_segment:
            # Sentences are added until their length reaches the target: the first
            # segment s with offsets[s + 1] - offsets[start] >= target ends the example.
            stop = bisect.bisect_left(offsets, offsets[start] + builder.target_length, start + 1, end_segment + 1)
            stop = min(stop, end_segment)  # or the document's end (its blank line) closes the example
            builder.create(start, stop)
            start = stop
    return builder.plan()


ELECTRA_FEATURES = ("input_ids", "input_mask", "segment_ids")


def lay_out_examples(tokens: np.ndarray, plan: ExamplePlan, first_example: int, end_example: int,
                     max_seq_length: int, cls_id: int, sep_id: int, word_starts: np.ndarray | None = None) -> Batch:
    """``[CLS] first [SEP]`` or ``[CLS] first [SEP] second [SEP]``, zero-padded
    (the reference pads with 0, whatever the tokenizer's padding token),
    for examples [first_example, end_example).  With ``word_starts`` (one
    bool per token of the task), also where words begin, and which positions
    are special (or padding)."""
    n = end_example - first_example
    lo, hi = np.searchsorted(plan.piece_example, [first_example, end_example])
    rows = plan.piece_example[lo:hi] - first_example
    lengths = plan.piece_length[lo:hi]
    second = plan.piece_second[lo:hi]
    ends = np.cumsum(lengths)
    before = ends - lengths  # tokens of the batch's earlier pieces
    example_begins = np.searchsorted(rows, np.arange(n))  # each example's first piece (it always has one)
    within_example = before - before[example_begins][rows]
    # Position of each piece's first token: after [CLS], and after the first segment's [SEP] for the second.
    piece_position = 1 + within_example + second
    piece_of_token = np.repeat(np.arange(hi - lo), lengths)
    within_piece = np.arange(int(ends[-1]) if len(ends) else 0) - before[piece_of_token]
    input_ids = np.zeros((n, max_seq_length), dtype=np.int32)
    token_rows, token_columns = rows[piece_of_token], piece_position[piece_of_token] + within_piece
    source = plan.piece_start[lo:hi][piece_of_token] + within_piece
    input_ids[token_rows, token_columns] = tokens[source]

    first_length = plan.first_length[first_example:end_example]
    second_length = plan.second_length[first_example:end_example]
    sequence_length = first_length + 2 + np.where(second_length > 0, second_length + 1, 0)
    index = np.arange(n)
    input_ids[:, 0] = cls_id
    input_ids[index, first_length + 1] = sep_id
    has_second = second_length > 0
    input_ids[index[has_second], sequence_length[has_second] - 1] = sep_id
    positions = np.arange(max_seq_length)[None, :]
    input_mask = (positions < sequence_length[:, None]).astype(np.int32)
    segment_ids = ((positions >= (first_length + 2)[:, None]) & (positions < sequence_length[:, None])).astype(np.int32)
    columns = {"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids}
    if word_starts is not None:
        # Every piece opens a sentence, and so a word (a sentence cut short keeps its first words whole).
        starts = np.zeros((n, max_seq_length), dtype=np.int8)
        starts[token_rows, token_columns] = word_starts[source] | (within_piece == 0)
        text = np.zeros((n, max_seq_length), dtype=bool)
        text[token_rows, token_columns] = True
        columns["special_tokens_mask"] = (~text).astype(np.int8)
        columns["word_starts"] = starts
    return Batch(columns)


class ElectraObjective(Objective):
    """google-research/electra's build_pretraining_dataset.py: packed,
    unmasked examples of one or two segments, read by ELECTRA's
    pretrain_data.py (which masks at train time)."""

    name = "electra"
    Params = ElectraParams
    needs = ("cls", "sep")
    segment_unit = "line"  # the reference adds its input's lines as they are
    encodes_documents = True

    @property
    def uses_word_starts(self) -> bool:
        return self.params.word_starts

    @property
    def features(self) -> list[Feature]:
        seq = self.params.max_seq_length
        features = [Feature(name, "int32", seq) for name in ELECTRA_FEATURES]
        if self.params.word_starts:
            features += [Feature("special_tokens_mask", "int8", seq), Feature("word_starts", "int8", seq)]
        return features

    def batches(self, documents: TokenizedDocuments, task_key: str, pass_index: int) -> Iterator[Batch]:
        params = self.params
        plan = plan_examples(documents, params, random.Random(derive_seed(params.random_seed, task_key, pass_index,
                                                                          "examples")))
        for start in range(0, len(plan), BATCH_EXAMPLES):
            yield lay_out_examples(documents.tokens, plan, start, min(start + BATCH_EXAMPLES, len(plan)),
                                   params.max_seq_length, self.special.cls, self.special.sep,
                                   _word_starts(documents) if params.word_starts else None)


def _word_starts(documents: TokenizedDocuments) -> np.ndarray:
    """One bool per token: the tokenizer's (and word segmenter's) word starts; every token without them."""
    if documents.word_starts is None:
        return np.ones(len(documents.tokens), dtype=bool)
    return documents.word_starts.astype(bool)
