"""Sentences found by Bling Fire, a finite-state splitter (~17 MB/s on the wiki corpus), with CJK
corrections (common/segmenters/cjk_sentences.py): the default for paragraph-per-line input such as WikiExtractor's."""

from __future__ import annotations

from common.segmenters.base import Segmenter
from common.segmenters.sentences import Segmenter as Mode
from common.segmenters.sentences import segment_pieces


class BlingfireSegmenter(Segmenter):
    name = "blingfire"
    version = 2  # CJK sentence ends (common/segmenters/cjk_sentences.py): other segments for Chinese and Japanese text

    def segments(self, lines: list[str]) -> list[list[str]]:
        return segment_pieces(lines, Mode.BLINGFIRE)
