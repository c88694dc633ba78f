"""A segmenter: every whitespace-separated word of a paragraph is a segment of its own."""

from common.segmenters.base import Segmenter


class WordSegments(Segmenter):
    name = "demo-words"

    def segments(self, lines):
        return [[word] for line in lines for word in line.split()]
