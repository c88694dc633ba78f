"""A segmenter with a flag of its own: a paragraph's words, ``--demo-words-per-segment`` to a segment."""

from dataclasses import dataclass

from mlm_pipeline.plugin import Segmenter, param


@dataclass(frozen=True)
class WordSegmentsParams:
    demo_words_per_segment: int = param(1, "Words per segment (the last of a paragraph may have fewer).")

    def validate(self):
        if self.demo_words_per_segment < 1:
            raise ValueError("--demo-words-per-segment must be at least 1")


class WordSegments(Segmenter):
    name = "demo-words"
    Params = WordSegmentsParams

    def segments(self, lines):
        n = self.params.demo_words_per_segment
        return [[" ".join(words[i:i + n])] for words in (line.split() for line in lines)
                for i in range(0, len(words), n)]
