"""Sentences found by Bling Fire, a finite-state splitter (~17 MB/s on the wiki corpus), with CJK
corrections (common/segmenters/cjk_sentences.py): the default for paragraph-per-line input such as WikiExtractor's."""

from __future__ import annotations

import functools
import platform

from common.segmenters.base import Segmenter
from common.segmenters.sentences import Segmenter as Mode
from common.segmenters.sentences import segment_pieces


class BlingfireSegmenter(Segmenter):
    name = "blingfire"
    version = 2  # CJK sentence ends (common/segmenters/cjk_sentences.py): other segments for Chinese and Japanese text

    @classmethod
    def unavailable(cls) -> str | None:
        return _unavailable()

    def segments(self, lines: list[str]) -> list[list[str]]:
        return segment_pieces(lines, Mode.BLINGFIRE)


@functools.cache
def _unavailable() -> str | None:
    """Bling Fire's native library loads here, or why not: the blingfire package on PyPI is one wheel for every
    platform, whose library does not load on some (aarch64 Linux: every task failed, and was quarantined)."""
    try:
        import blingfire

        blingfire.text_to_sentences_and_offsets("One. Two.")
    except Exception as error:  # ImportError, OSError from ctypes, AttributeError: whatever a broken library gives
        detail = (str(error).splitlines() or [""])[0][:200]
        return (f"--segmenter blingfire: Bling Fire's library does not load on this {platform.machine()} machine "
                f"({type(error).__name__}: {detail}); choose another --segmenter (line: each paragraph a segment)")
    return None
