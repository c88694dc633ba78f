"""The fast Unigram encoder (common/tokenization/fast_unigram.py) gives exactly HF ``tokenizers``' ids.

Compared with HF's ``encode_batch`` on the text-safe tokenizer for every Unigram family (trained by
tokenizers, a converted SentencePiece model, ALBERT-style preprocessing before it, other prepend schemes
and normalizers): the whole shared corpus as lines and as whole documents, cold and warm, the probes, the
adversarial strings and thousands of random Unicode strings; its Python normalizer against HF's on every
code point it does not hand to HF; and the tokenizers it must refuse.
"""

from __future__ import annotations

import json
import random
import unicodedata

import numpy as np
import pytest
from tokenizers import Tokenizer
from tokenizers import normalizers as hf_normalizers

from common.tokenization import Vocabulary, fast_unigram
from common.tokenization.fast_unigram import (
    RUST_WHITESPACE,
    UNIGRAM_PROBES,
    UnigramEncoder,
    make_fast_encoder,
    unsupported_reason,
)
from common.tokenization.sentencepiece_conversion import convert
from tests.common.tokenization.test_fast_wordpiece import (
    ADVERSARIAL,
    WIKI_READER,
    assert_identical,
    first_differences,
    hf_encode_many,
)
from tests.support.helpers import WIKI, need_shared
from tests.support.tokenizer_families import corpus_lines, train_sentencepiece, vocabulary_of


class _Reference:
    """What assert_identical compares with: HF on the text-safe tokenizer."""

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer


def _spec(vocabulary: Vocabulary) -> dict:
    return json.loads(vocabulary.text_tokenizer.to_str())


def _encoder_of(spec: dict) -> tuple[_Reference, UnigramEncoder]:
    text = json.dumps(spec)
    encoder = make_fast_encoder(text)
    assert isinstance(encoder, UnigramEncoder), unsupported_reason(text)
    return _Reference(Tokenizer.from_str(text)), encoder


@pytest.fixture(scope="module")
def albert_like() -> Vocabulary:
    """A SentencePiece model read as ALBERT's tokenizer does (lower-cased, accents stripped: NFKD,
    StripAccents, Lowercase, the ``\\`\\``/``''`` Replaces, then the charsmap)."""
    need_shared()
    model = train_sentencepiece(corpus_lines()[:1000])
    return Vocabulary.from_tokenizer(Tokenizer.from_str(convert(model, lowercase=True, keep_accents=False)))


@pytest.fixture(scope="module", params=["unigram", "sentencepiece", "albert"])
def family(request, albert_like):
    need_shared()
    vocabulary = albert_like if request.param == "albert" else vocabulary_of(request.param)
    encoder = vocabulary._fast_encoder()
    assert isinstance(encoder, UnigramEncoder), unsupported_reason(vocabulary.text_tokenizer.to_str())
    return _Reference(vocabulary.text_tokenizer), encoder


@pytest.fixture(scope="module")
def corpus() -> tuple[list[str], list[str]]:
    """The shared corpus's lines, and its documents whole (lines joined by line feeds)."""
    need_shared()
    from common.readers import ParseReport

    documents = ["\n".join(document.lines) for path in sorted(WIKI.rglob("wiki_*"))
                 for document in WIKI_READER.parse(path.read_bytes(), 0, ParseReport())]
    assert len(documents) > 100 and sum(map(len, documents)) > 1_500_000
    return list(corpus_lines()), documents


def random_texts(count: int, seed: int) -> list[str]:
    """Random strings heavy in what Unigram's normalizers and Metaspace are subtle about."""
    rng = random.Random(seed)
    subtle = (" ", " ", "  ", "\t", "\n", "\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x1f", "\x85", "\u00a0", "\u3000",
              "\u2009", "\u2028", "\u200b", "\u200d", "\ufeff", "\u0301", "\u0308", "\u0345", "Σ", "ΣΑ", "İ", "▁",
              "\u0378", "\U000E0080", "``", "''", "ﬁ", "①", "\u1100\u1161", "\u32ff", "\u0898", "é", "Ａ")

    def char() -> str:
        r = rng.random()
        if r < 0.4:
            return chr(rng.randint(0x20, 0x7E))
        if r < 0.65:
            return rng.choice(subtle)
        while True:
            code = rng.randint(0x80, 0xFFFF) if r < 0.9 else rng.randint(0x80, 0x10FFFF)
            if not 0xD800 <= code <= 0xDFFF:
                return chr(code)

    return ["".join(char() for _ in range(rng.randint(0, 40))) for _ in range(count)]


def test_identical_on_the_whole_corpus(family, corpus, request):
    reference, encoder = family
    lines, documents = corpus
    if request.node.callspec.params["family"] == "albert":  # the charsmap's path is the sentencepiece family's
        lines, documents = lines[:1000], documents[:30]
    for texts in (lines, documents):
        expected = hf_encode_many(reference.tokenizer, texts)
        encoder.clear_cache()
        for _ in ("cold", "warm"):
            got = encoder(texts)
            assert got[0].dtype == np.int32 and got[1].dtype == np.int64
            assert np.array_equal(got[1], expected[1]) and np.array_equal(got[0], expected[0]), "\n".join(
                first_differences(reference, texts, expected, got))


def test_identical_on_probes_adversarial_and_random_text(family):
    reference, encoder = family
    assert_identical(reference, encoder, list(UNIGRAM_PROBES) + ADVERSARIAL)
    for text in UNIGRAM_PROBES:  # one by one too: no state carried between texts of a batch
        assert_identical(reference, encoder, [text])
    assert_identical(reference, encoder, random_texts(3000, 43))
    words = random_texts(400, 7)
    assert_identical(reference, encoder, [" ".join(words[i:i + 12]) for i in range(0, 400, 4)])


@pytest.mark.parametrize("change", ["never", "no collapse", "strip only", "nfc", "no normalizer",
                                    "left strip"])
def test_identical_for_other_prepend_schemes_and_normalizers(change, corpus):
    """Shapes the word path does not take (the per-text path) or takes differently."""
    spec = _spec(vocabulary_of("unigram"))
    steps = spec["normalizer"]["normalizers"]
    if change == "never":
        spec["pre_tokenizer"]["prepend_scheme"] = change
    elif change == "no collapse":
        spec["normalizer"]["normalizers"] = steps[:3]
    elif change == "strip only":
        spec["normalizer"]["normalizers"] = [steps[2]]
    elif change == "nfc":
        spec["normalizer"]["normalizers"] = [{"type": "NFC"}, *steps[1:]]
    elif change == "no normalizer":
        spec["normalizer"] = None
    else:
        spec["normalizer"]["normalizers"] = [steps[0], {"type": "Strip", "strip_left": True,
                                                        "strip_right": False}, steps[3]]
    reference, encoder = _encoder_of(spec)
    lines, documents = corpus
    assert_identical(reference, encoder, lines[:1000] + documents[:5])
    assert_identical(reference, encoder, list(UNIGRAM_PROBES) + ADVERSARIAL + random_texts(1000, 5))


def test_the_word_path_is_taken_where_it_is_exact():
    """The speed comes from the word path (ids kept by raw word, nothing normalized when warm): both shipped
    Unigram families take it."""
    need_shared()
    for name in ("unigram", "sentencepiece"):
        encoder = vocabulary_of(name)._fast_encoder()
        assert isinstance(encoder, UnigramEncoder) and encoder._words is not None
    spec = _spec(vocabulary_of("unigram"))
    spec["pre_tokenizer"]["prepend_scheme"] = "never"
    assert _encoder_of(spec)[1]._words is None


def test_the_cache_is_bounded_and_clears(monkeypatch, corpus):
    need_shared()
    monkeypatch.setattr(fast_unigram, "CACHE_ENTRIES", 500)
    spec = _spec(vocabulary_of("unigram"))
    reference, encoder = _encoder_of(spec)
    lines, documents = corpus
    assert_identical(reference, encoder, lines[:2000])
    assert 0 < len(encoder._by_word) <= 500 + max(len(line.split()) for line in lines[:2000])
    encoder.clear_cache()
    assert len(encoder._by_word) == 1 and len(encoder._pieces) == 1
    assert_identical(reference, encoder, lines[:200])


def test_refused_shapes():
    need_shared()
    base = _spec(vocabulary_of("unigram"))
    assert unsupported_reason(json.dumps(base)) is None

    def reason(change) -> str | None:
        spec = json.loads(json.dumps(base))
        change(spec)
        text = json.dumps(spec)
        assert make_fast_encoder(text) is None
        return unsupported_reason(text)

    assert "not Unigram" in reason(lambda s: s.update(model={"type": "BPE", "vocab": {}, "merges": []}))
    assert "truncation" in reason(lambda s: s.update(truncation={"max_length": 8, "strategy": "LongestFirst",
                                                                 "stride": 0, "direction": "Right"}))
    assert "Metaspace" in reason(lambda s: s["pre_tokenizer"].update(split=False))
    # "first" prepends only where nothing was stripped before the text: HF's offsets, not emulated
    assert "first" in reason(lambda s: s["pre_tokenizer"].update(prepend_scheme="first"))
    assert "Metaspace" in reason(lambda s: s.update(pre_tokenizer={"type": "Whitespace"}))
    assert "added tokens" in reason(lambda s: s["added_tokens"].append(
        {"id": 5, "content": "abc", "single_word": False, "lstrip": False, "rstrip": False, "normalized": True,
         "special": False}))
    assert "BertNormalizer" in reason(lambda s: s.update(normalizer={
        "type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True, "strip_accents": None,
        "lowercase": True}))
    assert "Replace" in reason(lambda s: s["normalizer"]["normalizers"].append(
        {"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": " "}))


def test_refused_under_other_unicode_tables(monkeypatch):
    """The table differences were measured for one tokenizers release and one Python Unicode version."""
    need_shared()
    text = vocabulary_of("unigram").text_tokenizer.to_str()
    monkeypatch.setattr(fast_unigram, "VERIFIED_WITH", ("0.0.0", unicodedata.unidata_version))
    assert "checked against" in unsupported_reason(text)
    assert make_fast_encoder(text) is None


def test_a_drifting_encoder_is_not_used(monkeypatch):
    need_shared()
    text = vocabulary_of("unigram").text_tokenizer.to_str()
    assert make_fast_encoder(text) is not None
    original = UnigramEncoder.__call__

    def drifting(self, texts):
        ids, lengths = original(self, texts)
        return np.where(ids == ids.max(initial=0), 0, ids).astype(np.int32), lengths

    monkeypatch.setattr(UnigramEncoder, "__call__", drifting)
    assert make_fast_encoder(text) is None


def test_the_vocabulary_uses_it_unless_turned_off(monkeypatch):
    need_shared()
    path_vocabulary = vocabulary_of("unigram")
    assert isinstance(path_vocabulary._fast_encoder(), UnigramEncoder)
    monkeypatch.setenv("MLM_FAST_UNIGRAM", "0")
    fresh = Vocabulary.from_json(path_vocabulary.to_json())
    assert fresh._fast_encoder() is None
    ids, lengths = fresh.encode_many(["a text, HF's way"])
    assert lengths.tolist() == [len(ids)] and len(ids) > 0


# Every code point, batched into long strings: the Python steps equal HF's wherever they are used.

def _batches(codes: list[int], separator: str, size: int = 4000):
    for start in range(0, len(codes), size):
        chunk = codes[start:start + size]
        yield chunk, separator.join(chr(c) for c in chunk)


def _differing(hf_run, py_run, codes: list[int], separators: tuple[str, ...]) -> set[int]:
    found = set()
    for separator in separators:
        for chunk, text in _batches(codes, separator):
            if hf_run(text) != py_run(text):
                found |= {c for c in chunk if hf_run(separator + chr(c) + separator)
                          != py_run(separator + chr(c) + separator)}
    return found


def test_python_normalizers_equal_hfs_on_every_code_point():
    """Each emulated step on every BMP code point (alone, between letters, before a combining mark): every
    difference is a character the encoder hands to HF (unassigned in Python, or in _TABLE_DIFFERENCES);
    past the BMP everything is handed to HF.  Strip strips Rust's whitespace, not Python's."""
    unsafe = fast_unigram._unsafe()
    marks = fast_unigram._marks()
    assigned = [c for c in range(0x10000) if unicodedata.category(chr(c)) not in ("Cn", "Cs")]
    steps = {
        "NFC": (hf_normalizers.NFC(), lambda s: unicodedata.normalize("NFC", s)),
        "NFD": (hf_normalizers.NFD(), lambda s: unicodedata.normalize("NFD", s)),
        "NFKC": (hf_normalizers.NFKC(), lambda s: unicodedata.normalize("NFKC", s)),
        "NFKD": (hf_normalizers.NFKD(), lambda s: unicodedata.normalize("NFKD", s)),
        "Lowercase": (hf_normalizers.Lowercase(), fast_unigram._lower),
        "StripAccents": (hf_normalizers.StripAccents(), lambda s: marks.sub("", s)),
    }
    differing: set[int] = set()
    for hf, python in steps.values():
        differing |= _differing(hf.normalize_str, python, assigned, ("\n", "a", "\u0301"))
    assert differing, "no difference at all: the guard's table may be stale (measure it again)"
    assert all(unsafe.search(chr(c)) for c in differing), sorted(c for c in differing if not unsafe.search(chr(c)))
    assert all(unsafe.search(chr(c)) for c in (0x378, 0xFFFF, 0x10000, 0x1F600, 0x10FFFF))
    listed = {c for a, b in fast_unigram._TABLE_DIFFERENCES for c in range(a, b + 1)}
    assert listed == differing, "the listed differences are not the measured ones: update _TABLE_DIFFERENCES"
    strip = hf_normalizers.Strip()
    stripped = {c for c in range(0x10000) if not 0xD800 <= c < 0xE000 and strip.normalize_str(chr(c)) == ""}
    assert stripped == {ord(c) for c in RUST_WHITESPACE}


def test_whole_normalizers_equal_hfs_on_every_code_point(albert_like):
    """The families' whole normalizers (the guards included) on every BMP code point, alone and next to a
    character the charsmap maps, and the charsmap read into a table equals HF's Precompiled per character."""
    need_shared()
    codes = [c for c in range(0x10000) if not 0xD800 <= c < 0xE000]
    for vocabulary in (vocabulary_of("unigram"), vocabulary_of("sentencepiece"), albert_like):
        tokenizer = vocabulary.text_tokenizer
        encoder = vocabulary._fast_encoder()
        assert isinstance(encoder, UnigramEncoder)
        differing = _differing(tokenizer.normalizer.normalize_str, encoder.normalize, codes,
                               ("\n", "a", " ", "Ａ", "\u00a0"))
        assert not differing, sorted(differing)[:20]
    spec = _spec(vocabulary_of("sentencepiece"))
    precompiled = next(s for s in spec["normalizer"]["normalizers"] if s["type"] == "Precompiled")
    import base64

    table = fast_unigram.precompiled_table(base64.b64decode(precompiled["precompiled_charsmap"]))
    hf = fast_unigram._component(precompiled)
    assert table["\u00a0"] == " " and table["Ａ"] == "A" and "a" not in table
    expected = {c: table.get(chr(c), chr(c)) for c in codes}
    for chunk, text in _batches(codes, "\n"):
        if hf.normalize_str(text) != "\n".join(expected[c] for c in chunk):  # "\r\n" is one cluster
            bad = [hex(c) for c in chunk if hf.normalize_str(chr(c)) != expected[c]]
            assert not bad, bad[:20]


def test_albert_like_conversion_is_the_shape_expected(albert_like):
    kinds = [step["type"] for step in _spec(albert_like)["normalizer"]["normalizers"]]
    assert kinds[:4] == ["Replace", "Replace", "NFKD", "StripAccents"] and "Precompiled" in kinds


def test_the_byte_matrix_unigram_uses_it_and_is_identical(corpus):
    """tests/data/matrix/unigram.json (the byte matrix's Unigram cells) is encoded by this encoder."""
    from pathlib import Path

    matrix = Path(__file__).resolve().parents[2] / "data" / "matrix" / "unigram.json"
    vocabulary = Vocabulary.from_tokenizer(Tokenizer.from_file(str(matrix)))
    encoder = vocabulary._fast_encoder()
    assert isinstance(encoder, UnigramEncoder) and encoder._words is not None
    lines, documents = corpus
    assert_identical(_Reference(vocabulary.text_tokenizer), encoder,
                     lines[:2000] + documents[:10] + list(UNIGRAM_PROBES) + random_texts(500, 17))
