"""Cutting a document's paragraphs into segments for next-sentence prediction.

BERT's segments are sentences.  WikiExtractor writes one paragraph per line,
so by default paragraphs are cut into sentences with Bling Fire, a
finite-state splitter that runs at ~17 MB/s on this corpus (rule-based
pysbd was ~100x slower; see docs/design.md).  BERT's own text format already
has one sentence per line, so there lines are kept as they are.  In Chinese
and Japanese text, Bling Fire's cuts are corrected (common/cjk_sentences.py):
closing quotes stay with their sentence, and ；and … end one too.
"""

from __future__ import annotations

import enum

from common.cjk_sentences import adjust_starts

#: Segments longer than this are cut at whitespace: a segment is useful only
#: up to max_seq_length tokens, and one giant line would otherwise make the
#: tokenizer hold every token's metadata of it at once.
MAX_SEGMENT_CHARS = 100_000


class Segmenter(str, enum.Enum):  # noqa: UP042 - str() of a member is part of logs and job records; StrEnum changes it
    AUTO = "auto"
    LINE = "line"
    BLINGFIRE = "blingfire"

    def resolve(self, default: str) -> "Segmenter":
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


def _cut(paragraph: str, cuts: list[int]) -> list[tuple[int, int]]:
    """Spans of ``paragraph`` cut at ``cuts`` (sentence starts), each cut moved
    back over the whitespace before it: the spans cover the paragraph."""
    bounds = [0]
    for cut in cuts:
        while cut > bounds[-1] and paragraph[cut - 1].isspace():
            cut -= 1
        if cut > bounds[-1]:
            bounds.append(cut)
    bounds.append(len(paragraph))
    return list(zip(bounds, bounds[1:]))


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
    paragraphs = [line.strip() for line in lines]
    paragraphs = [paragraph for paragraph in paragraphs if paragraph]
    if segmenter is not Segmenter.BLINGFIRE or not paragraphs:
        return [[piece] for paragraph in paragraphs for piece in _bounded(paragraph)]
    import blingfire

    text = "\n".join(paragraphs)
    _, offsets = blingfire.text_to_sentences_and_offsets(text)
    starts = adjust_starts(text, sorted(start for start, _ in offsets))  # CJK: closers, ；and …
    segments: list[list[str]] = []
    begin, next_start = 0, 0
    for paragraph in paragraphs:
        end = begin + len(paragraph)
        cuts = []
        opens_sentence = begin == 0  # the first paragraph always does
        while next_start < len(starts) and starts[next_start] < end:
            if starts[next_start] > begin:
                cuts.append(starts[next_start] - begin)
            else:
                opens_sentence = True
            next_start += 1
        for index, (a, b) in enumerate(_cut(paragraph, cuts)):
            piece = paragraph[a:b]
            if index == 0 and not opens_sentence and segments:
                segments[-1].append(piece)  # the sentence goes on from the paragraph before
            else:
                segments.append([piece])
        begin = end + 1  # the joining newline
    bounded = []
    for pieces in segments:
        if sum(map(len, pieces)) <= MAX_SEGMENT_CHARS:
            bounded.append(pieces)
        else:
            bounded.extend([chunk] for piece in pieces for chunk in _bounded(piece))
    return bounded


def split_segments(lines: list[str], segmenter: Segmenter) -> list[str]:
    """Non-empty, stripped segments of one document, in order, as text (the
    pieces of a segment across a paragraph break joined by a space)."""
    return [" ".join(piece.strip() for piece in pieces) for pieces in segment_pieces(lines, segmenter)]
