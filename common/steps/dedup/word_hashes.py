"""64-bit hashes of every word of many texts, in numpy, without a Python
string per word.

The signature stage's cost was Python string work: ``re.findall`` making a
list of words, then a dictionary lookup per word.  Here a batch of texts
becomes one array of code points (UTF-32), a table says which code points
are word characters (exactly re's ``\\w``: the table is built by that
regex) and which are words by themselves (Han, kana: normalise.CHARACTER_WORDS),
and each run of word characters (each such character alone) is hashed as a polynomial of its
code points (mod 2**64, the powers from the run's own start), then mixed
(SplitMix64's finaliser) with its length.  The words are the same as
:func:`common.steps.dedup.normalise.words` cuts; the hash of a word depends on
that word only, so every worker gets the same hashes for the same text.

Texts are taken in batches of about ``_BATCH_CHARACTERS`` code points, a
long text cut at spaces into pieces of that size, so memory is bounded (~50
bytes per code point of a batch) whatever the task; only a text with no
space for over a million code points is taken whole.
"""

from __future__ import annotations

import re

import numpy as np

from common.hashing import mix64
from common.steps.dedup.normalise import CHARACTER_WORDS

_BASE = np.uint64(0x100000001B3)  # odd: every power is odd, none is 0
_BATCH_CHARACTERS = 1 << 20
_MAX_CODE_POINT = 0x110000

_word_table: np.ndarray | None = None
_character_table: np.ndarray | None = None
_powers = np.ones(1, dtype=np.uint64)
#: Powers kept between calls: words longer than this (rare: URLs, base64) compute theirs each time.
_POWERS_KEPT = 1 << 12


def word_table() -> np.ndarray:
    """bool [0x110000]: which code points re's ``\\w`` matches (built once per process, ~0.2 s)."""
    global _word_table
    if _word_table is None:
        every = "".join(map(chr, range(_MAX_CODE_POINT)))
        table = np.zeros(_MAX_CODE_POINT, dtype=bool)
        character = re.compile(r"\w")  # one word character: re's own
        table[np.fromiter((m.start() for m in character.finditer(every)), dtype=np.int64)] = True
        _word_table = table
    return _word_table


def character_table() -> np.ndarray:
    """bool [0x110000]: the code points that are a word each (normalise.CHARACTER_WORDS)."""
    global _character_table
    if _character_table is None:
        table = np.zeros(_MAX_CODE_POINT, dtype=bool)
        for low, high in re.findall(r"(.)-(.)", CHARACTER_WORDS):
            table[ord(low):ord(high) + 1] = True
        _character_table = table & word_table()
    return _character_table


def _powers_up_to(count: int) -> np.ndarray:
    """_BASE ** 0 .. count - 1 (mod 2**64); the first _POWERS_KEPT are kept between calls."""
    global _powers
    if len(_powers) >= count:
        return _powers[:count]
    with np.errstate(over="ignore"):
        powers = np.multiply.accumulate(np.r_[np.uint64(1), np.full(count - 1, _BASE, dtype=np.uint64)])
    if count <= _POWERS_KEPT:
        _powers = powers
    return powers


def _hash_batch(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(word hashes in order, words per text) of one batch."""
    lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
    # One separator (not a word character) after each text: no word runs from one text into the next.
    codes = np.frombuffer("\0".join(texts).encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    where = np.flatnonzero(word_table()[codes])
    if not len(where):
        return np.empty(0, dtype=np.uint64), np.zeros(len(texts), dtype=np.int64)
    starts_run = np.empty(len(where), dtype=bool)
    starts_run[0] = True
    np.not_equal(where[1:], where[:-1] + 1, out=starts_run[1:])
    alone = character_table()[codes[where]]
    if alone.any():  # a Han or kana character is a word by itself: it starts one, and so does what follows it
        starts_run[1:] |= alone[1:] | alone[:-1]
    first = np.flatnonzero(starts_run)  # each word's first character, as an index into ``where``
    run = np.cumsum(starts_run) - 1
    offset = np.arange(len(where)) - first[run]
    with np.errstate(over="ignore"):
        terms = codes[where].astype(np.uint64) * _powers_up_to(int(offset.max()) + 1)[offset]
        hashes = np.add.reduceat(terms, first)
        sizes = np.diff(np.r_[first, len(where)]).astype(np.uint64)
        hashes = mix64(hashes ^ (sizes * np.uint64(0x9E3779B97F4A7C15)))
    text_starts = np.cumsum(lengths + 1) - (lengths + 1)
    owner = np.searchsorted(text_starts, where[first], side="right") - 1
    return hashes, np.bincount(owner, minlength=len(texts))


def _pieces(text: str) -> list[str]:
    """A text cut at spaces into pieces of about ``_BATCH_CHARACTERS`` (a
    space is no word character: no word spans two pieces).  A text without
    a space for that long stays whole."""
    if len(text) <= _BATCH_CHARACTERS:
        return [text]
    pieces, start = [], 0
    while len(text) - start > _BATCH_CHARACTERS:
        cut = text.find(" ", start + _BATCH_CHARACTERS)
        if cut < 0:
            break
        pieces.append(text[start:cut])
        start = cut
    pieces.append(text[start:])
    return pieces


def word_hashes(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(every word's hash, text after text, uint64; words per text, int64).
    Texts are hashed in batches of about ``_BATCH_CHARACTERS`` code points,
    long texts cut into pieces of that size, so memory stays bounded."""
    hashes, piece_counts, owners = [], [], []
    batch: list = []
    size = 0

    def flush() -> None:
        part_hashes, part_counts = _hash_batch(batch)
        hashes.append(part_hashes)
        piece_counts.append(part_counts)

    for index, text in enumerate(texts):
        for piece in _pieces(text):
            batch.append(piece)
            owners.append(index)
            size += len(piece) + 1
            if size >= _BATCH_CHARACTERS:
                flush()
                batch, size = [], 0
    if batch or not hashes:
        flush()
    counts = np.concatenate(piece_counts)
    words = np.bincount(np.asarray(owners, dtype=np.int64), weights=counts, minlength=len(texts)) if owners else \
        np.zeros(len(texts))
    return np.concatenate(hashes), words.astype(np.int64)
