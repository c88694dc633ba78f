"""The word-segmenter interface, and the Han runs it is given.

A segmenter sees only runs of Han characters (the characters BERT's
``tokenize_chinese_chars`` makes one token each: the CJK Unified Ideographs
blocks, their extensions and the compatibility ideographs) and returns the
lengths of the run's words.  Kana, hangul, Latin and everything else keep
the tokenizer's own words, and lone surrogates or other odd code points never
reach a segmenter.
"""

from __future__ import annotations

import abc
import re

from common.job.params import Configurable

#: BERT's _is_chinese_char ranges (tokenization.py), as a character class.
HAN = ("\u4e00-\u9fff\u3400-\u4dbf\U00020000-\U0002a6df\U0002a700-\U0002b73f\U0002b740-\U0002b81f"
       "\U0002b820-\U0002ceaf\uf900-\ufaff\U0002f800-\U0002fa1f")
_HAN_RUN = re.compile(f"[{HAN}]+")
_HAN_CHAR = re.compile(f"[{HAN}]")


def is_han(ch: str) -> bool:
    return _HAN_CHAR.fullmatch(ch) is not None


def han_runs(text: str) -> list[tuple[int, int]]:
    """(start, end) of every maximal run of Han characters in ``text``."""
    return [match.span() for match in _HAN_RUN.finditer(text)]


class WordSegmenter(Configurable, abc.ABC):
    """Cuts a run of Han characters into words."""

    def __init__(self, params):
        self.params = params

    @abc.abstractmethod
    def word_lengths(self, runs: list[str]) -> list[list[int]]:
        """For each run (Han characters only), the lengths of its words in
        order (positive, summing to the run's length)."""

    def describe(self) -> str:
        """One line for the log."""
        return self.name
