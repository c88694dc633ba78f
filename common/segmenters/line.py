"""Each paragraph (line) is a segment: for formats whose lines are already sentences (BERT's own text
format) and objectives that take their input's lines as they are (ELECTRA)."""

from __future__ import annotations

from common.segmenters.base import Segmenter
from common.segmenters.sentences import Segmenter as Mode
from common.segmenters.sentences import segment_pieces


class LineSegmenter(Segmenter):
    name = "line"

    def segments(self, lines: list[str]) -> list[list[str]]:
        return segment_pieces(lines, Mode.LINE)
