"""Cutting a document's paragraphs into segments for next-sentence prediction.

BERT's segments are sentences.  WikiExtractor writes one paragraph per line,
so by default paragraphs are cut into sentences with Bling Fire, a
finite-state splitter that runs at ~17 MB/s on this corpus (rule-based
pysbd was ~100x slower; see docs/design.md).  BERT's own text format already
has one sentence per line, so there lines are kept as they are.  In Chinese
and Japanese text, Bling Fire's cuts are corrected (common/segmenters/cjk_sentences.py):
closing quotes stay with their sentence, and ；and … end one too.
"""

from __future__ import annotations

import enum
import itertools

from common import kernels
from common.segmenters.cjk_sentences import UTF8_TERMINATORS, adjust_starts
from common.segmenters.sentence_offsets import byte_starts, character_starts, sentence_starts

#: Segments longer than this are cut at whitespace: a segment is useful only
#: up to max_seq_length tokens, and one giant line would otherwise make the
#: tokenizer hold every token's metadata of it at once.
MAX_SEGMENT_CHARS = 100_000


class Segmenter(str, enum.Enum):  # noqa: UP042 - str() of a member is part of logs and job records; StrEnum changes it
    AUTO = "auto"
    LINE = "line"
    BLINGFIRE = "blingfire"

    def resolve(self, default: str) -> Segmenter:
        """``auto`` becomes the objective's unit or else the reader's default (lines for formats whose lines
        are sentences)."""
        return Segmenter(default) if self is Segmenter.AUTO else self


def _bounded(segment: str) -> list[str]:
    """``segment`` in pieces of at most MAX_SEGMENT_CHARS, cut before a space
    (the space starts the next piece, as between sentences)."""
    if len(segment) <= MAX_SEGMENT_CHARS:
        return [segment]
    pieces = []
    start = 0
    while start < len(segment):
        end = min(start + MAX_SEGMENT_CHARS, len(segment))
        if end < len(segment):
            cut = segment.rfind(" ", start + 1, end)
            end = cut if cut > start else end
        pieces.append(segment[start:end])
        start = end
    return pieces


def segment_pieces(lines: list[str], segmenter: Segmenter) -> list[list[str]]:
    """A document's segments, each as its pieces of text, one per paragraph it spans.

    Each paragraph (line) is stripped.  Within a paragraph, the whitespace
    between two sentences starts the second one, so a paragraph's pieces
    concatenate to the paragraph: a tokenizer that marks a word start by the
    space before it (byte-level BPE: ``ĠWhile``) gives each sentence the
    tokens it has in the paragraph, and one that ignores spaces (WordPiece)
    is unaffected.  A sentence Bling Fire finds across a paragraph break
    (``following:`` / ``During ...``) is one segment of two pieces, each
    encoded as its own paragraph encodes it.
    """
    paragraphs = list(filter(None, map(str.strip, lines)))
    if segmenter is not Segmenter.BLINGFIRE or not paragraphs:
        return [[piece] for paragraph in paragraphs for piece in _bounded(paragraph)]
    text = "\n".join(paragraphs)
    utf8 = text.encode("utf-8")
    segments = _sentences(text, paragraphs, utf8)
    if len(text) <= MAX_SEGMENT_CHARS:
        return segments  # no segment can be longer than its document
    bounded = []
    for pieces in segments:
        if sum(map(len, pieces)) <= MAX_SEGMENT_CHARS:
            bounded.append(pieces)
        else:
            bounded.extend([chunk] for piece in pieces for chunk in _bounded(piece))
    return bounded


def document_pieces(lines: list[str]) -> list[list[str]]:
    """A document as one segment whose pieces are its stripped paragraphs (a paragraph longer than
    MAX_SEGMENT_CHARS in pieces, as :func:`_bounded` cuts it).  A document longer than that is several segments,
    each of whole paragraphs (or pieces) up to that size: the bound :func:`segment_pieces` keeps, so no text the
    tokenizer is handed at once is longer, where the tokenizer may be cut between paragraphs."""
    paragraphs = list(filter(None, map(str.strip, lines)))
    if sum(map(len, paragraphs)) <= MAX_SEGMENT_CHARS:
        return [paragraphs] if paragraphs else []
    segments: list[list[str]] = []
    size = 0
    for paragraph in paragraphs:
        for piece in _bounded(paragraph):
            if segments and size + len(piece) <= MAX_SEGMENT_CHARS:
                segments[-1].append(piece)
                size += len(piece)
            else:
                segments.append([piece])
                size = len(piece)
    return segments


def _sentences(text: str, paragraphs: list[str], utf8: bytes) -> list[list[str]]:
    """``text`` (the ``paragraphs`` joined by newlines, ``utf8`` encoded) cut at Bling Fire's sentence starts,
    moved in CJK text (closers, ；and …).  Where the kernels are built, one C call (``cut_at_bytes``) maps
    Bling Fire's byte offsets to str offsets and cuts the text, for every text without a CJK terminator, ~0.004
    CPU-s per MB less than the numpy mapping, the sort, the search for terminators and the cut it replaces
    (docs/benchmarks.md, "The worker at dupe factor 1").  A text it declines (a terminator, an offset the
    mapping would check) takes the Python path, which gives the same pieces
    (tests/common/test_kernels_equivalence.py)."""
    kernel = kernels.compiled
    found = byte_starts(utf8) if kernel is not None else None
    if kernel is not None and found is not None:
        segments = kernel.cut_at_bytes(text, paragraphs, utf8, found, UTF8_TERMINATORS)
        if segments is not None:
            return segments
        starts = character_starts(text, utf8, found)
    else:
        starts = sentence_starts(text, utf8)
    return _cut(text, paragraphs, adjust_starts(text, sorted(starts), utf8))  # CJK: closers, ；and …


def _cut(text: str, paragraphs: list[str], starts: list[int]) -> list[list[str]]:
    """:func:`_cut_in_python`, in C where the kernels are built (common/kernels.py): the Python loop's ~0.55 us a
    sentence was ~5% of a worker's CPU at dupe factor 1; the C is 2.5x less (0.0039 → 0.0016 CPU-s per MB)."""
    kernel = kernels.compiled
    if kernel is not None:
        return kernel.cut_segments(text, paragraphs, starts)
    return _cut_in_python(text, paragraphs, starts)


def _cut_in_python(text: str, paragraphs: list[str], starts: list[int]) -> list[list[str]]:
    """``text`` (the paragraphs joined by newlines) cut at the sentence ``starts``, each cut moved back
    over the whitespace before it (so the whitespace starts the next piece, and no piece is whitespace
    alone), into segments of pieces.  A start at a paragraph's first character or at the newline before
    it makes that paragraph open a sentence; otherwise its first piece goes on the segment before.

    One pass over the starts, a slice and an rstrip per sentence: the split's own cost must stay small
    beside Bling Fire's (issue #33)."""
    segments: list[list[str]] = []
    new_segment = segments.append
    paragraph_ends = list(itertools.accumulate(len(paragraph) + 1 for paragraph in paragraphs))
    count = len(paragraphs)
    index, begin, end = 0, 0, paragraph_ends[0] - 1
    first, opens = True, True  # the first paragraph always opens a sentence
    for start in itertools.chain(starts, [len(text) + 1]):  # then past every paragraph: the rest end
        while start >= end and index < count:  # the paragraph ends before this start: its last piece
            piece = text[begin:end]
            if first and not opens and segments:
                segments[-1].append(piece)
            else:
                new_segment([piece])
            index += 1
            if index < count:
                begin, end = end + 1, paragraph_ends[index] - 1
                first, opens = True, start <= begin
        if start <= begin or index == count:
            continue  # at the paragraph's first character or the newline before it (or past the text)
        piece = text[begin:start].rstrip()
        if not piece:
            continue  # only whitespace since the last cut: no cut here
        if first:
            first = False
            if not opens and segments:
                segments[-1].append(piece)
                begin += len(piece)
                continue
        new_segment([piece])
        begin += len(piece)
    return segments


def split_segments(lines: list[str], segmenter: Segmenter) -> list[str]:
    """Non-empty, stripped segments of one document, in order, as text (the
    pieces of a segment across a paragraph break joined by a space)."""
    return [" ".join(piece.strip() for piece in pieces) for pieces in segment_pieces(lines, segmenter)]
