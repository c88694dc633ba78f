"""A task's tokenized documents: what every objective starts from."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np


@dataclass
class TokenizedDocuments:
    """A task's documents as one flat token array.

    Segment ``s`` is ``tokens[segment_offsets[s]:segment_offsets[s + 1]]``;
    document ``d`` is segments ``document_offsets[d]`` to
    ``document_offsets[d + 1]``.  Every document has at least one segment and
    every segment at least one token.

    ``word_starts`` (bool per token, or None) says which tokens begin a word
    when the tokenizer's per-id table is not enough (byte-level BPE,
    SentencePiece, pre-tokenizer words: common/tokenization/word_boundaries.py);
    None for WordPiece, whose ``SpecialIds.starts_word`` is exact.
    """

    tokens: np.ndarray  # int32
    segment_offsets: list[int]
    document_offsets: list[int]
    word_starts: np.ndarray | None = None

    @cached_property
    def offset_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """``segment_offsets`` and ``document_offsets`` as int64 arrays, made once for every pass."""
        return (np.asarray(self.segment_offsets, dtype=np.int64), np.asarray(self.document_offsets, dtype=np.int64))

    @property
    def num_documents(self) -> int:
        return len(self.document_offsets) - 1

    @property
    def num_segments(self) -> int:
        return len(self.segment_offsets) - 1

    @classmethod
    def from_lists(cls, documents: list[list[list[int]]]) -> TokenizedDocuments:
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
    def from_segments(cls, tokens: np.ndarray, segment_lengths: np.ndarray, segments_per_document: np.ndarray,
                      word_starts: np.ndarray | None = None) -> tuple[TokenizedDocuments, int]:
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
        documents = cls(tokens, segment_offsets.tolist(), document_offsets.tolist(), word_starts)
        return documents, len(segments_per_document) - len(usable)
