"""RoBERTa's packing without next-sentence prediction, and today's MLM-only
recipes (MosaicBERT, ModernBERT: no NSP, 30% masking, long sequences).

RoBERTa (Liu et al. 2019, section 4.2) drops NSP and fills every input with
full sentences: FULL-SENTENCES packs contiguous sentences up to the length,
crossing document boundaries with an extra separator token between
documents; DOC-SENTENCES packs the same way but never crosses a document
(its last block may be short).  fairseq builds these blocks with
``TokenBlockDataset(break_mode="complete" | "complete_doc")``.

Each block is written as ``[CLS] sentences [SEP]`` (``<s> … </s>`` for a
RoBERTa tokenizer: tokens by role), zero-padded.  With ``--masking static``
it is masked with BERT's 80/10/10 rule, ``--dupe-factor`` times, and written
with run_pretraining.py's prediction features; with ``--masking none`` the
unmasked tokens are written once, with ``special_tokens_mask`` and
``word_starts`` so that a trainer (or this project's loader) masks them anew
every epoch.

Decisions where the recipes are silent: a sentence longer than a block is cut
into block-sized pieces (fairseq keeps it whole and overflows); a task's
last block ends with the task (tasks are independent, so blocks never span
two tasks); blocks are written in corpus order (trainers shuffle).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

from common.objectives.base import Batch, Feature, Objective, derive_seed
from common.objectives.documents import TokenizedDocuments
from common.objectives.masking import apply_masks, num_to_predict, select_tokens, select_whole_words
from common.params import param

#: Blocks laid out and masked per numpy batch: bounds memory per pass.
BATCH_BLOCKS = 2048
PACKINGS = ("full-sentences", "doc-sentences")
MASKINGS = ("static", "none")


@dataclass(frozen=True)
class RobertaParams:
    max_seq_length: int = param(512, "Tokens per instance, [CLS] and [SEP]s included.")
    pack: str = param("full-sentences", "full-sentences: blocks cross documents (a separator between them); "
                                        "doc-sentences: they do not.")
    masking: str = param("static", "static: masked here, --dupe-factor times; none: unmasked tokens with "
                                   "special_tokens_mask and word_starts, for masking at train time.")
    masked_lm_prob: float = param(0.15, "Share of an instance's tokens to mask.")
    max_predictions_per_seq: int = param(0, "At most this many masked positions per instance (0: as many as "
                                            "--masked-lm-prob asks of a full block).")
    dupe_factor: int = param(1, "Passes over each task's documents, each with different masks.")
    do_whole_word_mask: bool = param(False, "Mask whole words (all their pieces) instead of single pieces.")
    random_seed: int = param(12345, "Every random choice depends on it, the task and the pass only.")

    def validate(self) -> None:
        if self.max_seq_length < 3:
            raise ValueError("--max-seq-length must be at least 3 ([CLS] a token [SEP])")
        if self.pack not in PACKINGS:
            raise ValueError(f"--pack must be one of {', '.join(PACKINGS)}")
        if self.masking not in MASKINGS:
            raise ValueError(f"--masking must be one of {', '.join(MASKINGS)}")
        if not 0.0 < self.masked_lm_prob < 1.0:
            raise ValueError("--masked-lm-prob must be in (0, 1)")
        if self.max_predictions_per_seq < 0:
            raise ValueError("--max-predictions-per-seq must be 0 (automatic) or more")
        if self.dupe_factor < 1:
            raise ValueError("--dupe-factor must be at least 1")
        if self.masking == "none" and self.dupe_factor != 1:
            raise ValueError("--dupe-factor applies to --masking static: unmasked blocks would be written "
                             "identically each pass")

    @property
    def predictions(self) -> int:
        if self.max_predictions_per_seq:
            return self.max_predictions_per_seq
        return max(1, int(round(self.max_seq_length * self.masked_lm_prob)))


@dataclass
class Blocks:
    """Every block of a task as a range of ``stream``: the task's tokens with
    a separator between documents (FULL-SENTENCES) and flags for the
    separators and for the tokens that begin a word."""

    stream: np.ndarray  # int32
    is_separator: np.ndarray  # bool per stream token
    word_start: np.ndarray  # bool per stream token
    start: np.ndarray  # int64 per block
    length: np.ndarray  # int64 per block

    def __len__(self) -> int:
        return len(self.start)


def pack_blocks(documents: TokenizedDocuments, capacity: int, cross_documents: bool, separator: int,
                starts_word: np.ndarray) -> Blocks:
    """Greedy packing of whole sentences into blocks of at most ``capacity``
    tokens, as fairseq's "complete" (across documents) and "complete_doc"."""
    tokens = documents.tokens
    segment_offsets = documents.segment_offsets
    document_offsets = documents.document_offsets
    if documents.word_starts is not None:
        token_word_start = documents.word_starts.astype(bool)
    else:
        token_word_start = starts_word[np.clip(tokens, 0, len(starts_word) - 1)] if len(tokens) else \
            np.zeros(0, dtype=bool)

    # The stream: a separator before every document but the first (FULL-SENTENCES only).
    document_starts = np.asarray(segment_offsets, dtype=np.int64)[np.asarray(document_offsets[1:-1], dtype=np.int64)]
    inserted = document_starts if cross_documents else np.zeros(0, dtype=np.int64)
    stream = np.insert(tokens, inserted, separator).astype(np.int32)
    is_separator = np.zeros(len(stream), dtype=bool)
    is_separator[inserted + np.arange(len(inserted))] = True
    word_start = np.insert(token_word_start, inserted, True)

    def shifted(offset: int) -> int:  # a token offset in the stream
        return offset + int(np.searchsorted(inserted, offset, side="right")) if cross_documents else offset

    starts: list[int] = []
    lengths: list[int] = []
    block_start = block_end = None
    for d in range(documents.num_documents):
        if not cross_documents and block_start is not None:
            starts.append(block_start)
            lengths.append(block_end - block_start)
            block_start = None
        first_segment, end_segment = document_offsets[d], document_offsets[d + 1]
        for s in range(first_segment, end_segment):
            begin = segment_offsets[s]
            end = segment_offsets[s + 1]
            # In the stream the sentence of a new document carries its separator in front.
            stream_begin = shifted(begin) - (1 if cross_documents and s == first_segment and d > 0 else 0)
            stream_end = shifted(end - 1) + 1
            if block_start is not None and stream_end - block_start > capacity:
                starts.append(block_start)
                lengths.append(block_end - block_start)
                block_start = None
            if block_start is None:
                # A block never opens with the separator between documents.
                if is_separator[stream_begin]:
                    stream_begin += 1
                while stream_end - stream_begin > capacity:  # a sentence longer than a block: cut it
                    starts.append(stream_begin)
                    lengths.append(capacity)
                    stream_begin += capacity
                block_start = stream_begin
            block_end = stream_end
    if block_start is not None:
        starts.append(block_start)
        lengths.append(block_end - block_start)
    return Blocks(stream, is_separator, word_start, np.asarray(starts, dtype=np.int64),
                  np.asarray(lengths, dtype=np.int64))


class RobertaObjective(Objective):
    """MLM-only blocks of full sentences (RoBERTa, MosaicBERT, ModernBERT)."""

    name = "roberta"
    Params = RobertaParams
    needs = ("cls", "sep", "pad")
    uses_segments = False

    def __init__(self, params: RobertaParams, special):
        super().__init__(params, special)
        # Only static masking writes the mask token (the class's ``needs`` cannot know the params).
        if params.masking == "static" and special.mask is None:
            raise ValueError("--masking static needs the tokenizer's mask token (name it with --mask-token), "
                             "or use --masking none")

    @property
    def features(self) -> list[Feature]:
        seq = self.params.max_seq_length
        features = [Feature("input_ids", "int32", seq), Feature("input_mask", "int32", seq)]
        if self.params.masking == "static":
            predictions = self.params.predictions
            features += [Feature("masked_lm_positions", "int32", predictions),
                         Feature("masked_lm_ids", "int32", predictions),
                         Feature("masked_lm_weights", "float32", predictions)]
        else:
            features += [Feature("special_tokens_mask", "int8", seq), Feature("word_starts", "int8", seq)]
        return features

    @property
    def passes(self) -> int:
        return self.params.dupe_factor

    def blocks(self, documents: TokenizedDocuments) -> Blocks:
        return pack_blocks(documents, self.params.max_seq_length - 2, self.params.pack == "full-sentences",
                           self.special.sep, self.special.starts_word)

    def batches(self, documents: TokenizedDocuments, task_key: str, pass_index: int) -> Iterator[Batch]:
        params = self.params
        blocks = self.blocks(documents)
        rng = np.random.default_rng(derive_seed(params.random_seed, task_key, pass_index, "mask"))
        for first in range(0, len(blocks), BATCH_BLOCKS):
            part = slice(first, min(first + BATCH_BLOCKS, len(blocks)))
            yield self._batch(blocks, blocks.start[part], blocks.length[part], rng)

    def _batch(self, blocks: Blocks, start: np.ndarray, length: np.ndarray, rng: np.random.Generator) -> Batch:
        params, special = self.params, self.special
        positions = np.arange(params.max_seq_length, dtype=np.int64)
        rows = np.arange(len(start))
        in_block = (positions >= 1) & (positions <= length[:, None])
        source = np.where(in_block, start[:, None] + positions - 1, 0)
        original = np.where(in_block, blocks.stream[source] if len(blocks.stream) else 0, special.pad).astype(np.int32)
        original[:, 0] = special.cls
        original[rows, length + 1] = special.sep
        input_mask = (positions < (length + 2)[:, None]).astype(np.int32)
        separator = in_block & blocks.is_separator[source]
        candidates = in_block & ~separator
        word_start = candidates & blocks.word_start[source]
        columns: dict[str, np.ndarray] = {"input_ids": original, "input_mask": input_mask}
        if params.masking == "none":
            columns["special_tokens_mask"] = (~candidates).astype(np.int8)
            columns["word_starts"] = word_start.astype(np.int8)
            return Batch(columns)
        budget = num_to_predict(length + 2, params.masked_lm_prob, params.predictions)
        if params.do_whole_word_mask:
            selected = select_whole_words(candidates, word_start, budget, rng)
        else:
            selected = select_tokens(candidates, budget, rng)
        masked = apply_masks(original, selected, params.predictions, special.mask, special.vocab_size, rng)
        columns.update(input_ids=masked.input_ids, masked_lm_positions=masked.masked_lm_positions,
                       masked_lm_ids=masked.masked_lm_ids, masked_lm_weights=masked.masked_lm_weights)
        return Batch(columns)
