"""Where words begin, in the tokenizer's own terms, for whole-word and n-gram masking.

Three families mark word boundaries differently:

* ``continuation``: WordPiece (and BPE trained with a continuing-subword
  prefix) marks the pieces that *continue* a word (``##ing``); every other
  piece begins one.  A per-id table is exact, as in google-research/bert.
* ``start-marker``: byte-level BPE marks a piece that begins after a space
  with ``Ġ`` (the byte-level form of the space), SentencePiece/Metaspace with
  ``▁``.  A piece without the marker continues the word before it, except
  the first piece of a text: RoBERTa's tokenizer does not add a space before
  the text (``add_prefix_space`` false), so a segment's first word has no
  ``Ġ`` and would otherwise join the previous segment's last word.  Per-token
  starts: the per-id table, with every segment's first token forced.
* ``word-ids``: no per-id marker (a BPE after a Whitespace pre-tokenizer,
  ``end_of_word_suffix`` models): the pre-tokenizer's words as HF reports
  them (``Encoding.word_ids``), per token.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: ByteLevel's printable stand-in for the space byte (0x20).
BYTE_LEVEL_SPACE = "\u0120"
METASPACE = "\u2581"

CONTINUATION, START_MARKER, WORD_IDS = "continuation", "start-marker", "word-ids"


@dataclass(frozen=True)
class WordBoundaries:
    """How this tokenizer marks words: ``kind`` and its ``marker`` (a prefix, or None)."""

    kind: str
    marker: str | None = None

    @property
    def per_token(self) -> bool:
        """Whether word starts are computed per token (the per-id table is not enough)."""
        return self.kind != CONTINUATION

    def describe(self) -> str:
        return {CONTINUATION: f"pieces continuing a word start with {self.marker!r}",
                START_MARKER: f"pieces beginning a word start with {self.marker!r}",
                WORD_IDS: "words are the pre-tokenizer's (no per-piece marker)"}[self.kind]


def _pre_tokenizers(spec) -> list[dict]:
    """The pre-tokenizer and, for a Sequence, its members."""
    if not isinstance(spec, dict):
        return []
    if spec.get("type") == "Sequence":
        return [p for member in spec.get("pretokenizers") or [] for p in _pre_tokenizers(member)]
    return [spec]


def detect(tokenizer_spec: dict) -> WordBoundaries:
    """The word-boundary family of a tokenizers JSON (as a dict)."""
    model = tokenizer_spec.get("model") or {}
    prefix = model.get("continuing_subword_prefix")
    if prefix and model.get("type") in ("WordPiece", "BPE"):
        return WordBoundaries(CONTINUATION, prefix)
    if model.get("type") == "BPE" and model.get("end_of_word_suffix"):
        return WordBoundaries(WORD_IDS)
    for pre in _pre_tokenizers(tokenizer_spec.get("pre_tokenizer")):
        if pre.get("type") == "ByteLevel":
            return WordBoundaries(START_MARKER, BYTE_LEVEL_SPACE)
        if pre.get("type") == "Metaspace":
            return WordBoundaries(START_MARKER, pre.get("replacement") or METASPACE)
    return WordBoundaries(WORD_IDS)


def starts_word_by_id(vocab: dict[str, int], size: int, boundaries: WordBoundaries,
                      special_ids: set[int]) -> np.ndarray:
    """Bool per id: the piece begins a word.  ``special_ids`` count as word
    starts (they are never masked, but must not glue words together)."""
    marker = boundaries.marker or ""
    if boundaries.kind == CONTINUATION:
        starts = np.ones(size, dtype=bool)
        for token, index in vocab.items():
            if token.startswith(marker):
                starts[index] = False
    elif boundaries.kind == START_MARKER:
        starts = np.zeros(size, dtype=bool)
        for token, index in vocab.items():
            if token.startswith(marker):
                starts[index] = True
    else:
        starts = np.ones(size, dtype=bool)
    for index in special_ids:
        starts[index] = True
    return starts


def first_token_of_each(lengths: np.ndarray) -> np.ndarray:
    """Positions (in the flat token array) of every non-empty text's first token."""
    lengths = np.asarray(lengths, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    return offsets[lengths > 0]


def marker_word_starts(ids: np.ndarray, lengths: np.ndarray, starts_word: np.ndarray) -> np.ndarray:
    """Per-token starts for the start-marker family: the per-id table, and
    every text's first token."""
    starts = starts_word[ids] if len(ids) else np.zeros(0, dtype=bool)
    starts[first_token_of_each(lengths)] = True
    return starts


def word_ids_starts(word_ids: list[int | None]) -> list[bool]:
    """Per-token starts from one Encoding's word ids: a token whose word
    differs from the previous token's (or has none) begins a word."""
    starts, previous = [], object()
    for word in word_ids:
        starts.append(word is None or word != previous)
        previous = word
    return starts
