"""Cutting a document's paragraphs into segments for next-sentence prediction.

BERT's segments are sentences.  WikiExtractor writes one paragraph per line,
so by default paragraphs are cut into sentences with Bling Fire, a
finite-state splitter that runs at ~17 MB/s on this corpus (rule-based
pysbd was ~100x slower; see docs/design.md).  BERT's own text format already
has one sentence per line, so there lines are kept as they are.
"""

from __future__ import annotations

import enum

#: Segments longer than this are cut at whitespace: a segment is useful only
#: up to max_seq_length tokens, and one giant line would otherwise make the
#: tokenizer hold every token's metadata of it at once.
MAX_SEGMENT_CHARS = 100_000


class Segmenter(str, enum.Enum):
    AUTO = "auto"
    LINE = "line"
    BLINGFIRE = "blingfire"

    def resolve(self, default: str) -> "Segmenter":
        """``auto`` becomes the objective's unit or else the reader's default (lines for formats whose lines
        are sentences)."""
        return Segmenter(default) if self is Segmenter.AUTO else self


def _bounded(segment: str) -> list[str]:
    if len(segment) <= MAX_SEGMENT_CHARS:
        return [segment]
    pieces = []
    start = 0
    while start < len(segment):
        end = min(start + MAX_SEGMENT_CHARS, len(segment))
        if end < len(segment):
            cut = segment.rfind(" ", start, end)
            end = cut + 1 if cut > start else end
        pieces.append(segment[start:end])
        start = end
    return pieces


def split_segments(lines: list[str], segmenter: Segmenter) -> list[str]:
    """Non-empty, stripped segments of one document, in order."""
    if segmenter is Segmenter.BLINGFIRE:
        import blingfire

        paragraphs = [line.strip() for line in lines]
        text = "\n".join(p for p in paragraphs if p)
        candidates = blingfire.text_to_sentences(text).split("\n") if text else []
    else:
        candidates = lines
    segments = []
    for candidate in candidates:
        candidate = candidate.strip()
        if candidate:
            segments.extend(_bounded(candidate))
    return segments
