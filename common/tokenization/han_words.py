"""Per-token word starts where a word segmenter finds the words of Han text.

The tokenizer's own marks (``##``) say where English words begin; inside a
run of Han characters every character is a token of its own, so the
segmenter's words say it instead.  Text is encoded in chunks cut at the
edges of Han runs: for a tokenizer that isolates Han characters (BERT's
``handle_chinese_chars``, which puts spaces around each), those edges are
already word edges, so the ids are the ones the whole text gets
(tests/test_han_words.py checks it), and each Han run gives exactly one token
per character, so the segmenter's word starts map onto tokens one to one.

A run whose token count differs from its length (it should not happen: a
normalizer that drops or splits a character) keeps the tokenizer's word
starts and is counted, never fatal.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from common.word_segmenters.base import WordSegmenter, han_runs


@dataclass
class PieceWords:
    """The Han runs of many texts and their words: what the segmenter found,
    before any encoding (the ``words`` stage)."""

    chunks: list[str]  # every text cut at the edges of its Han runs, in order
    chunks_per_text: list[int]
    han_words: list[list[int] | None]  # per chunk: word lengths of a Han run, None for other text
    han_chars: int = 0


def isolates_han(tokenizer_spec: dict) -> str | None:
    """None when this tokenizer makes each Han character its own word (so
    word segmentation can be mapped onto its tokens); otherwise why not."""
    normalizers = []
    normalizer = tokenizer_spec.get("normalizer") or {}
    normalizers = normalizer.get("normalizers") or [] if normalizer.get("type") == "Sequence" else [normalizer]
    if any(n.get("type") == "BertNormalizer" and n.get("handle_chinese_chars", True) for n in normalizers):
        return None
    return ("its normalizer does not make each Han character a word of its own (BERT's BertNormalizer with "
            "handle_chinese_chars, as a vocab.txt or a Chinese BERT's tokenizer.json has)")


def find_words(texts: list[str], segmenter: WordSegmenter) -> PieceWords:
    """Cut each text at its Han runs and segment the runs into words."""
    chunks: list[str] = []
    counts: list[int] = []
    is_run: list[bool] = []
    runs: list[str] = []
    for text in texts:
        before = len(chunks)
        position = 0
        for start, end in han_runs(text):
            if start > position:
                chunks.append(text[position:start])
                is_run.append(False)
            chunks.append(text[start:end])
            is_run.append(True)
            runs.append(text[start:end])
            position = end
        if position < len(text) or position == 0:
            chunks.append(text[position:])
            is_run.append(False)
        counts.append(len(chunks) - before)
    lengths = iter(segmenter.word_lengths(runs)) if runs else iter(())
    han_words = [next(lengths) if run else None for run in is_run]
    return PieceWords(chunks, counts, han_words, sum(map(len, runs)))


def word_starts_of_runs(han_words: list[list[int] | None], chunk_lengths: np.ndarray,
                        starts: np.ndarray) -> int:
    """Set ``starts`` (per token, in place) inside each Han run from its words;
    returns how many runs could not be mapped (token count != characters)."""
    offsets = np.concatenate([[0], np.cumsum(chunk_lengths)]).astype(np.int64)
    mismatched = 0
    for index, words in enumerate(han_words):
        if words is None:
            continue
        first, count = int(offsets[index]), int(chunk_lengths[index])
        if count != sum(words) or any(length <= 0 for length in words):
            mismatched += 1
            continue
        run = np.zeros(count, dtype=bool)
        run[np.concatenate([[0], np.cumsum(words)[:-1]]).astype(np.int64)] = True
        starts[first:first + count] = run
    return mismatched


def encode_with_words(vocabulary, words: PieceWords) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Ids, tokens per text, per-token word starts (the tokenizer's, and the
    segmenter's inside Han runs), and how many runs could not be mapped."""
    ids, chunk_lengths = vocabulary.encode_many(words.chunks)
    starts = vocabulary.starts_word[ids] if len(ids) else np.zeros(0, dtype=bool)
    mismatched = word_starts_of_runs(words.han_words, chunk_lengths, starts)
    counts = np.asarray(words.chunks_per_text, dtype=np.int64)
    if len(counts) == len(chunk_lengths):
        lengths = np.asarray(chunk_lengths, dtype=np.int64)
    elif not len(counts):
        lengths = np.zeros(0, dtype=np.int64)
    else:
        lengths = np.add.reduceat(np.asarray(chunk_lengths, dtype=np.int64),
                                  np.concatenate(([0], np.cumsum(counts)[:-1])))
    return ids, lengths, starts, mismatched


def check_tokenizer(vocabulary) -> None:
    """ValueError with a one-line reason when word segmentation cannot be mapped onto this tokenizer."""
    from common.tokenization.word_boundaries import CONTINUATION

    reason = isolates_han(json.loads(vocabulary.tokenizer.to_str()))
    if reason is None and vocabulary.boundaries.kind != CONTINUATION:
        reason = "its words are not marked by a continuation prefix (##)"
    if reason:
        raise ValueError(f"--word-segmenter needs a tokenizer that makes each Han character a token of its own; "
                         f"this one cannot: {reason}")
