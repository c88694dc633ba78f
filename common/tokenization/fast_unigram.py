"""A faster Unigram (Metaspace) encoder with exactly HF ``tokenizers``' ids.

HF ``tokenizers`` encodes an ALBERT-style Unigram at ~0.5 CPU-s per MB of
Wikipedia text; most of that is not the Unigram lattice but the normalizer
and the Metaspace pre-tokenizer run with offsets kept.  Here the normalizer's
steps are C-speed ``str`` methods (``unicodedata.normalize``, ``str.lower``,
``str.strip``, ``str.replace``, ``re``), the pre-tokenizer is ``str.split``
on ``▁``, and each pre-token's ids come from a bounded dict filled on a miss
by HF's own model (``model.tokenize``), so the ids are HF's by construction:
a Unigram model sees one pre-token at a time.

Where Python's Unicode tables differ from the ones ``tokenizers`` was built
with (Python 3.11 has Unicode 14.0, ``tokenizers``' normalization tables
are older, its lower-casing newer), a step is run by HF's own component on
any text holding a character it may treat otherwise: unassigned ones, and
the assigned ones of :data:`_TABLE_DIFFERENCES`, found by comparing every
code point (tests/common/tokenization/test_fast_unigram.py).  Python's
``str.lower`` gives a word-final ``Σ`` as ``ς`` (HF: ``σ``), so ``Σ`` is
mapped first; ``str.strip()`` strips ``\\x1c-\\x1f`` (Rust's
``is_whitespace`` does not), so Strip names Rust's whitespace.  SentencePiece's
``Precompiled`` charsmap is read into a per-character table; HF applies it
per grapheme cluster (the whole cluster when under 6 bytes, by its shortest
matching prefix), so a text holding a character that can join a cluster
(combining marks, ZWJ, jamo, ``\\r``) has that step run by HF.

Anything else (another pre-tokenizer or normalizer, a Replace regex not
listed, added tokens matched in text, truncation or padding, a ``tokenizers``
or Unicode release the tables were not checked against) gets ``None`` with a
logged reason (HF is used); and, as for nanotoken, the encoder is compared
with HF on probe texts when it is made.
"""

from __future__ import annotations

import base64
import functools
import json
import logging
import re
import unicodedata
from array import array
from collections.abc import Callable

import numpy as np

from common.tokenization.fast_wordpiece import PROBES, agrees_with_hf

log = logging.getLogger(__name__)

#: Pre-tokens kept (most of the speed on Wikipedia text: words are Zipf-distributed); cleared when passed.
CACHE_ENTRIES = 1 << 17

#: Rust's ``char::is_whitespace`` (Unicode White_Space), what HF's Strip strips.
RUST_WHITESPACE = ("\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
                   "\u200a\u2028\u2029\u202f\u205f\u3000")

#: The ``tokenizers`` release and Python Unicode version :data:`_TABLE_DIFFERENCES` was measured with.
VERIFIED_WITH = ("0.23.3", "14.0.0")
#: Assigned (in Python's tables) code points whose NFC/NFD/NFKC/NFKD/StripAccents/Lowercase differ between
#: Python and ``tokenizers`` (inclusive ranges), measured over every code point.
_TABLE_DIFFERENCES: tuple[tuple[int, int], ...] = ()

#: Replace patterns (as in the JSON) with a Python ``re`` of the same matches (Oniguruma's ``^``/``$`` are
#: line anchors): others are not emulated.
_REGEXES = {" {2,}": re.compile(" {2,}"), "^ +| +$": re.compile("^ +| +$", re.MULTILINE)}

#: Characters after which a grapheme cluster may go on (or before which, for Prepend), so HF's
#: Precompiled, which works per cluster, may not act per character; and unassigned ones.
_JOINING = r"[^\p{GCB=Other}\p{GCB=Control}\p{GCB=LF}\p{GCB=LV}\p{GCB=LVT}]|\p{Cn}"

#: More probes: what Unigram's normalizers and Metaspace are subtle about.
UNIGRAM_PROBES = PROBES + (
    "ΟΔΟΣ Σ σς ΣΑΣ ΣΣ aΣ. Σa", "a\x1cb\x1d \x1e\x1f", "\x1c x \x1f", "\u0378\u0379 x \U000E0080 \U0003134B",
    "a  b   c    d", "  leading and trailing  ", "\t\ttabs\t\t", "a\u00a0b \u00a0 c\u3000d \u3000",
    "\u3000\u3000x\u3000\u3000", "\u2028\u2029\x85", "x\r\n\r\ny\n\nz \n w", "▁a ▁▁b ▁", "İİ i̇ ı",
    "\u32ff \ua7f2 \U00010781 \u0898 \U00011938", "ﬁ ﬀ ① ㈱ ＡＢＣ ｶﾀｶﾅ", "e\u0301 \u0301x a\u0301\u0302 ̈",
    "한국어 \u1100\u1161\u11a8", "👨\u200d👩\u200d👧 🇫🇷 ❤️ a\u200cb", "``quoted'' text", "ल्लि ไทย",
    "First paragraph.\n\nSecond, after a break.\n \nThird\r\n\tfourth.\n\n\n他来了。\n",
)

Step = Callable[[str], str]


def _lower(text: str) -> str:
    """HF's Lowercase: per character, so a capital sigma is always ``σ`` (Python gives a final one as ``ς``)."""
    return text.replace("\u03a3", "\u03c3").lower()


@functools.cache
def _marks() -> re.Pattern[str]:
    """Every mark (category M) in Python's tables: what HF's StripAccents drops."""
    marks = "".join(chr(c) for c in range(0x110000)
                    if not 0xD800 <= c < 0xE000 and unicodedata.category(chr(c))[0] == "M")
    return re.compile(f"[{re.escape(marks)}]+")


@functools.cache
def _unsafe() -> re.Pattern[str]:
    """A character that Python's tables may treat otherwise than ``tokenizers``': unassigned in Python, or
    listed in :data:`_TABLE_DIFFERENCES`."""
    ranges: list[tuple[int, int]] = []
    start = None
    for c in range(0x110000):
        unassigned = not 0xD800 <= c < 0xE000 and unicodedata.category(chr(c)) == "Cn"
        if unassigned and start is None:
            start = c
        elif not unassigned and start is not None:
            ranges.append((start, c - 1))
            start = None
    if start is not None:
        ranges.append((start, 0x10FFFF))
    ranges += _TABLE_DIFFERENCES
    return re.compile("[" + "".join(f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in ranges) + "]")


def precompiled_table(charsmap: bytes) -> dict[str, str]:
    """What SentencePiece's precompiled charsmap (a darts-clone double-array trie, then the replacements, NUL
    ended) gives each single character, found as spm_precompiled does: the shortest key that is a prefix of
    the character's UTF-8.  Every code point is walked through the trie at once (numpy)."""
    size = int.from_bytes(charsmap[:4], "little")
    units = np.frombuffer(charsmap[4:4 + size], dtype="<u4").astype(np.int64)
    replacements = charsmap[4 + size:]
    codes = np.array([c for c in range(0x110000) if not 0xD800 <= c < 0xE000], dtype=np.int64)
    encoded = [chr(c).encode() for c in codes.tolist()]
    width = np.array([len(b) for b in encoded], dtype=np.int64)
    utf8 = np.zeros((len(codes), 4), dtype=np.int64)
    flat = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    rows = np.repeat(np.arange(len(codes)), width)
    columns = np.arange(len(flat)) - np.repeat(np.cumsum(width) - width, width)
    utf8[rows, columns] = flat

    def offset(unit: np.ndarray) -> np.ndarray:
        return (unit >> 10) << ((unit & (1 << 9)) >> 6)

    node = np.zeros(len(codes), dtype=np.int64) ^ offset(units[0])
    alive = np.ones(len(codes), dtype=bool)
    found = np.full(len(codes), -1, dtype=np.int64)
    for column in range(4):
        byte = utf8[:, column]
        alive &= (column < width) & (byte != 0)
        node = np.where(alive, node ^ byte, 0)
        inside = alive & (node >= 0) & (node < len(units))
        unit = np.where(inside, units[np.clip(node, 0, len(units) - 1)], 0)
        alive &= inside & ((unit & ((1 << 31) | 0xFF)) == byte)
        node = np.where(alive, node ^ offset(unit), 0)
        leaf = alive & (((unit >> 8) & 1) == 1) & (found < 0) & (node < len(units))
        found = np.where(leaf, units[np.clip(node, 0, len(units) - 1)] & ((1 << 31) - 1), found)
    table = {}
    for code, start in zip(codes[found >= 0].tolist(), found[found >= 0].tolist()):
        end = replacements.find(b"\0", start)
        table[chr(code)] = replacements[start:end if end >= 0 else len(replacements)].decode()
    return table


def _component(spec: dict):
    """HF's own normalizer for one step (run where the emulation cannot vouch for a text)."""
    from tokenizers import Tokenizer

    return Tokenizer.from_str(json.dumps({
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": spec,
        "pre_tokenizer": None, "post_processor": None, "decoder": None,
        "model": {"type": "WordLevel", "vocab": {"x": 0}, "unk_token": "x"}})).normalizer


class _Guarded:
    """A step emulated in Python, run by HF's component on a text holding a character of ``unsafe``."""

    def __init__(self, fast: Step, unsafe: re.Pattern, spec: dict, ascii_safe: bool = True):
        self._fast, self._unsafe, self._spec, self._ascii_safe = fast, unsafe, spec, ascii_safe
        self._hf = None

    def __call__(self, text: str) -> str:
        if (self._ascii_safe and text.isascii()) or self._unsafe.search(text) is None:
            return self._fast(text)
        if self._hf is None:
            self._hf = _component(self._spec)
        return self._hf.normalize_str(text)


def _precompiled_step(table: dict[str, str]) -> Step:
    keys = re.compile("[" + "".join(re.escape(k) for k in sorted(table)) + "]") if table else None

    def step(text: str) -> str:
        return text if keys is None else keys.sub(lambda match: table[match.group()], text)

    return step


def _steps(normalizer: dict | None) -> list[Step] | str:
    """The normalizer as Python steps, or why it cannot be."""
    if normalizer is None:
        return []
    kind = normalizer.get("type")
    if kind == "Sequence":
        steps: list[Step] = []
        for inner in normalizer.get("normalizers") or []:
            got = _steps(inner)
            if isinstance(got, str):
                return got
            steps += got
        return steps
    if kind in ("NFC", "NFD", "NFKC", "NFKD"):
        return [_Guarded(functools.partial(unicodedata.normalize, kind), _unsafe(), normalizer)]
    if kind == "Lowercase":
        return [_Guarded(_lower, _unsafe(), normalizer)]
    if kind == "StripAccents":
        marks = _marks()
        return [_Guarded(lambda text: marks.sub("", text), _unsafe(), normalizer)]
    if kind == "Strip":
        left, right = normalizer.get("strip_left"), normalizer.get("strip_right")
        if left and right:
            return [lambda text: text.strip(RUST_WHITESPACE)]
        if left:
            return [lambda text: text.lstrip(RUST_WHITESPACE)]
        if right:
            return [lambda text: text.rstrip(RUST_WHITESPACE)]
        return []
    if kind == "Replace":
        pattern, content = normalizer.get("pattern") or {}, normalizer.get("content")
        if not isinstance(content, str):
            return "a Replace without a string content"
        if isinstance(pattern.get("String"), str) and pattern["String"]:
            old = pattern["String"]
            return [lambda text: text.replace(old, content)]
        regex = _REGEXES.get(pattern.get("Regex"))
        if regex is None:
            return f"the Replace pattern {pattern!r} is not one this module emulates"
        if "\\" in content:
            return "a Replace content with a backslash"
        return [lambda text: regex.sub(content, text) if regex.search(text) else text]
    if kind == "Precompiled":
        charsmap = normalizer.get("precompiled_charsmap")
        if not isinstance(charsmap, str):
            return "a Precompiled normalizer without a charsmap"
        try:
            table = precompiled_table(base64.b64decode(charsmap))
        except (ValueError, UnicodeDecodeError, IndexError) as error:
            return f"the precompiled charsmap cannot be read ({error})"
        import regex as regex_module

        joining = regex_module.compile(_JOINING)
        return [_Guarded(_precompiled_step(table), joining, normalizer, ascii_safe=False)]
    return f"the normalizer {kind!r} is not emulated"


def unsupported_reason(tokenizer_json: str) -> str | None:
    """Why this tokenizer is outside what :class:`UnigramEncoder` reproduces, or None."""
    try:
        spec = json.loads(tokenizer_json)
    except ValueError as error:
        return f"not JSON: {error}"
    if not isinstance(spec, dict):
        return "not a tokenizers JSON object"
    if spec.get("truncation") is not None or spec.get("padding") is not None:
        return "truncation or padding is set (HF applies it when encoding)"
    model = spec.get("model") or {}
    if model.get("type") != "Unigram":
        return "the model is not Unigram"
    pre = spec.get("pre_tokenizer") or {}
    if pre.get("type") != "Metaspace" or pre.get("replacement") != "\u2581" or pre.get("split") is not True:
        return "the pre-tokenizer is not Metaspace('▁', split)"
    if pre.get("prepend_scheme") not in ("always", "first", "never"):
        return f"Metaspace prepend_scheme {pre.get('prepend_scheme')!r}"
    if spec.get("added_tokens"):
        return "added tokens are matched in text"
    steps = _steps(spec.get("normalizer"))
    if isinstance(steps, str):
        return steps
    import tokenizers

    if (tokenizers.__version__, unicodedata.unidata_version) != VERIFIED_WITH and _table_steps(spec):
        return (f"Unicode tables checked against tokenizers {VERIFIED_WITH[0]} / Python's Unicode "
                f"{VERIFIED_WITH[1]}, not {tokenizers.__version__} / {unicodedata.unidata_version}")
    return None


def _table_steps(spec: dict) -> bool:
    """Whether the normalizer has a step that leans on Unicode tables (NF*, Lowercase, StripAccents)."""
    text = json.dumps(spec.get("normalizer"))
    return any(f'"type": "{kind}"' in text for kind in ("NFC", "NFD", "NFKC", "NFKD", "Lowercase", "StripAccents"))


class UnigramEncoder:
    """``encode_many`` for a Unigram over Metaspace: (flat int32 ids, int64 lengths), HF's ids."""

    name = "unigram-cache"

    def __init__(self, hf, steps: list[Step], prepend: bool):
        self._model = hf.model
        self._steps = steps
        self._prepend = prepend
        self._cache: dict = {}
        self.clear_cache()

    def clear_cache(self) -> None:
        """Forget the pre-tokens' ids (for benchmarks of a cold process; and when the cache is full)."""
        self._cache.clear()
        self._cache[None] = b""  # an empty first part: no pre-token

    def _fill(self, parts: list) -> None:
        cache, tokenize = self._cache, self._model.tokenize
        missing = set(parts).difference(cache)
        if len(cache) + len(missing) > CACHE_ENTRIES:
            self.clear_cache()
            missing = set(parts).difference(cache)
        for key in missing:
            piece = key[0] if isinstance(key, tuple) else "\u2581" + key
            cache[key] = array("i", [token.id for token in tokenize(piece)]).tobytes()

    def normalize(self, text: str) -> str:
        for step in self._steps:
            text = step(text)
        return text

    def __call__(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        cache = self._cache
        get = cache.get
        chunks = []
        for text in texts:
            for step in self._steps:
                text = step(text)
            parts: list = text.replace(" ", "\u2581").split("\u2581")
            first = parts[0]
            if not first:
                parts[0] = None
            elif not self._prepend:
                parts[0] = (first,)
            try:
                chunks.append(b"".join(map(get, parts)))
            except TypeError:  # a pre-token not in the cache
                self._fill(parts)
                chunks.append(b"".join(map(cache.__getitem__, parts)))
        lengths = np.fromiter(map(len, chunks), dtype=np.int64, count=len(chunks)) // 4
        ids = np.frombuffer(bytearray(b"".join(chunks)), dtype=np.int32)
        return ids, lengths


def make_fast_encoder(tokenizer_json: str, *, check: bool = True, hf=None) -> UnigramEncoder | None:
    """An encoder with exactly HF's ids for this Unigram tokenizer, or None (use HF).  ``hf``: the HF tokenizer
    of ``tokenizer_json`` when the caller has it."""
    reason = unsupported_reason(tokenizer_json)
    if reason is not None:
        log.info("fast Unigram not used: %s", reason)
        return None
    if hf is None:
        from tokenizers import Tokenizer

        hf = Tokenizer.from_str(tokenizer_json)
    spec = json.loads(tokenizer_json)
    steps = _steps(spec.get("normalizer"))
    assert not isinstance(steps, str)
    encoder = UnigramEncoder(hf, steps, prepend=spec["pre_tokenizer"]["prepend_scheme"] != "never")
    if check and not agrees_with_hf(encoder, tokenizer_json, UNIGRAM_PROBES, hf=hf):
        log.warning("fast Unigram not used: it differs from HF tokenizers on the probe texts")
        return None
    return encoder
