"""Faster byte-level BPE encoders with exactly HF ``tokenizers``' output.

HF ``tokenizers`` runs a byte-level BPE at ~1.5-3 MB/s per core on Wikipedia text, most of it pre-tokenizing and
building its Encoding objects, not merging: a word's pieces depend on the word alone.  Two encoders here, the
first that reproduces the tokenizer is used (:func:`make_fast_encoder`):

* :class:`WordCacheEncoder`, this project's: the text cut into GPT-2's pre-tokens by a compiled kernel
  (``byte_level_encode`` in common/_kernels.c, HF's pattern rule for rule over a table of character classes), each
  pre-token's ids looked up in a dictionary and, on a miss, asked of the tokenizer's own BPE model
  (``model.tokenize``), so the merges are HF's by construction.  Added tokens matched in text (ModernBERT's runs
  of spaces) are cut out first as HF does (leftmost-longest).  A text holding a character the table cannot vouch
  for (unassigned in this Python's Unicode, which HF's may know) is encoded by HF.  Needs the compiled kernels.
* :class:`KitokenEncoder`: ``kitoken`` (0.11) reads the same tokenizer.json; exact for a BPE after ByteLevel with
  no normalizer and no added token (RoBERTa's shape), shown on the whole shared corpus, the adversarial strings of
  tests/common/tokenization/test_fast_wordpiece.py and 5,000 random Unicode strings
  (tests/common/tokenization/test_tokenizer_speed_candidates.py), but not on a contraction right after whitespace
  other than a space ("\\n'theory"), which a probe holds.  Tried where the kernels are not built.

Candidates measured and not used (docs/tokenizers.md has the figures): kitoken with a Lowercase normalizer
(lower-cases a word-final ``Σ`` to ``ς`` where HF gives ``σ``) and on Unigram; ``sentencepiece`` on a converted
``.model`` (exact, but workers receive tokenizers JSON).

As for nanotoken (common/tokenization/fast_wordpiece.py), an encoder is compared with HF on probe texts when it is
made, and anything outside the shape shown exact gets ``None`` (HF is used).
"""

from __future__ import annotations

import functools
import logging
import re
import threading
import unicodedata
import zlib
from array import array
from dataclasses import dataclass

import numpy as np

from common import kernels
from common.tokenization.fast_wordpiece import PROBES, agrees_with_hf, keep_in_cache, probe_cache_dir, tokenizer_spec

log = logging.getLogger(__name__)

#: More probes: whitespace runs and contractions, where byte-level BPE's split regex is subtle.
BPE_PROBES = PROBES + ("a\tb  c\n\nd \t e   ", "  leading and trailing  ", "I'm we'll they've it's 'S 'LL",
                       "a\u00a0b\u2003c", "x\r\n\r\ny", "12,800.5 3rd 4th", "ΟΔΟΣ Σ σς ΣΑΣ", "\u0301\u0301 x",
                       # A document of paragraphs, as objectives cut from a document's encoding encode it whole
                       "First paragraph.\n\nSecond, after a break.\n \nThird\r\n\tfourth.\n\n\n他来了。\n",
                       # GPT-2's pattern, rule by rule: contractions, " ?" before letters, digits and others,
                       # \s+(?!\S) leaving a run's last space, the \x1c-\x1f controls (not \s there, \s to Python)
                       "'s't're've'm'll'd 're 'x don't '''s !'s ' s", "a \n b  \t\nc \x1c\x1d\x1e\x1f d \x1c",
                       "x  \u3000y\u2028 z \u0085 1 22 ٣٤ ½ \u2160 \u00b2", "  ", "\n", " a", "a ", "a" * 300 + "  ",
                       # a contraction right after whitespace other than a space (kitoken 0.11 cuts "'" + "theory")
                       "line\n'theory\t'sand\u00a0'mad\u3000'real\r\n'dog\n're\n'll")

#: The character classes of ``byte_level_encode`` (common/_kernels.c).
OTHER, LETTER, NUMBER, SPACE, UNSURE = 0, 1, 2, 3, 4
#: Unicode White_Space, HF's ``\s`` (Python's str.isspace adds \x1c-\x1f, which the pattern's \s does not match).
WHITE_SPACE = frozenset("\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
                        "\u2009\u200a\u2028\u2029\u202f\u205f\u3000")
#: The words the cache holds before it is emptied (Zipf: most of the speed for a few MB).
CACHE_ENTRIES = 1 << 17
#: ... and the bytes it holds (long words: 131,072 distinct 10,000-letter words would hold ~5 GB).
CACHE_BYTES = 1 << 26
#: Words refused a slot (a full probe run) before the log says so, once: real text has none in millions.
UNKEPT_WARNING = 1000
_CLASS_OF_CATEGORY = {"Lu": LETTER, "Ll": LETTER, "Lt": LETTER, "Lm": LETTER, "Lo": LETTER,
                      "Nd": NUMBER, "Nl": NUMBER, "No": NUMBER, "Cn": UNSURE, "Cs": UNSURE}
_TABLE_RULE = "v1"


def build_char_classes() -> bytes:
    """One class per code point from this Python's Unicode database: a character it has not assigned is UNSURE
    (HF's regex engine may know it: its text goes to HF).  ~0.35 CPU-s; :func:`char_classes` keeps it on disk."""
    category = unicodedata.category
    table = bytearray(_CLASS_OF_CATEGORY.get(category(chr(c)), OTHER) for c in range(0x110000))
    for char in WHITE_SPACE:
        table[ord(char)] = SPACE
    return bytes(table)


@functools.lru_cache(maxsize=1)
def char_classes() -> bytes:
    """:func:`build_char_classes`, read from the user's cache directory when this machine built it before (one
    small file per Unicode version and rule), else built and kept there."""
    path = probe_cache_dir().parent / "char-classes" / f"{unicodedata.unidata_version}-{_TABLE_RULE}.zlib"
    try:
        table = zlib.decompress(path.read_bytes())
        if len(table) == 0x110000 and max(table) <= UNSURE:
            return table
    except (OSError, zlib.error):
        pass
    table = build_char_classes()
    keep_in_cache(path, zlib.compress(table, 9), "character classes")
    return table


def _byte_chars() -> list[str]:
    """GPT-2's byte-to-character map (HF's ByteLevel alphabet): printable bytes stand for themselves, the rest
    for characters from U+0100 on."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


BYTE_CHARS = _byte_chars()
#: ``str.translate`` table from a word's UTF-8 bytes (read as Latin-1) to ByteLevel's characters.
_BYTE_LEVEL = {byte: char for byte, char in enumerate(BYTE_CHARS)}


@dataclass(frozen=True)
class AddedTokens:
    """The added tokens HF matches in text before pre-tokenizing, as two leftmost-longest passes: the ones not
    normalized over the raw text, then the normalized ones (there is no normalizer: over the same text)."""

    raw: re.Pattern[str] | None
    normalized: re.Pattern[str] | None
    ids: dict[str, int]

    @staticmethod
    def _pattern(contents: list[str]) -> re.Pattern[str] | None:
        # Longest first: at one position an alternation takes the first that matches, so this is leftmost-longest.
        contents = sorted(set(contents), key=lambda c: (-len(c), c))
        return re.compile("(" + "|".join(map(re.escape, contents)) + ")") if contents else None

    @classmethod
    def of(cls, tokens: list[dict], ids: dict[str, int]) -> AddedTokens | None:
        if not tokens:
            return None
        raw = [t["content"] for t in tokens if not t.get("normalized", True)]
        normalized = [t["content"] for t in tokens if t.get("normalized", True)]
        return cls(cls._pattern(raw), cls._pattern(normalized), ids)

    def split(self, text: str) -> list[str | int]:
        """``text`` as its runs of plain text (str) and the added tokens' ids (int), in order."""
        parts: list[str | int] = [text]
        for pattern in (self.raw, self.normalized):
            if pattern is None:
                continue
            cut: list[str | int] = []
            for part in parts:
                if isinstance(part, int):
                    cut.append(part)
                    continue
                for k, piece in enumerate(pattern.split(part)):
                    if k % 2:
                        cut.append(self.ids[piece])
                    elif piece:
                        cut.append(piece)
            parts = cut
        return parts

    def search(self, text: str) -> bool:
        return any(p is not None and p.search(text) is not None for p in (self.raw, self.normalized))


def word_cache_unsupported(spec: dict) -> str | None:
    """Why :class:`WordCacheEncoder` does not reproduce this tokenizer, or None."""
    if spec.get("truncation") is not None or spec.get("padding") is not None:
        return "truncation or padding is set"
    model = spec.get("model") or {}
    if model.get("type") != "BPE":
        return "the model is not BPE"
    if model.get("dropout"):
        return "BPE dropout is set (a word's pieces are drawn, not fixed)"
    if spec.get("pre_tokenizer") is None or {k: v for k, v in spec["pre_tokenizer"].items() if k != "trim_offsets"} \
            != {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}:
        return "the pre-tokenizer is not ByteLevel with its regex and no prefix space"
    added = spec.get("added_tokens") or []
    for token in added:
        if token.get("special"):
            return "special added tokens are matched in text"
        if token.get("lstrip") or token.get("rstrip") or token.get("single_word"):
            return f"added token {token.get('content')!r} strips or matches single words"
        if not isinstance(token.get("content"), str) or not token["content"]:
            return "an added token has no content"
    if added and spec.get("normalizer") is not None:
        return "added tokens are matched in normalized text"
    return None


@dataclass(frozen=True)
class CacheCounts:
    """The word cache's work since it was made (a clear keeps these): ``probed`` slots over ``lookups`` (pre-tokens)
    say whether lookups stay short; ``unkept`` words had a full probe run (a corpus built to collide:
    common/_kernels.c, WORD_PROBES) and are asked of the tokenizer each time."""

    lookups: int
    probed: int
    unkept: int


class WordCacheEncoder:
    """``encode_many`` as HF gives it: pre-tokens cut by the compiled kernel, each one's ids cached."""

    name = "word cache"

    def __init__(self, hf, kernel, classes: bytes, added: AddedTokens | None):
        self._hf = hf
        self._model = hf.model
        self._normalizer = hf.normalizer
        self._kernel = kernel
        self._classes = classes
        self._added = added
        self._cache = kernel.word_cache()  # the kernel's own table: nothing allocated per looked-up word
        # One call at a time: the kernel refuses a cache in use, and a miss (Python) lets another thread run
        self._lock = threading.RLock()
        self._warned = False  # about words refused a slot (UNKEPT_WARNING)
        self._misses = self._misses_checked = 0  # words asked of the model; when the counts were last read

    def _miss(self, word: str) -> bytes:
        """A word's ids from the tokenizer's own BPE model, over its bytes as ByteLevel maps them (kept by the
        kernel)."""
        self._misses += 1
        mapped = word.encode("utf-8").decode("latin-1").translate(_BYTE_LEVEL)
        return array("i", [token.id for token in self._model.tokenize(mapped)]).tobytes()

    def cached_words(self) -> int:
        return int(self._kernel.word_cache_size(self._cache)[0])

    def cache_counts(self) -> CacheCounts:
        return CacheCounts(*self._kernel.word_cache_probes(self._cache))

    def _warn_if_unkept(self) -> None:
        unkept = self.cache_counts().unkept
        if unkept >= UNKEPT_WARNING:
            self._warned = True
            log.warning("the byte-level BPE's word cache found no slot for %d words (their hashes collide: a corpus "
                        "built against it?); each is encoded by the tokenizer every time it comes: slower, the "
                        "same ids", unkept)

    def clear_cache(self) -> None:
        """Forget memoized words (for benchmarks of a cold process)."""
        with self._lock:
            self._kernel.word_cache_clear(self._cache)

    def __call__(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        with self._lock:  # a Vocabulary shared by threads, as HF's encode_batch may be
            return self._call(list(texts))

    def _call(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        words, held = self._kernel.word_cache_size(self._cache)
        if words > CACHE_ENTRIES or held > CACHE_BYTES:
            self.clear_cache()
        originals = texts
        if self._normalizer is not None:
            texts = [self._normalizer.normalize_str(text) for text in texts]
        added = self._added
        split = [] if added is None else [i for i, text in enumerate(texts) if added.search(text)]
        if added is None or not split:
            return self._encode(texts, originals)
        parts = {i: added.split(texts[i]) for i in split}
        runs = [part for i, text in enumerate(texts) for part in parts.get(i, [text]) if isinstance(part, str)]
        ids, lengths = self._encode(runs, runs)  # no normalizer here (word_cache_unsupported)
        starts = np.concatenate([[0], np.cumsum(lengths)])
        chunks: list[np.ndarray] = []
        out_lengths = np.zeros(len(texts), dtype=np.int64)
        run = 0
        for i in range(len(texts)):
            for part in parts.get(i, [texts[i]]):
                if isinstance(part, str):
                    chunk = ids[starts[run]:starts[run + 1]]
                    run += 1
                else:
                    chunk = np.array([part], dtype=np.int32)
                chunks.append(chunk)
                out_lengths[i] += len(chunk)
        return (np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int32)), out_lengths

    def _encode(self, texts: list[str], originals: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Pre-split, normalized texts (no added token in them) through the kernel; those it declines through HF,
        from ``originals`` (the same texts before normalizing: HF normalizes them, and a normalizer such as Replace
        changes its own output again)."""
        raw_ids, raw_lengths = self._kernel.byte_level_encode(texts, self._classes, self._cache, self._miss)
        if not self._warned and self._misses != self._misses_checked:  # a word refused a slot is a miss too
            self._misses_checked = self._misses
            self._warn_if_unkept()
        ids = np.frombuffer(raw_ids, dtype=np.int32)
        lengths = np.frombuffer(raw_lengths, dtype=np.int64).copy()
        declined = np.flatnonzero(lengths < 0)
        if not declined.size:
            return ids, lengths
        encodings = self._hf.encode_batch([originals[i] for i in declined], add_special_tokens=False)
        by_text = dict(zip(declined.tolist(), (np.asarray(e.ids, dtype=np.int32) for e in encodings)))
        starts = np.concatenate([[0], np.cumsum(np.maximum(lengths, 0))])
        chunks = [by_text[i] if i in by_text else ids[starts[i]:starts[i + 1]] for i in range(len(texts))]
        for i, chunk in by_text.items():
            lengths[i] = len(chunk)
        return (np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int32)), lengths


def _word_cache_encoder(spec: dict, hf) -> WordCacheEncoder | None:
    reason = word_cache_unsupported(spec)
    if reason is not None:
        log.info("word-cache BPE not used: %s", reason)
        return None
    kernel = kernels.compiled
    if kernel is None or not hasattr(kernel, "byte_level_encode"):
        log.info("word-cache BPE not used: the compiled kernels are not built (%s)", kernels.status)
        return None
    classes = char_classes()
    if not cuts_as_hf(kernel, classes, hf, [*BPE_PROBES, *newer_unicode_texts()]):
        log.warning("word-cache BPE not used: this Python's Unicode %s classes characters that the regex engine of "
                    "the installed tokenizers does not", unicodedata.unidata_version)
        return None
    added = AddedTokens.of(spec.get("added_tokens") or [], {t["content"]: t["id"] for t in
                                                             spec.get("added_tokens") or []})
    return WordCacheEncoder(hf, kernel, classes, added)


#: Blocks new in Unicode 15.0, 15.1, 16.0 and 17.0 (letters, digits, signs).  The table vouches for what this
#: Python's Unicode assigns; HF's regex engine (Oniguruma, in ``tokenizers``) has its own Unicode, older in some
#: releases (Unicode 14 in tokenizers 0.15's) and older than a newer Python's (3.15: Unicode 17): a character one
#: calls a letter and the other unassigned would be cut apart, silently (the probes' ids rarely show it).
NEWER_UNICODE = ((0x10EC0, 0x10F00), (0x11B00, 0x11B0A), (0x11F00, 0x11F5A), (0x1D2C0, 0x1D2D4), (0x1E030, 0x1E090),
                 (0x1E4D0, 0x1E4FA), (0x31350, 0x31360), (0x2EBF0, 0x2EC00), (0x2FFC, 0x3000), (0x105C0, 0x105F4),
                 (0x10D40, 0x10D90), (0x11380, 0x113E3), (0x116D0, 0x116E4), (0x11BC0, 0x11BE2), (0x16100, 0x1613A),
                 (0x16D40, 0x16D7A), (0x1CCF0, 0x1CCFA), (0x1E5D0, 0x1E600), (0x10940, 0x10960), (0x11B60, 0x11B68),
                 (0x11DB0, 0x11DEA), (0x16EA0, 0x16EE0), (0x1E6C0, 0x1E700), (0x323B0, 0x323C0))


def newer_unicode_texts() -> list[str]:
    """One text per character of :data:`NEWER_UNICODE` beside a letter, a digit, a sign and a space."""
    return [f"a{c}1{c}!{c} {c}{c}a" for start, end in NEWER_UNICODE for c in map(chr, range(start, end))]


def cuts_as_hf(kernel, classes: bytes, hf, texts: list[str]) -> bool:
    """Whether the kernel cuts ``texts`` (those it does not decline) into HF's ByteLevel pre-tokens."""
    words: list[str] = []

    def miss(word: str) -> bytes:
        words.append(word)
        return array("i", [len(words) - 1]).tobytes()

    raw_ids, raw_lengths = kernel.byte_level_encode(texts, classes, kernel.word_cache(), miss)
    ids, lengths = np.frombuffer(raw_ids, dtype=np.int32), np.frombuffer(raw_lengths, dtype=np.int64)
    at = 0
    for text, length in zip(texts, lengths.tolist()):
        if length < 0:
            continue
        mine = [words[i] for i in ids[at:at + length].tolist()]
        at += length
        if mine != [text[a:b] for _, (a, b) in hf.pre_tokenizer.pre_tokenize_str(text)]:
            return False
    return True


def kitoken_unsupported(tokenizer_json: str) -> str | None:
    """Why this tokenizer is outside what kitoken has been shown to reproduce, or None."""
    spec = tokenizer_spec(tokenizer_json)
    if isinstance(spec, str):
        return spec
    model = spec.get("model") or {}
    if model.get("type") != "BPE":
        return "the model is not BPE"
    if spec.get("normalizer") is not None:
        return "a normalizer is set (kitoken lower-cases final sigma differently)"
    pre = spec.get("pre_tokenizer") or {}
    if pre.get("type") != "ByteLevel" or pre.get("use_regex", True) is not True:
        return "the pre-tokenizer is not ByteLevel with its regex"
    if model.get("dropout") or model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
        return "BPE dropout, a continuation prefix or an end-of-word suffix is set"
    if model.get("byte_fallback") or model.get("ignore_merges"):
        return "byte_fallback or ignore_merges is set"
    if spec.get("added_tokens"):
        return "added tokens are matched in text"
    return None


class KitokenEncoder:
    """``encode_many`` on kitoken: (flat int32 ids, int64 lengths)."""

    name = "kitoken"

    def __init__(self, backend):
        self._backend = backend

    def __call__(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        if not texts:
            return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int64)
        rows = self._backend.encode_all(list(texts))
        lengths = np.fromiter((len(row) for row in rows), dtype=np.int64, count=len(rows))
        flat = np.fromiter((i for row in rows for i in row), dtype=np.int32, count=int(lengths.sum()))
        return flat, lengths


def _kitoken_encoder(tokenizer_json: str) -> KitokenEncoder | None:
    reason = kitoken_unsupported(tokenizer_json)
    if reason is not None:
        log.info("fast BPE not used: %s", reason)
        return None
    try:
        import kitoken
    except ImportError:
        log.info("fast BPE not used: kitoken is not installed")
        return None
    try:
        encoder = KitokenEncoder(kitoken.Kitoken.from_tokenizers(tokenizer_json.encode()))
    except Exception as error:  # kitoken raises bare exceptions for what it cannot read
        log.info("fast BPE not used: kitoken refuses this tokenizer (%s)", error)
        return None
    return encoder


def make_fast_encoder(tokenizer_json: str, *, check: bool = True, hf=None):
    """An encoder with exactly HF's ids for this byte-level BPE (the word cache, else kitoken), or None (use HF).
    ``hf``: the HF tokenizer of ``tokenizer_json`` when the caller has it (not read again)."""
    spec = tokenizer_spec(tokenizer_json)
    if isinstance(spec, str):
        log.info("fast BPE not used: %s", spec)
        return None
    if hf is None:
        from tokenizers import Tokenizer

        hf = Tokenizer.from_str(tokenizer_json)
    for make in (lambda: _word_cache_encoder(spec, hf), lambda: _kitoken_encoder(tokenizer_json)):
        encoder = make()
        if encoder is None:
            continue
        if check and not agrees_with_hf(encoder, tokenizer_json, BPE_PROBES, hf=hf):
            log.warning("fast BPE not used: %s differs from HF tokenizers on the probe texts", encoder.name)
            continue
        return encoder
    return None
