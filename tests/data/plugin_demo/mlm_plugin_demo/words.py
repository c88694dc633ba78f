"""A word segmenter: every Han character is a word of its own."""

from mlm_pipeline.plugin import NoParams, WordSegmenter


class CharacterWords(WordSegmenter):
    name = "demo-chars"
    Params = NoParams

    def word_lengths(self, runs):
        return [[1] * len(run) for run in runs]
