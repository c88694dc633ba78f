"""Faster encoders for BPE and Unigram are used only where they give HF's ids.

kitoken on a RoBERTa-style byte-level BPE (no normalizer): identical to HF
on the whole shared corpus, the adversarial strings and random Unicode, so
Vocabulary uses it (common/tokenization/fast_bpe.py).  Where it differs
(a Lowercase normalizer, Unigram) the differences are pinned here and kitoken
is not used (HF for that BPE; common/tokenization/fast_unigram.py for Unigram).
Speeds are in bench.run (docs/tokenizers.md), not here.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from common.tokenization import Vocabulary, fast_bpe, load_tokenizer
from common.tokenization.fast_bpe import KitokenEncoder, WordCacheEncoder, _kitoken_encoder, make_fast_encoder
from common.tokenization.fast_bpe import kitoken_unsupported as unsupported_reason
from tests.common.tokenization.test_fast_wordpiece import ADVERSARIAL, assert_identical, documents_texts
from tests.support.helpers import need_shared
from tests.support.tokenizer_families import tokenizer_path, vocabulary_of

kitoken = pytest.importorskip("kitoken", reason="kitoken is not installed")


def random_texts(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)

    def char() -> str:
        r = rng.random()
        if r < 0.35:
            return chr(rng.randint(0x20, 0x7E))
        if r < 0.45:
            return rng.choice(" \t\n\r\u00a0\u3000\u200b\u200d\ufeff\u0301\u0308Σİ'")
        while True:
            code = rng.randint(0x80, 0x10FFFF) if r < 0.6 else rng.randint(0x80, 0x2FFFF)
            if not 0xD800 <= code <= 0xDFFF:
                return chr(code)

    return ["".join(char() for _ in range(rng.randint(0, 60))) for _ in range(count)]


@pytest.fixture(scope="module")
def bpe():
    need_shared()
    vocabulary = vocabulary_of("bpe")
    encoder = _kitoken_encoder(vocabulary.text_tokenizer.to_str())  # where the compiled kernels are not built
    assert isinstance(encoder, KitokenEncoder), unsupported_reason(vocabulary.text_tokenizer.to_str())
    return vocabulary, encoder


def test_kitoken_bpe_is_identical_on_the_corpus(bpe):
    vocabulary, encoder = bpe
    sentences, lines = documents_texts()
    text = type("V", (), {"tokenizer": vocabulary.text_tokenizer})  # the reference: HF on the text-safe JSON
    assert_identical(text, encoder, sentences)
    assert_identical(text, encoder, lines)


def test_kitoken_bpe_is_identical_on_adversarial_and_random_text(bpe):
    vocabulary, encoder = bpe
    text = type("V", (), {"tokenizer": vocabulary.text_tokenizer})
    more = ["a\tb  c\n\nd \t e   ", "I'm we'll they've it's 'S 'LL", " x", "x ", "  ", "\n", "\u00a0", "<mask> <s>"]
    assert_identical(text, encoder, ADVERSARIAL + more)
    assert_identical(text, encoder, random_texts(5000, 11))
    assert vocabulary.mask_id not in encoder(["<mask>", "a <mask> b"])[0].tolist()


def kitoken_of(spec: dict):
    return KitokenEncoder(kitoken.Kitoken.from_tokenizers(json.dumps(spec).encode()))


def rows(encode, texts):
    ids, lengths = encode(texts)
    return [row.tolist() for row in np.split(ids, np.cumsum(lengths)[:-1])]


def test_kitoken_differs_where_it_is_not_used():
    """Why kitoken is not used for a lower-casing BPE (the word cache is, or HF) or for Unigram: the differences
    found, pinned."""
    need_shared()
    spec = json.loads(vocabulary_of("bpe").text_tokenizer.to_str())
    spec["normalizer"] = {"type": "Lowercase"}
    assert "normalizer" in unsupported_reason(json.dumps(spec))
    lowered = Vocabulary.from_json(json.dumps(spec))
    found = {}
    if rows(kitoken_of(spec), ["ΟΔΟΣ"]) != rows(lambda t: lowered._encode_hf(t, False)[:2], ["ΟΔΟΣ"]):
        found["final sigma"] = True
    unigram = vocabulary_of("unigram")
    unigram_spec = json.loads(unigram.text_tokenizer.to_str())
    assert "not BPE" in unsupported_reason(json.dumps(unigram_spec))
    for step in unigram_spec["normalizer"]["normalizers"]:
        if step["type"] == "Strip":
            step["type"] = "StripNormalizer"  # kitoken's name for it
    unk = unigram_spec["model"]["unk_id"]
    unigram_spec["added_tokens"].append({"id": unk, "content": unigram_spec["model"]["vocab"][unk][0],
                                         "single_word": False, "lstrip": False, "rstrip": False,
                                         "normalized": False, "special": True})  # kitoken needs it declared
    texts = [" ", "\t", "   "]
    if rows(kitoken_of(unigram_spec), texts) != rows(lambda t: unigram._encode_hf(t, False)[:2], texts):
        found["whitespace-only text"] = True
    if len(found) < 2:
        pytest.skip(f"this kitoken matches HF where it did not (still differing: {sorted(found)}): evaluate it again")
    assert _kitoken_encoder(json.dumps(spec)) is None and _kitoken_encoder(json.dumps(unigram_spec)) is None
    word_cache = make_fast_encoder(json.dumps(spec))
    assert word_cache is None or isinstance(word_cache, WordCacheEncoder)
    assert not isinstance(unigram._fast_encoder(), KitokenEncoder)


def test_a_kitoken_that_drifts_from_hf_is_not_used(monkeypatch):
    need_shared()
    json_text = vocabulary_of("bpe").text_tokenizer.to_str()
    assert make_fast_encoder(json_text) is not None

    def drifting(original):
        def call(self, texts):
            ids, lengths = original(self, texts)
            return np.where(ids == ids.max(initial=0), 0, ids).astype(np.int32), lengths
        return call

    monkeypatch.setattr(WordCacheEncoder, "__call__", drifting(WordCacheEncoder.__call__))
    # the next candidate, on probes without the contraction after whitespace kitoken misses
    monkeypatch.setattr(fast_bpe, "BPE_PROBES", tuple(p for p in fast_bpe.BPE_PROBES if "'theory" not in p))
    assert isinstance(make_fast_encoder(json_text), KitokenEncoder)
    monkeypatch.setattr(KitokenEncoder, "__call__", drifting(KitokenEncoder.__call__))
    assert make_fast_encoder(json_text) is None
    monkeypatch.setenv("MLM_FAST_BPE", "0")
    assert Vocabulary.from_tokenizer(load_tokenizer(tokenizer_file=tokenizer_path("bpe")))._fast_encoder() is None
