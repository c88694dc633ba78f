"""The word-segmenter axis: where words begin inside runs of Han characters.

BERT's WordPiece makes every Han character its own token, so ``##`` never
marks a Chinese word and whole-word masking would mask single characters.
A word segmenter finds the words of each run (``--word-segmenter jieba``);
other scripts keep the tokenizer's own words.  Each segmenter is one module
of this package (see :mod:`.base`), found by name like the readers,
objectives and writers, so adding one touches no other file.  ``none`` (the
default) segments nothing.
"""

from __future__ import annotations

from common.job.params import Registry
from common.word_segmenters.base import WordSegmenter, han_runs, is_han

NONE = "none"


_REGISTRY: Registry[WordSegmenter] = Registry(__name__, WordSegmenter, "word segmenter", also_known=(NONE,))
word_segmenters = _REGISTRY.variants


def word_segmenter_named(name: str) -> type[WordSegmenter] | None:
    """The segmenter class named ``name``; None for ``none``."""
    return None if name == NONE else _REGISTRY.named(name)


def make_word_segmenter(component) -> WordSegmenter | None:
    """The job's segmenter (a :class:`common.job.params.Component`), built with its parameters; None for ``none``."""
    segmenter_class = word_segmenter_named(component.name)
    if segmenter_class is None:
        return None
    return segmenter_class(segmenter_class.make_params(component.params))


__all__ = ["NONE", "WordSegmenter", "han_runs", "is_han", "make_word_segmenter", "word_segmenter_named",
           "word_segmenters"]
