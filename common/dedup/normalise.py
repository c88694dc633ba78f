"""What counts as the same text.

Exact dedup compares a document's *normalised text*: its lines joined by
``\\n``, Unicode NFC, then every run of whitespace (``str.split``'s:
spaces, tabs, newlines, NBSP and the other Unicode spaces) made one space,
with none at the ends.  Case and punctuation count: ``"The cat"`` and
``"the cat"`` are not exact copies (MinHash finds them).

MinHash compares *words*: the NFC text case-folded, cut into maximal runs of
Unicode word characters (``\\w+``: letters, digits, underscore), so case,
punctuation and spacing do not matter.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

#: A word: a maximal run of Unicode word characters (re's ``\\w``).
WORD = re.compile(r"\w+")


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
    making these: common/dedup/word_hashes.py; same cut)."""
    return WORD.findall(fold(text))


def exact_hash_of_nfc(nfc: str) -> int:
    """:func:`exact_hash` of a text already in NFC (the signature stage
    normalises once for both keys)."""
    normalised = " ".join(nfc.split())
    if not normalised:
        return 0
    return int.from_bytes(hashlib.blake2b(normalised.encode("utf-8"), digest_size=8).digest(), "little") or 1
