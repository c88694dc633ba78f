"""The byte-level BPE word cache (common/tokenization/fast_bpe.py, ``byte_level_encode`` in common/_kernels.c)
gives exactly HF ``tokenizers``' ids: HF's own answer on the whole input is the oracle, for ModernBERT's shape
(added runs of spaces matched in text), RoBERTa's and a lower-casing one; its character classes are HF's for
every code point it vouches for; bad calls into the kernel raise instead of reading what they do not own."""

from __future__ import annotations

import ctypes
import functools
import json
import random
import sys
import threading
import unicodedata
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import AddedToken, Tokenizer, pre_tokenizers

from common import kernels
from common.tokenization import Vocabulary, fast_bpe
from common.tokenization.fast_bpe import (
    BPE_PROBES,
    LETTER,
    NUMBER,
    OTHER,
    SPACE,
    UNSURE,
    WordCacheEncoder,
    build_char_classes,
    make_fast_encoder,
    word_cache_unsupported,
)
from tests.common.tokenization.test_fast_wordpiece import ADVERSARIAL, documents_texts
from tests.common.tokenization.test_tokenizer_speed_candidates import random_texts
from tests.support.helpers import need_shared
from tests.support.tokenizer_families import corpus_lines, vocabulary_of

pytestmark = pytest.mark.skipif(kernels.compiled is None, reason="the compiled kernels are not built")


def hf_rows(tokenizer: Tokenizer, texts: list[str]) -> list[list[int]]:
    return [encoding.ids for encoding in tokenizer.encode_batch(texts, add_special_tokens=False)]


def rows(encoder, texts: list[str]) -> list[list[int]]:
    ids, lengths = encoder(texts)
    assert ids.dtype == np.int32 and lengths.dtype == np.int64 and int(lengths.sum()) == len(ids)
    return [row.tolist() for row in np.split(ids, np.cumsum(lengths)[:-1])] if len(texts) else []


def word_cache(tokenizer: Tokenizer) -> WordCacheEncoder:
    encoder = make_fast_encoder(tokenizer.to_str(), hf=tokenizer)
    assert isinstance(encoder, WordCacheEncoder), word_cache_unsupported(json.loads(tokenizer.to_str()))
    return encoder


def lowercased_roberta() -> Tokenizer:
    spec = json.loads(vocabulary_of("bpe").text_tokenizer.to_str())
    spec["normalizer"] = {"type": "Lowercase"}  # kitoken's final sigma differs here; HF's normalizer runs in ours
    return Vocabulary.from_json(json.dumps(spec)).text_tokenizer


SHAPES = {
    "modernbert": lambda: vocabulary_of("modernbert").text_tokenizer,
    "roberta": lambda: vocabulary_of("bpe").text_tokenizer,
    "lowercase": lowercased_roberta,
}


@pytest.fixture(scope="module", params=sorted(SHAPES))
def shape(request):
    need_shared()
    tokenizer = SHAPES[request.param]()
    return tokenizer, word_cache(tokenizer)


@pytest.fixture(scope="module")
def whole_corpus() -> tuple[tuple[str, ...], ...]:
    """The shared corpus as documents of 20 lines, as lines and as Bling Fire sentences: cut once for the three
    shapes (tuples: no test changes them)."""
    need_shared()
    sentences, lines = documents_texts()
    documents = ["\n".join(corpus_lines()[i:i + 20]) for i in range(0, len(corpus_lines()), 20)]
    return tuple(documents), tuple(lines), tuple(sentences)


def test_the_word_cache_is_hf_on_the_whole_corpus(shape, whole_corpus):
    """HF's answer on each whole text set is computed once and held against the cold cache and then the warm one."""
    tokenizer, encoder = shape
    for texts in map(list, whole_corpus):
        expected = hf_rows(tokenizer, texts)
        assert rows(encoder, texts) == expected
        assert rows(encoder, texts) == expected  # warm: every word from the cache
    counts = encoder.cache_counts()
    assert counts.unkept == 0 and counts.probed < 2 * counts.lookups  # honest text: short runs, every word kept


def test_the_word_cache_is_hf_on_adversarial_and_random_text(shape):
    tokenizer, encoder = shape
    spaces = [" " * n + "x" + " " * n for n in range(0, 60, 3)] + ["a" + " " * 25 + "b", "\t  \n   \x1c  "]
    texts = list(BPE_PROBES) + ADVERSARIAL + spaces + random_texts(5000, 29)
    assert rows(encoder, texts) == hf_rows(tokenizer, texts)


def word_hashes(codes: np.ndarray) -> np.ndarray:
    """The word cache's hash (common/_kernels.c, ``word_hash``: FNV-1a over code points) of each row of code points."""
    hashes = np.full(len(codes), 0xCBF29CE484222325, dtype=np.uint64)
    for column in codes.astype(np.uint64).T:
        hashes = (hashes ^ column) * np.uint64(0x100000001B3)  # wraps, as C's uint64_t
    return hashes


def colliding_words(count: int, low_bits: int) -> list[str]:
    """``count`` pre-tokens (" " and 4 ASCII letters) whose hashes share their low bits: one home slot in a table of
    2**low_bits, what a corpus built against the unkeyed hash would hold (found as an attacker would, by brute
    force: 7.3 M candidates)."""
    letters = np.array([ord(c) for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"])
    grid = np.stack(np.meshgrid(*[letters] * 4, indexing="ij"), axis=-1).reshape(-1, 4)
    codes = np.hstack([np.full((len(grid), 1), ord(" ")), grid])
    homes = word_hashes(codes) & np.uint64((1 << low_bits) - 1)
    chosen = codes[homes == np.bincount(homes.astype(np.int64)).argmax()][:count]
    assert len(chosen) == count
    return ["".join(map(chr, row)) for row in chosen.tolist()]


def test_a_corpus_built_to_collide_costs_a_cold_cache_not_a_quadratic_walk(caplog):
    """1,700 words with one home slot in the 4,096-slot table they fill: without a bound on the probe run, each new
    word walks every word before it (~1.4 M probes).  With it, a lookup probes at most WORD_PROBES slots (again
    after the table grows), the words past a full run are asked of the tokenizer each time, and every id is still
    HF's."""
    need_shared()
    tokenizer = vocabulary_of("modernbert").text_tokenizer
    encoder = word_cache(tokenizer)
    words = colliding_words(1700, 12)
    assert len(set(word_hashes(np.array([[ord(c) for c in word] for word in words])) & np.uint64(4095))) == 1
    texts = ["".join(words[i:i + 50]) for i in range(0, len(words), 50)]
    expected = hf_rows(tokenizer, texts)
    before, held = encoder.cache_counts(), encoder.cached_words()  # its probe texts, when it was made
    assert rows(encoder, texts) == expected
    first = encoder.cache_counts()
    assert rows(encoder, texts) == expected  # again: kept words from the cache, the others asked again
    second = encoder.cache_counts()
    bound = kernels.compiled.WORD_PROBES
    assert first.lookups - before.lookups == second.lookups - first.lookups == len(words)  # a pre-token each
    assert first.probed - before.probed <= 2 * bound * len(words)  # (a lookup that grew the table probes again)
    assert second.probed - first.probed <= bound * len(words)  # no growth: nothing new was kept
    unkept = first.unkept - before.unkept
    assert 0 < unkept < len(words) and second.unkept - first.unkept == unkept
    assert encoder.cached_words() == held + len(words) - unkept
    said = [r.getMessage() for r in caplog.records if "found no slot" in r.getMessage()]
    assert len(said) == 1 and f"for {unkept} words" in said[0], said  # once, when it passed UNKEPT_WARNING


def test_texts_with_characters_it_cannot_vouch_for_are_hfs_too(shape):
    """Unassigned in this Python's Unicode (HF's tables are newer): such a text goes to HF whole, in its place."""
    tokenizer, encoder = shape
    classes = fast_bpe.char_classes()
    unsure = [chr(c) for c in (0x0378, 0x1C89, 0x105C0, 0x10D40, 0x2FFFF, 0xE0080) if classes[c] == UNSURE]
    assert len(unsure) >= 4
    texts = ["before", *(f"a {c}b {c}1 {c}" for c in unsure), "after words", "", "a" + "".join(unsure)]
    assert rows(encoder, texts) == hf_rows(tokenizer, texts)


def test_modernberts_runs_of_spaces_are_its_added_tokens():
    need_shared()
    tokenizer = vocabulary_of("modernbert").text_tokenizer
    encoder = word_cache(tokenizer)
    texts = ["a  b", "a" + " " * 24 + "b", "a" + " " * 25 + "b", " " * 50, "x \t  y", "  lead", "trail  "]
    got = rows(encoder, texts)
    assert got == hf_rows(tokenizer, texts)
    assert tokenizer.token_to_id(" " * 24) in got[2]


def test_added_tokens_are_matched_as_hf_matches_them():
    """Two passes, leftmost-longest: tokens not normalized over the raw text first, then the normalized ones."""
    need_shared()
    spec = json.loads(vocabulary_of("bpe").text_tokenizer.to_str())
    tokenizer = Tokenizer.from_str(json.dumps(spec))
    tokenizer.add_tokens([AddedToken("ab", normalized=False), AddedToken("xa", normalized=True),
                          AddedToken("xab", normalized=True), AddedToken("b c", normalized=True)])
    encoder = word_cache(tokenizer)
    texts = ["xab", "xxab", "b c ab xa", "abab c", "xa xab xxa", "no token here", "ab"]
    assert rows(encoder, texts) == hf_rows(tokenizer, texts)


def test_the_cache_is_bounded_and_stays_exact(monkeypatch):
    need_shared()
    tokenizer = vocabulary_of("modernbert").text_tokenizer
    encoder = word_cache(tokenizer)
    monkeypatch.setattr(fast_bpe, "CACHE_ENTRIES", 50)
    lines = list(corpus_lines()[:300])
    looked_up = encoder.cache_counts().lookups
    for start in range(0, 300, 30):
        assert rows(encoder, lines[start:start + 30]) == hf_rows(tokenizer, lines[start:start + 30])
        assert encoder.cached_words() <= 50 + sum(len(line.split()) * 3 for line in lines[start:start + 30])
        counts = encoder.cache_counts()  # the work done, kept when the bound clears the cache
        assert counts.lookups > looked_up
        looked_up = counts.lookups
    assert rows(encoder, []) == [] and rows(encoder, ["", ""]) == [[], []]


def _joined_with(prefix: str, chars: list[str]) -> list[bool]:
    """Whether HF's ByteLevel pattern keeps ``prefix + c`` as one pre-token, for each c (one call per 20,000)."""
    pre = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    out: list[bool] = []
    for start in range(0, len(chars), 20000):
        chunk = chars[start:start + 20000]
        step = len(prefix) + 2
        spans = {offsets for _, offsets in pre.pre_tokenize_str("\n".join(prefix + c for c in chunk))}
        out += [(k * step, k * step + len(prefix) + 1) in spans for k in range(len(chunk))]
    return out


def test_the_character_classes_are_hfs_for_every_character_they_vouch_for():
    """Every assigned code point (and every 97th private-use one): \\p{L}, \\p{N}, other or \\s as HF's regex
    engine sees it, found by which one-character neighbours it joins."""
    classes = build_char_classes()
    assert classes == fast_bpe.char_classes()
    chars = [chr(c) for c in range(0x110000) if classes[c] != UNSURE
             and (unicodedata.category(chr(c)) != "Co" or c % 97 == 0)]
    letter, number, other = _joined_with("a", chars), _joined_with("1", chars), _joined_with("!", chars)
    seen = [LETTER if a else NUMBER if n else OTHER if o else SPACE for a, n, o in zip(letter, number, other)]
    wrong = [(f"U+{ord(c):04X}", classes[ord(c)], hf) for c, hf in zip(chars, seen) if classes[ord(c)] != hf]
    assert not wrong, wrong[:20]
    assert classes[0x1C] == OTHER and classes[0x3000] == SPACE and classes[0x378] == UNSURE


def test_unsupported_shapes_are_named():
    need_shared()
    spec = json.loads(vocabulary_of("modernbert").text_tokenizer.to_str())
    assert word_cache_unsupported(spec) is None
    for change, reason in ((lambda s: s.update(truncation={"max_length": 8}), "truncation"),
                           (lambda s: s["model"].update(dropout=0.1), "dropout"),
                           (lambda s: s["pre_tokenizer"].update(add_prefix_space=True), "pre-tokenizer"),
                           (lambda s: s.update(pre_tokenizer={"type": "Whitespace"}), "pre-tokenizer"),
                           (lambda s: s["added_tokens"][0].update(lstrip=True), "strips"),
                           (lambda s: s["added_tokens"][0].update(special=True), "special"),
                           (lambda s: s.update(normalizer={"type": "Lowercase"}), "normalized text")):
        changed = json.loads(json.dumps(spec))
        change(changed)
        assert reason in (word_cache_unsupported(changed) or ""), reason
    assert "not BPE" in word_cache_unsupported(json.loads(vocabulary_of("unigram").text_tokenizer.to_str()))


def test_without_the_kernels_kitoken_or_hf_is_used(monkeypatch):
    need_shared()
    monkeypatch.setattr(kernels, "compiled", None)
    roberta = vocabulary_of("bpe").text_tokenizer.to_str()
    modernbert = vocabulary_of("modernbert").text_tokenizer.to_str()
    assert getattr(make_fast_encoder(roberta), "name", "kitoken") == "kitoken"
    assert make_fast_encoder(modernbert) is None


def _new(kernel):
    return kernel.word_cache()


@pytest.mark.parametrize("call, error", [
    (lambda k, c: k.byte_level_encode(["a"], c[:100], _new(k), lambda w: b""), ValueError),
    (lambda k, c: k.byte_level_encode(["a", 3], c, _new(k), lambda w: b""), TypeError),
    (lambda k, c: k.byte_level_encode(["a"], c, _new(k), lambda w: "ids"), TypeError),
    (lambda k, c: k.byte_level_encode(["a"], c, _new(k), lambda w: b"\x01\x02\x03"), TypeError),
    (lambda k, c: k.byte_level_encode(["a"], c, {"a": b""}, lambda w: b""), TypeError),
    (lambda k, c: k.byte_level_encode(["a"], c, _new(k), None), TypeError),
    (lambda k, c: k.byte_level_encode(("a",), c, _new(k), lambda w: b""), TypeError),
    (lambda k, c: k.byte_level_encode(["a"], c, _new(k), lambda w: 1 / 0), ZeroDivisionError),
    (lambda k, c: k.word_cache_clear("a cache"), TypeError),
    (lambda k, c: k.word_cache_size(None), TypeError),
])
def test_bad_calls_into_the_kernel_raise(call, error):
    with pytest.raises(error):
        call(kernels.compiled, fast_bpe.char_classes())


def test_a_miss_that_changes_the_list_or_the_cache_is_refused():
    kernel, classes = kernels.compiled, fast_bpe.char_classes()
    texts, cache = ["a b", "c d"], kernel.word_cache()

    def grows(word):
        texts.append("e")
        return b""

    with pytest.raises(RuntimeError, match="changed"):
        kernel.byte_level_encode(texts, classes, cache, grows)
    for reenter in (lambda: kernel.word_cache_clear(cache), lambda: kernel.byte_level_encode(["x"], classes, cache,
                                                                                              lambda w: b"")):
        def miss(word, reenter=reenter):
            reenter()
            return b""

        with pytest.raises(RuntimeError, match="in use"):
            kernel.byte_level_encode(["fresh words"], classes, cache, miss)
    assert kernel.word_cache_size(cache)[0] >= 1  # what was added before stays; the cache is usable again
    ids, lengths = kernel.byte_level_encode(["q z"], classes, cache, lambda w: bytes(4))
    assert len(ids) == 8 and lengths == np.array([2], dtype=np.int64).tobytes()


def test_one_word_is_one_entry_whatever_the_width_of_its_text():
    """Keys are code points: "word" from a Latin-1, a UCS-2 and a UCS-4 text is asked for once."""
    kernel, classes, asked = kernels.compiled, fast_bpe.char_classes(), []

    def miss(word):
        asked.append(word)
        return np.array([len(asked)], dtype=np.int32).tobytes()

    cache = kernel.word_cache()
    ids, _ = kernel.byte_level_encode(["word é", "word \u0100", "word \U0001F600"], classes, cache, miss)
    assert asked.count("word") == 1 and len(asked) == 4
    assert np.frombuffer(ids, dtype=np.int32).tolist() == [1, 2, 1, 3, 1, 4]
    kernel.word_cache_clear(cache)
    assert kernel.word_cache_size(cache)[0] == 0


def test_a_table_that_misclasses_is_caught_by_the_probes(monkeypatch):
    """The guard when made: a table that disagrees with HF (here: "e" as a space) is not used."""
    need_shared()
    table = bytearray(fast_bpe.char_classes())
    table[ord("e")] = SPACE
    monkeypatch.setattr(fast_bpe, "char_classes", lambda: bytes(table))
    encoder = make_fast_encoder(vocabulary_of("modernbert").text_tokenizer.to_str())
    assert encoder is None


def _roberta_with(**changes) -> Tokenizer:
    spec = json.loads(vocabulary_of("bpe").text_tokenizer.to_str())
    spec.update(changes)
    return Tokenizer.from_str(json.dumps(spec))


@pytest.mark.parametrize("normalizer", [
    {"type": "Replace", "pattern": {"String": "a"}, "content": "aa"},
    {"type": "Prepend", "prepend": "x"},
    {"type": "Sequence", "normalizers": [{"type": "Lowercase"},
                                         {"type": "Replace", "pattern": {"String": "b"}, "content": "bb"}]},
])
def test_a_declined_text_is_normalized_once(normalizer):
    """A text HF encodes for the kernel (a character the table cannot vouch for) is given to HF as it came, not
    normalized already: a normalizer that changes its own output (Replace a -> aa) would run twice."""
    need_shared()
    tokenizer = _roberta_with(normalizer=normalizer)
    encoder = word_cache(tokenizer)
    texts = ["a b", "a \u0378 b", "ab\U000E0080 Ab", "", "plain a"]
    assert rows(encoder, texts) == hf_rows(tokenizer, texts)


def test_the_cache_is_bounded_in_bytes_too(monkeypatch):
    """Long distinct words (a corpus of sequences or blobs) are few entries but many bytes: the cache is emptied by
    its size in bytes as well as in words, and stays exact."""
    need_shared()
    tokenizer = vocabulary_of("bpe").text_tokenizer
    encoder = word_cache(tokenizer)
    monkeypatch.setattr(fast_bpe, "CACHE_BYTES", 1 << 20)
    held = []
    for k in range(40):
        draw = random.Random(k)
        texts = ["".join(draw.choice("acgt") for _ in range(20000)) + f" w{k}"]
        assert rows(encoder, texts) == hf_rows(tokenizer, texts)
        held.append(kernels.compiled.word_cache_size(encoder._cache)[1])
    assert max(held) < 2 * (1 << 20) + 4 * 20000 * 4, held


def test_a_python_whose_unicode_is_newer_than_hfs_regex_refuses_the_word_cache(monkeypatch):
    """Python 3.15's Unicode 17 calls U+323B0 (CJK extension J) a letter, the regex engine of tokenizers 0.23
    (Unicode 16) does not: the table would keep it in a word HF cuts apart (here a merge "°" + "C" across the cut
    shows it in the ids).  Its cut is checked against HF's when the encoder is made: the word cache is refused."""
    need_shared()
    spec = json.loads(vocabulary_of("bpe").text_tokenizer.to_str())
    vocab, merges = spec["model"]["vocab"], spec["model"]["merges"]
    vocab["°C"] = max(vocab.values()) + 1
    merges.append(["°", "C"] if merges and isinstance(merges[0], list) else "° C")
    tokenizer = Tokenizer.from_str(json.dumps(spec))
    texts = ["\U000323b0C", "25 \U000323b0C", "\u0100\U000323b0C"]
    assert [len(p) for p in (tokenizer.pre_tokenizer.pre_tokenize_str(t) for t in texts)] == [2, 3, 3]
    table = bytearray(fast_bpe.char_classes())
    table[0x323B0] = LETTER
    monkeypatch.setattr(fast_bpe, "char_classes", lambda: bytes(table))
    encoder = make_fast_encoder(tokenizer.to_str(), hf=tokenizer)
    assert not isinstance(encoder, WordCacheEncoder)
    if encoder is not None:
        assert rows(encoder, texts) == hf_rows(tokenizer, texts)
    assert fast_bpe.cuts_as_hf(kernels.compiled, build_char_classes(), tokenizer,
                               fast_bpe.newer_unicode_texts())


def test_kitoken_is_refused_where_it_misses_a_contraction_after_whitespace(monkeypatch):
    """kitoken 0.11 does not cut GPT-2's contractions right after whitespace other than a space: "\\n'theory" is
    HF's "'t" + "heory", kitoken's "'" + "theory" (other ids with any vocabulary that merges "th").  Without the
    kernels, the probes hold such a text: kitoken is not used on RoBERTa's shape, HF is."""
    need_shared()
    kitoken = pytest.importorskip("kitoken")
    tokenizer = vocabulary_of("bpe").text_tokenizer
    texts = ["\n'theory", "a\t'sand", "\u00a0'mad"]
    backend = fast_bpe.KitokenEncoder(kitoken.Kitoken.from_tokenizers(tokenizer.to_str().encode()))
    assert rows(backend, texts) != hf_rows(tokenizer, texts)
    monkeypatch.setattr(kernels, "compiled", None)
    assert make_fast_encoder(tokenizer.to_str(), hf=tokenizer) is None


_HARD = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "'", " ", "  ", " " * 25, "\t", "\n", "\r\n", "\x0b",
         "\x0c", "\x85", "\xa0", "\u2028", "\u3000", "\x1c", "\x1f", "a", "Word", "é", "ß", "Σ", "1", "٣", "½", "!",
         ".", "\u0301", "\u200d", "👩\u200d💻", "\ue000", "\u0378", "\U000e0080", "don", "the", "heory"]


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.lists(st.one_of(st.sampled_from(_HARD), st.text(max_size=2)), max_size=25).map("".join),
                min_size=1, max_size=6))
def test_the_word_cache_is_hf_on_generated_text(texts):
    """GPT-2's pattern where it is subtle (contractions in every position, whitespace runs of every kind before
    letters, digits, signs and the end, undecided characters) and ModernBERT's runs of spaces, with warm caches."""
    need_shared()
    for shape in ("modernbert", "roberta"):
        tokenizer, encoder = _generated_shapes()[shape]
        assert rows(encoder, texts) == hf_rows(tokenizer, texts)


@functools.lru_cache(maxsize=1)
def _generated_shapes() -> dict:
    tokenizers = {name: SHAPES[name]() for name in ("modernbert", "roberta")}
    return {name: (tokenizer, word_cache(tokenizer)) for name, tokenizer in tokenizers.items()}


def test_threads_sharing_an_encoder_take_turns():
    """A miss runs Python, so another thread may call the same encoder meanwhile: it waits for its turn (the kernel
    refused the cache in use: RuntimeError) and gets HF's ids."""
    need_shared()
    tokenizer = vocabulary_of("modernbert").text_tokenizer
    encoder = word_cache(tokenizer)
    other_texts, outcome = ["another thread's words", "x  y"], {}

    def other():
        try:
            outcome["rows"] = rows(encoder, other_texts)
        except RuntimeError as error:
            outcome["error"] = error

    thread = threading.Thread(target=other)
    model_miss = encoder._miss

    def miss(word):
        if not thread.is_alive() and "rows" not in outcome and "error" not in outcome:
            thread.start()
            thread.join(timeout=0.5)  # refused at once before; waits for this call now
        return model_miss(word)

    encoder._miss = miss
    texts = ["the first thread's words"]
    assert rows(encoder, texts) == hf_rows(tokenizer, texts)
    thread.join()
    assert "error" not in outcome and outcome["rows"] == hf_rows(tokenizer, other_texts)


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="legacy strings (PyUnicode_FromUnicode) were removed in 3.12")
def test_a_legacy_str_is_read_as_its_characters():
    """A str made by the deprecated C API has no code points until made ready: it was read as empty (no ids)."""
    api = ctypes.pythonapi
    api.PyUnicode_FromUnicode.restype, api.PyUnicode_FromUnicode.argtypes = ctypes.py_object, [ctypes.c_void_p,
                                                                                               ctypes.c_ssize_t]
    api.PyUnicode_AsUnicode.restype, api.PyUnicode_AsUnicode.argtypes = ctypes.POINTER(ctypes.c_wchar), [
        ctypes.py_object]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        legacy = api.PyUnicode_FromUnicode(None, 5)
        characters = api.PyUnicode_AsUnicode(legacy)
    for k, char in enumerate("ab cd"):
        characters[k] = char
    kernel = kernels.compiled
    _, lengths = kernel.byte_level_encode([legacy], fast_bpe.char_classes(), kernel.word_cache(), lambda w: bytes(4))
    assert np.frombuffer(lengths, dtype=np.int64).tolist() == [2] and legacy == "ab cd"
