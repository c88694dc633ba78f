"""Where Bling Fire's sentences start, as ``str`` offsets, at the cost of Bling Fire itself.

``blingfire.text_to_sentences_and_offsets`` gets the right offsets, but maps Bling Fire's UTF-8 byte
offsets to string offsets with a Python loop over every byte of the text: 5x the cost of the split
itself (issue #33).  Here the same C entry point (``TextToSentencesWithOffsets``, the one the wrapper
calls) is called through ctypes into reused numpy buffers, and the byte offsets become string offsets
in bulk: unchanged when the text is ASCII, else less the UTF-8 continuation bytes before them.

The results are the wrapper's, held equal on every test corpus and on tricky text
(tests/common/segmenters/test_sentence_offsets.py).  Bling Fire reports a sentence start at the first
byte of a character and an end at the last byte of one (blingfiretokdll.cpp); should an offset ever
fall elsewhere, or the library lack the entry point, the wrapper itself answers, so the result never
differs from it.  (One exception: for the empty text the wrapper fails; here it has no sentence.)
"""

from __future__ import annotations

import bisect
import ctypes
import operator
import threading
from typing import Any

import numpy as np

#: Texts up to this many UTF-8 bytes reuse their thread's buffers (~9 bytes per input byte); a longer
#: one gets its own, freed after the call, so one huge document does not pin its buffers for good.
REUSE_BYTES = 1 << 20


class _Buffers:
    """Output and offset buffers for Bling Fire, with their addresses (``ndarray.ctypes`` costs ~2 us a call)."""

    def __init__(self, slots: int = 0, with_ends: bool = False):
        self.slots = slots
        self.with_ends = with_ends
        self.output = np.empty(slots, np.uint8)
        self.starts = np.empty(slots, np.int32)
        self.ends = np.empty(slots if with_ends else 0, np.int32)
        self.addresses = (self.output.ctypes.data, self.starts.ctypes.data,
                          self.ends.ctypes.data if with_ends else None)
        self.start_values = self.starts.data  # a memoryview: Python ints a value, for the binary search


_local = threading.local()  # each thread's reused _Buffers
_entry: Any = None  # the C function once looked up; False when it cannot be had


def _entry_point():
    """Bling Fire's ``TextToSentencesWithOffsets``, typed for numpy buffers, or None if it cannot be had.

    A CDLL object of its own (the same loaded library): the argument types set here do not change the
    function object the blingfire package itself calls."""
    global _entry
    if _entry is None:
        import blingfire

        try:
            function = ctypes.CDLL(blingfire.blingfire._name).TextToSentencesWithOffsets
        except (AttributeError, OSError):
            _entry = False
        else:
            function.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                 ctypes.c_int]
            function.restype = ctypes.c_int
            _entry = function
    return _entry or None


def _buffers_for(slots: int, with_ends: bool) -> _Buffers:
    """This thread's buffers if they hold ``slots`` (grown to, if the text is not too long), else new ones."""
    if slots > REUSE_BYTES + 1:
        return _Buffers(slots, with_ends)
    reused = getattr(_local, "buffers", None)
    if reused is None or reused.slots < slots or (with_ends and not reused.with_ends):
        grown = max(slots, min(2 * reused.slots, REUSE_BYTES + 1)) if reused is not None else slots
        reused = _local.buffers = _Buffers(grown, with_ends or (reused is not None and reused.with_ends))
    return reused


def _byte_offsets(data: bytes, with_ends: bool) -> tuple[np.ndarray, np.ndarray | None] | None:
    """Bling Fire's sentences' first bytes (and last bytes) in non-empty ``data``, or None when it reports
    an error: views of this thread's buffers, good until its next call.

    Bling Fire zeroes as many offset slots as it is given, fills one per sentence, and copies its
    newline-joined output only if it fits the same count of bytes.  Each sentence holds a byte that is
    not a space, so ``len(data) + 1`` slots leave a zero after the last sentence; sentences after the
    first start past byte 0, so the count is where the zeros begin (a binary search).  The output, which
    the wrapper decodes and counts the newlines of, is not needed.  With no sentence at all the count
    is 1 and the offsets (0, 0), as the wrapper has them."""
    slots = len(data) + 1
    buffers = _buffers_for(slots, with_ends)
    output, starts, ends = buffers.addresses
    if not with_ends:
        ends = None
    if _entry(data, len(data), output, starts, ends, slots) < 0:
        return None
    count = bisect.bisect_left(buffers.start_values, True, 1, slots, key=operator.not_)  # not 0: True
    return buffers.starts[:count], buffers.ends[:count] if with_ends else None


def sentence_starts(text: str, utf8: bytes | None = None) -> list[int]:
    """Where each of Bling Fire's sentences of ``text`` starts: the starts of
    ``blingfire.text_to_sentences_and_offsets(text)``, in order.  ``utf8``: ``text`` encoded, if the
    caller has it."""
    if not text:
        return []
    if _entry_point() is None:
        return _wrapper_starts(text)
    data = text.encode("utf-8") if utf8 is None else utf8
    found = _byte_offsets(data, with_ends=False)
    if found is None:
        return []
    return character_starts(text, data, found[0])


def byte_starts(utf8: bytes) -> np.ndarray | None:
    """Where Bling Fire's sentences of non-empty ``utf8`` start, as its byte offsets (int32): a view of this
    thread's buffers, good until its next call.  None where :func:`sentence_starts` must answer instead (the
    library lacks the entry point, or Bling Fire reports an error)."""
    if _entry_point() is None:
        return None
    found = _byte_offsets(utf8, with_ends=False)
    return None if found is None else found[0]


def character_starts(text: str, utf8: bytes, starts: np.ndarray) -> list[int]:
    """:func:`sentence_starts` of ``text`` from Bling Fire's byte ``starts`` into ``utf8`` (``text`` encoded)."""
    if len(utf8) == len(text):  # ASCII: bytes are characters
        return starts.tolist()
    characters = _characters(utf8, starts)
    return characters.tolist() if characters is not None else _wrapper_starts(text)


def sentence_offsets(text: str) -> list[tuple[int, int]]:
    """``blingfire.text_to_sentences_and_offsets(text)[1]``: each sentence's (start, end) in ``text``."""
    import blingfire

    if not text:
        return []
    if _entry_point() is None:
        return blingfire.text_to_sentences_and_offsets(text)[1]
    data = text.encode("utf-8")
    found = _byte_offsets(data, with_ends=True)
    if found is None:
        return []
    starts, last_bytes = found
    assert last_bytes is not None  # asked with_ends
    bounds = np.empty(2 * len(starts), np.int64)
    bounds[0::2], bounds[1::2] = starts, last_bytes.astype(np.int64) + 1  # an end: the byte after the last
    # The wrapper's loop pairs the offsets with character starts in order: it agrees with a bulk mapping
    # when they never go back and every one but the last end lies inside the text.
    if np.any(np.diff(bounds) < 0) or bounds[:-1].max(initial=0) >= len(data) or bounds[-1] > len(data):
        return blingfire.text_to_sentences_and_offsets(text)[1]
    inside = bounds < len(data)
    mapped = np.full(len(bounds), len(text), np.int64)
    if len(data) == len(text):
        mapped[inside] = bounds[inside]
    else:
        characters = _characters(data, bounds[inside])
        if characters is None:
            return blingfire.text_to_sentences_and_offsets(text)[1]
        mapped[inside] = characters
    return list(zip(mapped[0::2].tolist(), mapped[1::2].tolist()))


def _characters(data: bytes, byte_offsets: np.ndarray) -> np.ndarray | None:
    """The character index of each of the ascending byte offsets into ``data``, each the first byte of a
    character (None if one is not): the offset less the UTF-8 continuation bytes (10xxxxxx) before it."""
    if len(byte_offsets) == 0:
        return byte_offsets
    continuation = np.frombuffer(data, np.int8) < -64  # 0x80..0xBF as signed bytes
    if byte_offsets[0] < 0 or byte_offsets[-1] >= len(data) or continuation[byte_offsets].any():
        return None
    return byte_offsets - np.searchsorted(np.flatnonzero(continuation), byte_offsets)


def _wrapper_starts(text: str) -> list[int]:
    import blingfire

    return [start for start, _ in blingfire.text_to_sentences_and_offsets(text)[1]]
