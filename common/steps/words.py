"""Word starts inside runs of Han characters, by a word segmenter (--word-segmenter;
common/word_segmenters/), for whole-word masking in Chinese (stage time "words").  The tokenize step
then encodes each piece with those words (common/tokenization/han_words.py)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from common.job.params import Component, NoParams, ParamsInstance
from common.steps.base import Segmented, Step, TaskRun, Worded
from common.tokenization import han_words
from common.word_segmenters import NONE, make_word_segmenter, word_segmenter_named
from common.word_segmenters.base import WordSegmenter

#: The parameter naming the word segmenter; the others are that segmenter's own.
NAME = "word_segmenter"


@dataclass(frozen=True)
class WordsParams:
    word_segmenter: str
    options: ParamsInstance  # the segmenter's own Params


@dataclass
class WordEncoding:
    """A part's pieces with their words, as the tokenize step encodes them."""

    words: han_words.PieceWords
    table: np.ndarray  # the tokenizer's Han tokens (han_words.han_token_table)

    def encode(self, vocabulary):
        return han_words.encode_with_words(vocabulary, self.words, self.table)


def _segmenter_class(name: str) -> type[WordSegmenter]:
    segmenter_class = word_segmenter_named(name)
    if segmenter_class is None:
        raise ValueError(f"the words step needs a word segmenter, not {name!r}")
    return segmenter_class


class Words(Step[Segmented, Worded]):
    name = "words"
    makes = "words"
    Params = WordsParams
    after = "segment"

    @classmethod
    def enabled(cls, params) -> bool:
        return params.word_segmenter != NONE  # --word-segmenter

    @classmethod
    def make_params(cls, given: dict) -> WordsParams:
        given = dict(given)
        name = given.pop(NAME, NONE)
        if not isinstance(name, str):
            raise ValueError(f"the words step needs its {NAME}")
        if name == NONE and not given:  # no --word-segmenter: the step is off
            return WordsParams(NONE, NoParams())
        return WordsParams(name, _segmenter_class(name).make_params(given))

    @classmethod
    def component(cls, params: WordsParams) -> Component:
        return cls.component_of(_segmenter_class(params.word_segmenter).component(params.options))

    @classmethod
    def component_of(cls, segmenter: Component) -> Component:
        """The step as the job names it, for the word segmenter ``segmenter`` (with all its parameters)."""
        return Component(cls.name, {NAME: segmenter.name, **segmenter.params})

    def __init__(self, params, job):
        super().__init__(params, job)
        segmenter = make_word_segmenter(Component(params.word_segmenter, dataclasses.asdict(params.options)))
        if segmenter is None:
            raise ValueError(f"the words step needs a word segmenter, not {params.word_segmenter!r}")
        self.segmenter = segmenter
        self.table = han_words.han_token_table(job.vocabulary)

    def apply(self, parts: list[Segmented], run: TaskRun) -> list[Worded]:
        worded = []
        for part in parts:
            pieces = [piece for segments in part.segments for segment in segments for piece in segment]
            with run.stats.timed("words"):
                words = WordEncoding(han_words.find_words(pieces, self.segmenter), self.table)
            worded.append(Worded(part.split, part.key, part.stem, part.documents, part.segments, words=words))
        return worded

    @classmethod
    def versions(cls, params, config) -> dict[str, int]:
        version = _segmenter_class(params.word_segmenter).version
        return {**super().versions(params, config), **({f"word_segmenter:{params.word_segmenter}": version}
                                                        if version > 1 else {})}

    @classmethod
    def identity(cls, params) -> dict:
        return {"word_segmenter": {"name": params.word_segmenter, "params": dataclasses.asdict(params.options)}}
