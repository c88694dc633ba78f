"""Per-token word starts where a word segmenter finds the words of Han text.

The tokenizer's own marks (``##``) say where English words begin; inside a
run of Han characters every character is a token of its own, so the
segmenter's words say it instead.  For a tokenizer that isolates Han
characters (BERT's ``handle_chinese_chars`` puts spaces around each, so each
becomes one token: its piece, or the unknown token), a text's Han tokens are
its Han characters in order.  The text is encoded whole, as without a
segmenter (same ids), and its Han tokens (single-Han-character pieces and the
unknown token) get the segmenter's word starts, character by character.

A text with an unknown token that stands for other text (kana, a symbol) is
encoded again in chunks cut at its Han runs, which gives each run's tokens;
one that still does not map (a normalizer that drops a character) keeps the
tokenizer's word starts and is counted, never fatal.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass

import numpy as np

from common.word_segmenters.base import WordSegmenter, han_runs, is_han


@dataclass
class PieceWords:
    """What the segmenter found in many texts, before any encoding (the ``words`` stage)."""

    texts: list[str]
    han_chars: np.ndarray  # per text: how many Han characters it has
    starts_word: np.ndarray  # bool per Han character of all texts, in order: it begins a word
    bad_runs: int = 0  # runs whose words did not add up to the run (left as one-character words)


def isolates_han(tokenizer_spec: dict) -> str | None:
    """None when this tokenizer makes each Han character its own word (so
    word segmentation can be mapped onto its tokens); otherwise why not."""
    normalizers: list = []
    normalizer = tokenizer_spec.get("normalizer") or {}
    normalizers = normalizer.get("normalizers") or [] if normalizer.get("type") == "Sequence" else [normalizer]
    if any(n.get("type") == "BertNormalizer" and n.get("handle_chinese_chars", True) for n in normalizers):
        return None
    return ("its normalizer does not make each Han character a word of its own (BERT's BertNormalizer with "
            "handle_chinese_chars, as a vocab.txt or a Chinese BERT's tokenizer.json has)")


def find_words(texts: list[str], segmenter: WordSegmenter) -> PieceWords:
    """Segment every Han run of ``texts`` into words (in bulk: one call, then numpy)."""
    runs: list[str] = []
    han_chars = np.zeros(len(texts), dtype=np.int64)
    for index, text in enumerate(texts):
        spans = han_runs(text)
        runs.extend(text[start:end] for start, end in spans)
        han_chars[index] = sum(end - start for start, end in spans)
    total = int(han_chars.sum())
    if not runs:
        return PieceWords(texts, han_chars, np.ones(total, dtype=bool), 0)
    lists = segmenter.word_lengths(runs)
    words_per_run = np.fromiter(map(len, lists), dtype=np.int64, count=len(runs))
    flat = np.fromiter(itertools.chain.from_iterable(lists), dtype=np.int64, count=int(words_per_run.sum()))
    run_length = np.fromiter(map(len, runs), dtype=np.int64, count=len(runs))
    run_of_word = np.repeat(np.arange(len(runs)), words_per_run)
    ok = np.bincount(run_of_word, weights=flat, minlength=len(runs)).astype(np.int64) == run_length
    ok &= np.bincount(run_of_word[flat <= 0], minlength=len(runs)) == 0
    # a word's start inside its run: the lengths before it, less those of the runs before
    before = np.cumsum(flat) - flat
    first_word = np.cumsum(words_per_run) - words_per_run
    within = before - before[np.minimum(first_word, max(len(flat) - 1, 0))][run_of_word]
    run_start = np.cumsum(run_length) - run_length
    starts = np.ones(total, dtype=bool)
    starts[ok[np.repeat(np.arange(len(runs)), run_length)]] = False
    keep = ok[run_of_word]
    starts[(run_start[run_of_word] + within)[keep]] = True
    return PieceWords(texts, han_chars, starts, int(np.count_nonzero(~ok)))


def han_token_table(vocabulary) -> np.ndarray:
    """Bool per id: the piece is one Han character, or the unknown token (which an unknown Han character gives)."""
    table = np.zeros(vocabulary.size, dtype=bool)
    for piece, index in vocabulary.tokenizer.get_vocab(with_added_tokens=False).items():
        if len(piece) == 1 and is_han(piece):
            table[index] = True
    if vocabulary.unk_id is not None:
        table[vocabulary.unk_id] = True
    return table


def encode_with_words(vocabulary, words: PieceWords,
                      han_table: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Ids, tokens per text, per-token word starts (the tokenizer's, and the
    segmenter's at Han tokens), and how many texts could not be mapped."""
    ids, lengths = vocabulary.encode_many(words.texts)
    lengths = np.asarray(lengths, dtype=np.int64)
    starts = vocabulary.starts_word[ids] if len(ids) else np.zeros(0, dtype=bool)
    if not len(ids) or not len(words.starts_word):
        return ids, lengths, starts, 0
    table = han_token_table(vocabulary) if han_table is None else han_table
    han_token = table[ids]
    text_of_token = np.repeat(np.arange(len(lengths)), lengths)
    han_tokens = np.bincount(text_of_token[han_token], minlength=len(lengths))
    mapped = han_tokens == words.han_chars
    char_text = np.repeat(np.arange(len(lengths)), words.han_chars)
    use_token = han_token & mapped[text_of_token]
    starts[use_token] = words.starts_word[mapped[char_text]]
    unmapped = 0
    token_offsets = np.concatenate([[0], np.cumsum(lengths)])
    char_offsets = np.concatenate([[0], np.cumsum(words.han_chars)])
    for index in np.nonzero(~mapped)[0].tolist():  # an unknown token from other text too (kana, symbols)
        first, last = int(token_offsets[index]), int(token_offsets[index + 1])
        text_starts = _starts_by_chunks(vocabulary, words.texts[index], ids[first:last],
                                        words.starts_word[char_offsets[index]:char_offsets[index + 1]])
        if text_starts is None:
            unmapped += 1
        else:
            starts[first:last] = text_starts
    return ids, lengths, starts, unmapped


def _starts_by_chunks(vocabulary, text: str, ids: np.ndarray, char_starts: np.ndarray) -> np.ndarray | None:
    """Word starts of one text encoded in chunks cut at its Han runs (each run's
    tokens are then known: one per character), or None when the chunks do not
    give the text's own ids or a run is not one token per character."""
    chunks, is_run = [], []
    position = 0
    for start, end in han_runs(text):
        if start > position:
            chunks.append(text[position:start])
            is_run.append(False)
        chunks.append(text[start:end])
        is_run.append(True)
        position = end
    if position < len(text):
        chunks.append(text[position:])
        is_run.append(False)
    chunk_ids, chunk_lengths = vocabulary.encode_many(chunks)
    if not np.array_equal(chunk_ids, ids):
        return None
    starts = vocabulary.starts_word[ids].copy()
    token, char = 0, 0
    for chunk, run, count in zip(chunks, is_run, chunk_lengths.tolist()):
        if run:
            if count != len(chunk):
                return None
            starts[token:token + count] = char_starts[char:char + count]
            char += count
        token += count
    return starts


def check_tokenizer(vocabulary) -> None:
    """ValueError with a one-line reason when word segmentation cannot be mapped onto this tokenizer."""
    from common.tokenization.word_boundaries import CONTINUATION

    reason = isolates_han(json.loads(vocabulary.tokenizer.to_str()))
    if reason is None and vocabulary.boundaries.kind != CONTINUATION:
        reason = "its words are not marked by a continuation prefix (##)"
    if reason:
        raise ValueError(f"--word-segmenter needs a tokenizer that makes each Han character a token of its own; "
                         f"this one cannot: {reason}")
