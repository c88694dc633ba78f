"""RoBERTa's FULL-SENTENCES / DOC-SENTENCES blocks, and today's MLM-only
recipes (MosaicBERT, ModernBERT): no next-sentence prediction.

A block is ``[CLS] sentences [SEP]`` (``<s> ... </s>`` for RoBERTa's
tokenizers: the roles, not the strings) of up to max_seq_length tokens,
packed greedily with whole contiguous sentences as fairseq's
TokenBlockDataset does:

* ``--pack full-sentences`` (fairseq's break_mode "complete"): sentences run
  on across documents, with one separator token ([SEP] / ``</s>``) between
  two documents, itself a unit of the packing as fairseq's empty line is;
* ``--pack doc-sentences`` ("complete_doc"): a block never crosses a
  document's end, and no separator is written.

A block takes the next unit while it still fits (and always takes one).
fairseq lets a sentence longer than a block become one over-long block
(token_block_utils_fast.pyx; its trainer then rejects it); a fixed-length
record cannot hold that, so here such a sentence is cut into block-sized
pieces, each a unit: the full ones are blocks of their own, the last one
packs with what follows.  Nothing is dropped: the blocks' contents laid end
to end are the task's tokens (with the separators).

``--masking static`` masks each block with BERT's rule (common/objectives/masking.py:
``num_to_predict`` of the sentence tokens, 80% [MASK] / 10% kept / 10%
random; whole words with ``--do-whole-word-mask``), ``--dupe-factor`` times with different masks, and writes
run_pretraining.py's masked-LM features.  ``--masking none`` (RoBERTa's
dynamic masking) writes the unmasked blocks plus what a train-time masker
needs: ``special_tokens_mask`` (1 at [CLS], [SEP], separators and padding:
never mask) and ``word_starts`` (1 at a sentence token that begins a word:
whole-word masking).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from common.job.params import When, param
from common.objectives.base import LENGTH_HELP, Batch, Feature, Objective, check_length, derive_seed
from common.objectives.documents import TokenizedDocuments
from common.objectives.masking import apply_masks, num_to_predict, select_tokens, select_whole_words
from common.tokenization.loading import ReferenceCasing
from common.tokenization.vocabulary import SpecialIds

PACKINGS = ("full-sentences", "doc-sentences")
MASKINGS = ("none", "static")
#: Blocks laid out per numpy batch: bounds memory.
BATCH_BLOCKS = 2048


#: The parameters of masking here: with --masking none (masks drawn at train time) they do nothing.
STATIC = When(lambda params: params.masking == "static", "--masking static")


@dataclass(frozen=True)
class RobertaParams:
    """Packing and masking of MLM-only blocks; defaults are RoBERTa's (512 tokens, full sentences, dynamic masks)."""

    max_seq_length: int = param(512, "Tokens per block, [CLS] and [SEP] included.  " + LENGTH_HELP,
                                shared=True)
    pack: str = param("full-sentences", "full-sentences: blocks cross documents (a separator between two); "
                                        "doc-sentences: a block stays within one document.", choices=PACKINGS)
    masking: str = param("none", "none: unmasked blocks with special_tokens_mask and word_starts, masked at train "
                                 "time; static: masked here with BERT's 80/10/10 rule, --dupe-factor times.",
                         choices=MASKINGS)
    masked_lm_prob: float = param(0.15, "Share of a block's tokens to mask, in (0, 1) (--masking static; 0.3 for "
                                        "MosaicBERT/ModernBERT).", when=STATIC, shared=True)
    max_predictions_per_seq: int = param(0, "At most this many masked positions per block (--masking static); 0: as "
                                            "many as --masked-lm-prob asks of a full block.", when=STATIC, shared=True)
    dupe_factor: int = param(1, "Passes over each task's blocks, each with different masks (--masking static).",
                             when=STATIC, shared=True)
    random_seed: int = param(12345, "Every random choice depends on it, the task and the pass only.", when=STATIC,
                             shared=True)
    do_whole_word_mask: bool = param(False, "Mask whole words (all their pieces; Chinese words with "
                                            "--word-segmenter, as RoBERTa-wwm-ext) instead of single pieces "
                                            "(--masking static).", opt_in=True, when=STATIC, shared=True)

    def validate(self) -> None:
        if self.max_seq_length < 3:
            raise ValueError("--max-seq-length must be at least 3 ([CLS] a token [SEP])")
        check_length(self.max_seq_length)
        if self.pack not in PACKINGS:
            raise ValueError(f"--pack must be one of {', '.join(PACKINGS)} (not {self.pack!r})")
        if self.masking not in MASKINGS:
            raise ValueError(f"--masking must be one of {', '.join(MASKINGS)} (not {self.masking!r})")
        if not 0.0 < self.masked_lm_prob < 1.0:
            raise ValueError("--masked-lm-prob must be in (0, 1)")
        if self.max_predictions_per_seq < 0:
            raise ValueError("--max-predictions-per-seq must be 0 (automatic) or more")
        if self.dupe_factor < 1:
            raise ValueError("--dupe-factor must be at least 1")
        if self.masking == "none" and self.dupe_factor != 1:
            raise ValueError("--dupe-factor would repeat identical blocks with --masking none (masks are drawn at "
                             "train time); use --masking static")

    @property
    def max_predictions(self) -> int:
        """The masked-LM features' length: as given, or what a full block's budget needs."""
        if self.max_predictions_per_seq:
            return self.max_predictions_per_seq
        return int(num_to_predict(np.array([self.max_seq_length]), self.masked_lm_prob, self.max_seq_length)[0])


@dataclass
class Stream:
    """A task's tokens as the blocks read them: documents end to end, with a
    separator between two documents when blocks cross them."""

    tokens: np.ndarray  # int32
    separator: np.ndarray  # bool per token: a separator written between documents
    word_start: np.ndarray  # bool per token: begins a word (False at separators)


@dataclass
class BlockPlan:
    start: np.ndarray  # int64: offset in the stream
    length: np.ndarray  # int64: tokens between [CLS] and [SEP]

    def __len__(self) -> int:
        return len(self.start)


def make_stream(documents: TokenizedDocuments, separator_id: int | None,
                special: SpecialIds) -> tuple[Stream, list[int]]:
    """The stream (a separator before every document but the first, if
    ``separator_id`` is given) and the stream offset of every sentence
    boundary (starts and ends, sorted, from 0 to the stream's end)."""
    tokens = documents.tokens
    segment_offsets = np.asarray(documents.segment_offsets, dtype=np.int64)
    document_token_starts = segment_offsets[np.asarray(documents.document_offsets[:-1], dtype=np.int64)]
    if documents.word_starts is not None:
        word_start = documents.word_starts.astype(bool)
    else:
        word_start = special.starts_word[np.clip(tokens, 0, len(special.starts_word) - 1)] if len(tokens) else \
            np.zeros(0, dtype=bool)
    word_start = word_start.copy()
    word_start[segment_offsets[:-1]] = True  # a sentence begins a word
    if separator_id is None or documents.num_documents < 2:
        return Stream(tokens, np.zeros(len(tokens), dtype=bool), word_start), segment_offsets.tolist()
    at = document_token_starts[1:]
    stream_tokens = np.insert(tokens, at, separator_id).astype(np.int32)
    separator = np.insert(np.zeros(len(tokens), dtype=bool), at, True)
    word_start = np.insert(word_start, at, False)
    # Boundaries shift by one per separator before them; each separator adds the boundary before it.
    separators_before = np.searchsorted(at, segment_offsets, side="right")
    boundaries = np.union1d(segment_offsets + separators_before, at + np.arange(len(at)))
    return Stream(stream_tokens, separator, word_start), boundaries.tolist()


def plan_blocks(documents: TokenizedDocuments, params: RobertaParams, special: SpecialIds) -> tuple[Stream, BlockPlan]:
    """fairseq's greedy packing over units (sentences, pieces of over-long
    sentences, separators): each block ends at the last unit boundary that
    keeps it within max_seq_length - 2 tokens (and, for doc-sentences, within
    its document)."""
    capacity = params.max_seq_length - 2
    crossing = params.pack == "full-sentences"
    stream, boundaries = make_stream(documents, special.sep if crossing else None, special)
    # Cut over-long units into block-sized pieces.
    cuts = [position for start, end in zip(boundaries[:-1], boundaries[1:]) if end - start > capacity
            for position in range(start + capacity, end, capacity)]
    if cuts:
        boundaries = sorted(boundaries + cuts)
    if crossing:
        limits = [boundaries[-1]] if boundaries else []
    else:
        limits = [documents.segment_offsets[d] for d in documents.document_offsets[1:]]
    starts: list[int] = []
    lengths: list[int] = []
    position, end = 0, (boundaries[-1] if boundaries else 0)
    limit_index = 0
    while position < end:
        while limits[limit_index] <= position:
            limit_index += 1
        reach = min(position + capacity, limits[limit_index])
        stop = boundaries[bisect.bisect_right(boundaries, reach) - 1]
        starts.append(position)
        lengths.append(stop - position)
        position = stop
    return stream, BlockPlan(np.asarray(starts, dtype=np.int64), np.asarray(lengths, dtype=np.int64))


@dataclass
class BlockLayout:
    """``[CLS] block [SEP]`` rows, padded."""

    original: np.ndarray  # (n, max_seq_length) int32
    content: np.ndarray  # bool: the block's tokens (separators included)
    separator: np.ndarray  # bool: a separator between documents
    word_start: np.ndarray  # bool
    input_mask: np.ndarray  # int32
    sequence_length: np.ndarray  # (n,) int64


def lay_out_blocks(stream: Stream, plan: BlockPlan, max_seq_length: int, special: SpecialIds) -> BlockLayout:
    positions = np.arange(max_seq_length)[None, :]
    length = plan.length[:, None]
    content = (positions >= 1) & (positions <= length)
    source = np.where(content, plan.start[:, None] + positions - 1, 0)
    pad = special.pad if special.pad is not None else 0
    original = np.where(content, stream.tokens[source] if len(stream.tokens) else 0, pad).astype(np.int32)
    original[:, 0] = special.cls
    original[np.arange(len(plan)), plan.length + 1] = special.sep
    separator = content & stream.separator[source]
    opens = (positions == 1) | np.roll(separator, 1, axis=1)  # a block and a document open with a word
    word_start = content & ~separator & (stream.word_start[source] | opens)
    sequence_length = plan.length + 2
    input_mask = (positions < sequence_length[:, None]).astype(np.int32)
    return BlockLayout(original, content, separator, word_start, input_mask, sequence_length)


class RobertaObjective(Objective):
    """RoBERTa / MLM-only blocks of contiguous full sentences, no NSP."""

    name = "roberta"
    reference_casing = ReferenceCasing(lower_case=False)  # fairseq's RoBERTa keeps case
    Params = RobertaParams
    needs = ("cls", "sep")
    encodes_documents = True

    def __init__(self, params: RobertaParams, special: SpecialIds):
        super().__init__(params, special)
        if params.masking == "static" and special.mask is None:
            raise ValueError("--masking static needs the tokenizer's mask token; this tokenizer has none "
                             "(name it with --mask-token, or use --masking none)")

    @property
    def uses_word_starts(self) -> bool:
        return self.params.masking == "none" or self.params.do_whole_word_mask

    @property
    def features(self) -> list[Feature]:
        seq = self.params.max_seq_length
        common = [Feature("input_ids", "int32", seq), Feature("input_mask", "int32", seq),
                  Feature("segment_ids", "int32", seq)]
        if self.params.masking == "none":
            return common + [Feature("special_tokens_mask", "int8", seq), Feature("word_starts", "int8", seq)]
        predictions = self.params.max_predictions
        return common + [Feature("masked_lm_positions", "int32", predictions),
                         Feature("masked_lm_ids", "int32", predictions),
                         Feature("masked_lm_weights", "float32", predictions)]

    @property
    def passes(self) -> int:
        return self.params.dupe_factor

    def batches(self, documents: TokenizedDocuments, task_key: str, pass_index: int) -> Iterator[Batch]:
        params = self.params
        stream, plan = plan_blocks(documents, params, self.special)
        rng = np.random.default_rng(derive_seed(params.random_seed, task_key, pass_index, "mask"))
        for first in range(0, len(plan), BATCH_BLOCKS):
            part = BlockPlan(plan.start[first:first + BATCH_BLOCKS], plan.length[first:first + BATCH_BLOCKS])
            layout = lay_out_blocks(stream, part, params.max_seq_length, self.special)
            columns = {"input_ids": layout.original, "input_mask": layout.input_mask,
                       "segment_ids": np.zeros_like(layout.input_mask)}
            if params.masking == "none":
                columns["special_tokens_mask"] = (~(layout.content & ~layout.separator)).astype(np.int32)
                columns["word_starts"] = layout.word_start.astype(np.int32)
            else:
                candidates = layout.content & ~layout.separator
                budget = num_to_predict(layout.sequence_length, params.masked_lm_prob, params.max_predictions)
                if params.do_whole_word_mask:
                    selected = select_whole_words(candidates, layout.word_start, budget, rng)
                else:
                    selected = select_tokens(candidates, budget, rng)
                masked = apply_masks(layout.original, selected, params.max_predictions, self.special.mask,
                                     self.special.vocab_size, rng)
                columns["input_ids"] = masked.input_ids
                columns.update(masked_lm_positions=masked.masked_lm_positions, masked_lm_ids=masked.masked_lm_ids,
                               masked_lm_weights=masked.masked_lm_weights)
            yield Batch(columns)
