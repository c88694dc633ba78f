"""A faster byte-level BPE encoder with exactly HF ``tokenizers``' output.

HF ``tokenizers`` runs a RoBERTa-style byte-level BPE at ~2-3 MB/s per core
on Wikipedia text.  ``kitoken`` (0.11) reads the same tokenizer.json and
runs it at ~10-15 MB/s, single-threaded; it is used where it has been shown
to give HF's ids (tests/common/tokenization/test_tokenizer_speed_candidates.py: the whole shared
corpus, the adversarial strings of tests/common/tokenization/test_fast_wordpiece.py and 5,000
random Unicode strings; tests/common/tokenization/test_document_tokens.py: whole multi-paragraph
documents), that is a BPE model after a ByteLevel pre-tokenizer
with no normalizer.  Candidates measured for the other families, not used
(docs/tokenizers.md has the figures):

* kitoken on a byte-level BPE with a Lowercase normalizer: lower-cases a
  word-final ``Σ`` to ``ς`` where HF gives ``σ``;
* kitoken on Unigram (converted SentencePiece, or trained by tokenizers):
  emits ``▁`` for whitespace-only texts where HF gives nothing, the same
  sigma difference, and other ids on a corpus sentence; it also needs
  ``Strip`` renamed and the unknown token declared special to load at all;
* ``sentencepiece`` itself on a converted ``.model`` is exact and ~10x
  faster than HF, but workers receive tokenizers JSON, not the ``.model``.

As for nanotoken (common/tokenization/fast_wordpiece.py), the encoder is
compared with HF on probe texts when it is made, and anything outside the
shape shown exact gets ``None`` (HF is used).
"""

from __future__ import annotations

import json
import logging

import numpy as np

from common.tokenization.fast_wordpiece import PROBES, agrees_with_hf

log = logging.getLogger(__name__)

#: More probes: whitespace runs and contractions, where byte-level BPE's split regex is subtle.
BPE_PROBES = PROBES + ("a\tb  c\n\nd \t e   ", "  leading and trailing  ", "I'm we'll they've it's 'S 'LL",
                       "a\u00a0b\u2003c", "x\r\n\r\ny", "12,800.5 3rd 4th", "ΟΔΟΣ Σ σς ΣΑΣ", "\u0301\u0301 x",
                       # A document of paragraphs, as objectives cut from a document's encoding encode it whole
                       "First paragraph.\n\nSecond, after a break.\n \nThird\r\n\tfourth.\n\n\n他来了。\n")


def unsupported_reason(tokenizer_json: str) -> str | None:
    """Why this tokenizer is outside what kitoken has been shown to reproduce, or None."""
    try:
        spec = json.loads(tokenizer_json)
    except ValueError as error:
        return f"not JSON: {error}"
    if not isinstance(spec, dict):
        return "not a tokenizers JSON object"
    if spec.get("truncation") is not None or spec.get("padding") is not None:
        return "truncation or padding is set"
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


def make_fast_encoder(tokenizer_json: str, *, check: bool = True, hf=None):
    """An encoder with exactly HF's ids for this byte-level BPE, or None (use HF)."""
    reason = unsupported_reason(tokenizer_json)
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
    if check and not agrees_with_hf(encoder, tokenizer_json, BPE_PROBES, hf=hf):
        log.warning("fast BPE not used: kitoken differs from HF tokenizers on the probe texts")
        return None
    return encoder
