"""A WordPiece vocabulary trained deterministically (``mlm-train-vocab --model wordpiece``).

The algorithm is Hugging Face's WordPieceTrainer's: BPE merges over the
corpus' words, every character after a word's first carrying the ``##``
prefix, the most frequent adjacent pair merged first.  Theirs breaks ties
between equally frequent pairs by symbol ids that follow a Rust HashMap's
iteration order, which is seeded per process: the same corpus gave another
vocab.txt on every run.  Here every order is stated:

* the initial symbols are sorted by their text (code points);
* among equally frequent pairs, the one whose (left, right) texts sort
  first is merged first;
* the vocabulary is the special tokens, the initial symbols, then the
  merged symbols in merge order.

So the same corpus and options give the same file, byte for byte.
"""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict
from collections.abc import Iterable

PREFIX = "##"


def word_counts(lines: Iterable[str], do_lower_case: bool) -> Counter:
    """Words as BERT's normalizer and pre-tokenizer cut them, with their counts."""
    from tokenizers import normalizers, pre_tokenizers

    normalizer = normalizers.BertNormalizer(lowercase=do_lower_case, strip_accents=do_lower_case)
    pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    counts: Counter = Counter()
    for line in lines:
        counts.update(word for word, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(line)))
    return counts


def train_wordpiece(counts: Counter, vocab_size: int, special: list[str]) -> list[str]:
    """The vocabulary (in id order) of at most ``vocab_size`` tokens."""
    words = sorted(counts)  # a fixed order, whatever order the counts were made in
    frequency = [counts[word] for word in words]
    symbols = [[word[0]] + [PREFIX + ch for ch in word[1:]] for word in words]
    alphabet = sorted({symbol for word in symbols for symbol in word})
    vocab = list(special) + [symbol for symbol in alphabet if symbol not in special]
    known = set(vocab)

    pair_count: defaultdict[tuple[str, str], int] = defaultdict(int)
    pair_words: defaultdict[tuple[str, str], set[int]] = defaultdict(set)
    for index, word in enumerate(symbols):
        for pair in zip(word, word[1:]):
            pair_count[pair] += frequency[index]
            pair_words[pair].add(index)
    heap = [(-count, pair) for pair, count in pair_count.items()]
    heapq.heapify(heap)

    while len(vocab) < vocab_size and heap:
        negative, pair = heapq.heappop(heap)
        if pair_count.get(pair, 0) != -negative or negative == 0:
            continue  # stale: its count changed since it was pushed
        left, right = pair
        merged = left + (right[len(PREFIX):] if right.startswith(PREFIX) else right)
        if merged not in known:
            vocab.append(merged)
            known.add(merged)
        changed: set[tuple[str, str]] = set()
        for index in sorted(pair_words.pop(pair, ())):
            word, count = symbols[index], frequency[index]
            for old in zip(word, word[1:]):
                pair_count[old] -= count
                changed.add(old)
            rebuilt, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and word[i] == left and word[i + 1] == right:
                    rebuilt.append(merged)
                    i += 2
                else:
                    rebuilt.append(word[i])
                    i += 1
            symbols[index] = rebuilt
            for new in zip(rebuilt, rebuilt[1:]):
                pair_count[new] += count
                pair_words[new].add(index)
                changed.add(new)
        pair_count.pop(pair, None)
        for other in changed:
            if other != pair and pair_count.get(other, 0) > 0:
                heapq.heappush(heap, (-pair_count[other], other))
    return vocab
