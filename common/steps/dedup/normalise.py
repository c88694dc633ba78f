"""What counts as the same text.

Exact dedup compares a document's *normalised text*: its lines joined by
``\\n``, Unicode NFC, then every run of whitespace (``str.split``'s:
spaces, tabs, newlines, NBSP and the other Unicode spaces) made one space,
with none at the ends.  Case and punctuation count: ``"The cat"`` and
``"the cat"`` are not exact copies (MinHash finds them).

MinHash compares *words*: the NFC text case-folded, cut into maximal runs of
Unicode word characters (``\\w+``: letters, digits, underscore), so case,
punctuation and spacing do not matter.  Scripts written without spaces
(Han, kana) are cut into characters: there a ``\\w`` run is a whole clause,
and a near copy with one character changed in ten would share no shingle of
five such "words" (issue 34: 0 of 20 Chinese near copies found).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

#: Characters that are each a word of their own: Han (CJK ideographs, their extensions and compatibility forms)
#: and kana, whose text has no spaces between words.
CHARACTER_WORDS = "\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003ffff"
#: A word: one of CHARACTER_WORDS, or a maximal run of the other Unicode word characters (re's ``\\w``).
WORD = re.compile(rf"[{CHARACTER_WORDS}]|[^\W{CHARACTER_WORDS}]+")


def document_text(lines: list[str]) -> str:
    return "\n".join(lines)


def normalise_exact(text: str) -> str:
    return " ".join(unicodedata.normalize("NFC", text).split())


def exact_hash(text: str) -> int:
    """64 bits of BLAKE2b over the normalised text's UTF-8 (0 when it is empty:
    an empty document is nobody's copy)."""
    return exact_hash_of_nfc(unicodedata.normalize("NFC", text))


def fold(text: str) -> str:
    """What MinHash cuts words from: the NFC text, case-folded."""
    return unicodedata.normalize("NFC", text).casefold()


def words(text: str) -> list[str]:
    """MinHash's words as strings (the signature stage hashes them without
    making these: common/steps/dedup/word_hashes.py; same cut)."""
    return WORD.findall(fold(text))


def exact_hash_of_nfc(nfc: str) -> int:
    """:func:`exact_hash` of a text already in NFC (the signature stage
    normalises once for both keys)."""
    normalised = " ".join(nfc.split())
    if not normalised:
        return 0
    return int.from_bytes(hashlib.blake2b(normalised.encode("utf-8"), digest_size=8).digest(), "little") or 1
