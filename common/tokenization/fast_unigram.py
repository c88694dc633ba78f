"""A faster Unigram (Metaspace) encoder with exactly HF ``tokenizers``' ids.

HF ``tokenizers`` encodes an ALBERT-style Unigram at ~0.5 CPU-s per MB of
Wikipedia text; most of that is not the Unigram lattice but the normalizer
and the Metaspace pre-tokenizer run with offsets kept.  Here a text is split
on spaces and each raw word's ids come from a bounded dict (:class:`_Words`):
a warm cache normalizes nothing.  A word not kept yet is normalized by the
normalizer's steps in C-speed ``str`` methods (``unicodedata.normalize``,
``str.lower``, ``str.strip``, ``str.replace``, ``re``) and tokenized by HF's
own model (``model.tokenize``), so the ids are HF's by construction: a
Unigram model sees one pre-token at a time.  A text the word path cannot
vouch for takes the per-text path: the whole normalizer, then ``str.split``
on ``▁`` as Metaspace splits, pre-tokens kept the same way.

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
from dataclasses import dataclass

import numpy as np
from tokenizers.normalizers import Normalizer

from common.tokenization.fast_wordpiece import PROBES, agrees_with_hf, tokenizer_spec

log = logging.getLogger(__name__)

#: Words (and pre-tokens) kept, each cache (most of the speed on Wikipedia text: words are Zipf-distributed);
#: cleared when passed (~20 MB when full: ~150 bytes a word).
CACHE_ENTRIES = 1 << 17

#: Rust's ``char::is_whitespace`` (Unicode White_Space), what HF's Strip strips.
RUST_WHITESPACE = ("\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
                   "\u200a\u2028\u2029\u202f\u205f\u3000")

#: Whitespace a normalizer may turn into a space, alone (NFKC: no-break spaces; Precompiled: line feed and tab
#: too): the word path splits on them as on spaces.
_SPACES = "\n\t\xa0\u3000"

#: The ``tokenizers`` release and Python Unicode version :data:`_TABLE_DIFFERENCES` was measured with.
VERIFIED_WITH = ("0.23.3", "14.0.0")
#: Code points of the BMP, assigned in Python's tables, whose NFC/NFD/NFKC/NFKD/StripAccents/Lowercase
#: differ between Python and ``tokenizers`` (inclusive ranges; marks and letters newer than tokenizers'
#: normalization tables), measured over every code point (tests/common/tokenization/test_fast_unigram.py).
_TABLE_DIFFERENCES: tuple[tuple[int, int], ...] = (
    (0x07FD, 0x07FD), (0x0898, 0x089F), (0x08CA, 0x08D3), (0x09FE, 0x09FE), (0x0AFA, 0x0AFF), (0x0B55, 0x0B55),
    (0x0C04, 0x0C04), (0x0C3C, 0x0C3C), (0x0D00, 0x0D00), (0x0D3B, 0x0D3C), (0x0D81, 0x0D81), (0x0EBA, 0x0EBA),
    (0x1715, 0x1715), (0x180F, 0x180F), (0x1ABF, 0x1ACE), (0x1CF2, 0x1CF3), (0x1CF7, 0x1CF7), (0x1DF6, 0x1DFA),
    (0x32FF, 0x32FF), (0xA7F2, 0xA7F4), (0xA82C, 0xA82C), (0xA8FF, 0xA8FF), (0xAB69, 0xAB69))

#: Replace patterns (as in the JSON) with a Python ``re`` of the same matches (Oniguruma's ``^``/``$`` are
#: line anchors): others are not emulated.
_REGEXES = {" {2,}": re.compile(" {2,}"), "^ +| +$": re.compile("^ +| +$", re.MULTILINE)}

#: Characters after which a grapheme cluster may go on (or before which, for Prepend), so HF's
#: Precompiled, which works per cluster, may not act per character; and unassigned ones.
_JOINING = r"[^\p{GCB=Other}\p{GCB=Control}\p{GCB=LF}\p{GCB=LV}\p{GCB=LVT}]|\p{Cn}|[\x00\U00010000-\U0010ffff]"

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


#: Characters past the Basic Multilingual Plane are rare in text: a text with one has the table-led steps run
#: by HF (their tables are kept to the BMP, which ``re`` tests from a bitmap; larger classes it scans).
_ASTRAL = "\U00010000-\U0010ffff"


@functools.cache
def _marks() -> re.Pattern[str]:
    """Every mark (category M) of the BMP in Python's tables: what HF's StripAccents drops."""
    marks = "".join(chr(c) for c in range(0x10000)
                    if not 0xD800 <= c < 0xE000 and unicodedata.category(chr(c))[0] == "M")
    return re.compile(f"[{re.escape(marks)}]+")


def _class(ranges: list[tuple[int, int]]) -> str:
    return "".join(f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in ranges)


@functools.cache
def _unsafe() -> re.Pattern[str]:
    """A character that Python's tables may treat otherwise than ``tokenizers``': unassigned in Python (or
    a surrogate), listed in :data:`_TABLE_DIFFERENCES`, or past the BMP."""
    ranges: list[tuple[int, int]] = []
    start = None
    for c in range(0x10000):
        unassigned = unicodedata.category(chr(c)) in ("Cn", "Cs")
        if unassigned and start is None:
            start = c
        elif not unassigned and start is not None:
            ranges.append((start, c - 1))
            start = None
    if start is not None:
        ranges.append((start, 0xFFFF))
    ranges += _TABLE_DIFFERENCES
    return re.compile(f"[{_class(ranges)}{_ASTRAL}]")


def precompiled_table(charsmap: bytes) -> dict[str, str]:
    """What SentencePiece's precompiled charsmap (a darts-clone double-array trie, then the replacements, NUL
    ended) gives each character of the BMP alone, found as spm_precompiled does: the shortest key that is a
    prefix of the character's UTF-8.  Every such code point is walked through the trie at once (numpy)."""
    size = int.from_bytes(charsmap[:4], "little")
    if size % 4 or size + 4 > len(charsmap) or size == 0:
        raise ValueError("the trie's size does not fit the charsmap")
    units = np.frombuffer(charsmap[4:4 + size], dtype="<u4").astype(np.int64)
    replacements = charsmap[4 + size:]
    codes = np.array([c for c in range(1, 0x10000) if not 0xD800 <= c < 0xE000], dtype=np.int64)
    width = 1 + (codes >= 0x80) + (codes >= 0x800)
    lead = np.select([width == 1, width == 2], [codes, 0xC0 | (codes >> 6)], 0xE0 | (codes >> 12))
    second = np.where(width == 2, 0x80 | (codes & 0x3F), 0x80 | ((codes >> 6) & 0x3F))
    third = 0x80 | (codes & 0x3F)
    utf8 = np.stack([lead, second, third], axis=1)

    def offset(unit: np.ndarray) -> np.ndarray:
        return (unit >> 10) << ((unit & (1 << 9)) >> 6)

    last = len(units) - 1
    node = np.zeros(len(codes), dtype=np.int64) ^ offset(units[0])
    alive = np.ones(len(codes), dtype=bool)
    found = np.full(len(codes), -1, dtype=np.int64)
    for column in range(3):
        byte = utf8[:, column]
        alive &= column < width
        node = np.where(alive, node ^ byte, 0)
        alive &= (node >= 0) & (node <= last)
        unit = np.where(alive, units[np.clip(node, 0, last)], 0)
        alive &= (unit & ((1 << 31) | 0xFF)) == byte
        node = np.where(alive, node ^ offset(unit), 0)
        leaf = alive & (((unit >> 8) & 1) == 1) & (found < 0) & (node >= 0) & (node <= last)
        found = np.where(leaf, units[np.clip(node, 0, last)] & ((1 << 31) - 1), found)
    table = {}
    for code, start in zip(codes[found >= 0].tolist(), found[found >= 0].tolist()):
        end = replacements.find(b"\0", start)
        table[chr(code)] = replacements[start:end if end >= 0 else len(replacements)].decode()
    return table


def _component(spec: dict) -> Normalizer:
    """HF's own normalizer for one step (run where the emulation cannot vouch for a text)."""
    from tokenizers import Tokenizer

    normalizer = Tokenizer.from_str(json.dumps({
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": spec,
        "pre_tokenizer": None, "post_processor": None, "decoder": None,
        "model": {"type": "WordLevel", "vocab": {"x": 0}, "unk_token": "x"}})).normalizer
    assert normalizer is not None
    return normalizer


class _Guarded:
    """A step emulated in Python, run by HF's component on a text holding a character of ``unsafe``."""

    def __init__(self, fast: Step, unsafe: re.Pattern, spec: dict, ascii_safe: bool = True):
        self._fast, self._unsafe, self._spec, self._ascii_safe = fast, unsafe, spec, ascii_safe
        self._hf: Normalizer | None = None

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


@dataclass
class _Step:
    """One normalizer step in Python.  ``kind``: ``char`` (acts on each character or grapheme alone: a space
    stays a space and nothing spans one), ``strip`` (the text's edges), ``collapse`` (runs of spaces)."""

    run: Step
    kind: str
    #: For a Precompiled step: characters that may join a grapheme cluster (HF maps clusters, not characters).
    joining: object = None
    #: For a ``strip`` step: the characters it strips.
    strips: str = ""
    #: For a Replace step: its pattern.
    pattern: str = ""


def _steps(normalizer: dict | None) -> list[_Step] | str:
    """The normalizer as Python steps, or why it cannot be."""
    if normalizer is None:
        return []
    kind = normalizer.get("type")
    if kind == "Sequence":
        steps: list[_Step] = []
        for inner in normalizer.get("normalizers") or []:
            got = _steps(inner)
            if isinstance(got, str):
                return got
            steps += got
        return steps
    if kind in ("NFC", "NFD", "NFKC", "NFKD"):
        return [_Step(_Guarded(functools.partial(unicodedata.normalize, kind), _unsafe(), normalizer), "char")]
    if kind == "Lowercase":
        return [_Step(_Guarded(_lower, _unsafe(), normalizer), "char")]
    if kind == "StripAccents":
        marks = _marks()
        return [_Step(_Guarded(lambda text: marks.sub("", text), _unsafe(), normalizer), "char")]
    if kind == "Strip":
        left, right = normalizer.get("strip_left"), normalizer.get("strip_right")
        if left and right:
            return [_Step(lambda text: text.strip(RUST_WHITESPACE), "strip", strips=RUST_WHITESPACE)]
        if left:
            return [_Step(lambda text: text.lstrip(RUST_WHITESPACE), "other")]
        if right:
            return [_Step(lambda text: text.rstrip(RUST_WHITESPACE), "other")]
        return []
    if kind == "Replace":
        pattern, content = normalizer.get("pattern") or {}, normalizer.get("content")
        if not isinstance(content, str):
            return "a Replace without a string content"
        old = pattern.get("String")
        if isinstance(old, str) and old:
            spaced = " " in old or " " in content
            return [_Step(lambda text: text.replace(old, content), "other" if spaced else "char", pattern=old)]
        source = pattern.get("Regex")
        if not isinstance(source, str) or source not in _REGEXES or content != {" {2,}": " ", "^ +| +$": ""}[source]:
            return f"the Replace {pattern!r} -> {content!r} is not one this module emulates"
        regex = _REGEXES[source]
        if source == " {2,}":
            return [_Step(lambda text: regex.sub(" ", text) if "  " in text else text, "collapse")]
        return [_Step(lambda text: regex.sub("", text), "strip", strips=" ")]
    if kind == "Precompiled":
        charsmap = normalizer.get("precompiled_charsmap")
        if not isinstance(charsmap, str):
            return "a Precompiled normalizer without a charsmap"
        try:
            table = precompiled_table(base64.b64decode(charsmap))
        except (ValueError, UnicodeDecodeError) as error:
            return f"the precompiled charsmap cannot be read ({error})"
        import regex as regex_module

        joining = regex_module.compile(_JOINING)
        run = _Guarded(_precompiled_step(table), joining, normalizer, ascii_safe=False)
        return [_Step(run, "other" if " " in table else "char", joining=joining)]
    return f"the normalizer {kind!r} is not emulated"


@dataclass
class _Words:
    """How a text is encoded word by word (split on spaces), when its normalizer allows: character steps,
    then stripping and collapsing spaces.  A word's ids are then its own ('▁' + the word normalized), kept
    by raw word, so a warm cache normalizes nothing.  A word whose normalized form holds a space or the
    ``▁``, is empty, or has whitespace (or a joining character) at an edge is "dirty": its text takes the
    per-text path."""

    steps: list[_Step]
    strip: str
    spaces: str
    joining: list
    #: A strip step anchored at every line (Oniguruma's ``^ +| +$``): a word holding a line feed is dirty.
    lines: bool

    def run(self, text: str) -> str:
        for step in self.steps:
            text = step.run(text)
        return text

    def normalize(self, words: list[str]) -> list[str | None]:
        """The words normalized, None for a dirty one.  The character steps run once over the words joined by
        spaces (nothing spans a space), unless a word's normalized form holds a space (then word by word)."""
        edges = [bool(self.joining) and self._joins(word) for word in words]
        kept = [word for word, joins in zip(words, edges) if not joins]
        parts = self.run(" ".join(kept)).split(" ")
        if len(parts) != len(kept):
            parts = [self.run(word) for word in kept]
        normalized = iter(parts)
        return [None if joins else self._clean(word, next(normalized)) for word, joins in zip(words, edges)]

    def _joins(self, word: str) -> bool:
        """A character at the word's edge may join a space's grapheme cluster."""
        return any(joining.match(word) or joining.match(word[-1]) for joining in self.joining)

    def _clean(self, word: str, normalized: str) -> str | None:
        if not normalized or " " in normalized or "\u2581" in normalized:
            return None
        if self.lines and "\n" in normalized:
            return None
        # Whitespace the normalizer made at a word's edge would be stripped at the text's edges.
        if normalized[0] in RUST_WHITESPACE and word[0] not in RUST_WHITESPACE:
            return None
        if normalized[-1] in RUST_WHITESPACE and word[-1] not in RUST_WHITESPACE:
            return None
        return normalized


def _words(steps: list[_Step], prepend: bool) -> _Words | None:
    """The word path for these steps, or None (every text takes the per-text path)."""
    kinds = [step.kind for step in steps]
    chars = kinds.index("strip") if "strip" in kinds else len(kinds)
    chars = min(chars, kinds.index("collapse") if "collapse" in kinds else len(kinds))
    if not prepend or any(kind != "char" for kind in kinds[:chars]):
        return None
    tail = kinds[chars:]
    if "collapse" not in tail or "strip" not in tail or any(kind not in ("strip", "collapse") for kind in tail):
        return None
    words = _Words(steps[:chars], "".join(step.strips for step in steps[chars:]), "",
                   [step.joining for step in steps[:chars] if step.joining is not None],
                   any(step.strips == " " for step in steps[chars:]))
    # A tab or line feed that the character steps turn into a space, alone as in any text (no Replace pattern
    # holds it), is a space between words: replaced first.
    patterns = "".join(step.pattern for step in steps[:chars])
    words.spaces = "".join(char for char in _SPACES if char not in patterns and words.run(char) == " ")
    # Stripping the raw text's edges must be what the normalizer does: each character it strips
    # normalizes to whitespace only.
    for char in words.strip:
        if words.run(char).strip(RUST_WHITESPACE if "\t" in words.strip else " "):
            return None
    return words


def unsupported_reason(tokenizer_json: str) -> str | None:
    """Why this tokenizer is outside what :class:`UnigramEncoder` reproduces, or None."""
    spec = tokenizer_spec(tokenizer_json)
    if isinstance(spec, str):
        return spec
    model = spec.get("model") or {}
    if model.get("type") != "Unigram":
        return "the model is not Unigram"
    pre = spec.get("pre_tokenizer") or {}
    if pre.get("type") != "Metaspace" or pre.get("replacement") != "\u2581" or pre.get("split") is not True:
        return "the pre-tokenizer is not Metaspace('▁', split)"
    if pre.get("prepend_scheme") not in ("always", "never"):
        # "first" prepends only where the normalized text still starts at the original's offset 0, so not
        # after Strip removed leading whitespace: an offset-tracking subtlety not emulated.
        return f"Metaspace prepend_scheme {pre.get('prepend_scheme')!r} is not emulated"
    if spec.get("added_tokens"):
        return "added tokens are matched in text"
    if not isinstance(spec.get("normalizer"), dict | None):
        return "the normalizer is not an object"
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

    def __init__(self, hf, steps: list[_Step], prepend: bool):
        self._model = hf.model
        self._steps = [step.run for step in steps]
        self._prepend = prepend
        self._words = _words(steps, prepend)
        #: Pre-token (after '▁', or a 1-tuple for a first one without) -> its ids as int32 bytes.
        self._pieces: dict = {}
        #: Raw word -> its ids as int32 bytes, or None for a dirty word (the word path).
        self._by_word: dict = {}
        self.clear_cache()

    def clear_cache(self) -> None:
        """Forget the ids kept (for benchmarks of a cold process; and when a cache is full)."""
        self._pieces.clear()
        self._pieces[None] = b""  # an empty first part: no pre-token
        self._by_word.clear()
        self._by_word[""] = b""  # a run of spaces, collapsed

    def _tokens(self, piece: str) -> bytes:
        return array("i", [token.id for token in self._model.tokenize(piece)]).tobytes()

    def _fill_pieces(self, parts: list) -> None:
        cache = self._pieces
        missing = set(parts).difference(cache)
        if len(cache) + len(missing) > CACHE_ENTRIES:
            self.clear_cache()
            missing = set(parts).difference(cache)
        for key in missing:
            cache[key] = self._tokens(key[0] if isinstance(key, tuple) else "\u2581" + key)

    def _fill_words(self, words: list[str]) -> None:
        """Adds the words not kept (None for a dirty one)."""
        cache = self._by_word
        missing = list(set(words).difference(cache))
        if len(cache) + len(missing) > CACHE_ENTRIES:
            self.clear_cache()
            missing = list(set(words).difference(cache))
        assert self._words is not None
        tokens = self._tokens
        for word, normalized in zip(missing, self._words.normalize(missing)):
            cache[word] = None if normalized is None else tokens("\u2581" + normalized)

    def normalize(self, text: str) -> str:
        """The text as HF's normalizer gives it."""
        for step in self._steps:
            text = step(text)
        return text

    def _encode_text(self, text: str) -> bytes:
        """The per-text path: the whole normalizer, then Metaspace's split; pre-tokens kept."""
        for step in self._steps:
            text = step(text)
        parts: list = text.replace(" ", "\u2581").split("\u2581")
        first = parts[0]
        if not first:
            parts[0] = None
        elif not self._prepend:
            parts[0] = (first,)
        try:
            return b"".join(map(self._pieces.get, parts))  # type: ignore[arg-type] # None: a miss
        except TypeError:  # a pre-token not kept yet
            self._fill_pieces(parts)
            return b"".join(map(self._pieces.__getitem__, parts))

    def __call__(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        chunks = []
        words_path = self._words
        if words_path is None:
            chunks = [self._encode_text(text) for text in texts]
        else:
            get = self._by_word.get
            strip, spaces = words_path.strip, words_path.spaces
            for text in texts:
                raw = text
                for space in spaces:
                    if space in text:
                        text = text.replace(space, " ")
                words = text.strip(strip).split(" ")
                try:
                    chunks.append(b"".join(map(get, words)))  # type: ignore[arg-type] # None: a miss
                except TypeError:  # a word not kept yet, or a dirty one
                    self._fill_words(words)
                    try:
                        chunks.append(b"".join(map(self._by_word.__getitem__, words)))
                    except TypeError:  # a dirty word: the per-text path
                        chunks.append(self._encode_text(raw))
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
