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

import functools

from common.word_segmenters.base import WordSegmenter, han_runs, is_han

NONE = "none"


@functools.cache
def word_segmenters() -> dict[str, type[WordSegmenter]]:
    from common.params import discover

    return discover(__name__, WordSegmenter)


def word_segmenter_named(name: str) -> type[WordSegmenter] | None:
    """The segmenter class named ``name``; None for ``none``."""
    if name == NONE:
        return None
    try:
        return word_segmenters()[name]
    except KeyError:
        raise ValueError(f"unknown word segmenter {name!r} (known: {', '.join([NONE, *sorted(word_segmenters())])})") \
            from None


def make_word_segmenter(component) -> WordSegmenter | None:
    """The job's segmenter (a :class:`common.params.Component`), built with its parameters; None for ``none``."""
    segmenter_class = word_segmenter_named(component.name)
    if segmenter_class is None:
        return None
    return segmenter_class(segmenter_class.make_params(component.params))


__all__ = ["NONE", "WordSegmenter", "han_runs", "is_han", "make_word_segmenter", "word_segmenter_named",
           "word_segmenters"]
