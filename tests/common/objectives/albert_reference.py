"""google-research/albert's instance algorithm, token by token, as the oracle.

A plain re-statement of its create_pretraining_data.py on token ids:
create_instances_from_document (sentence order, or random next with
``random_next_sentence``) and create_masked_lm_predictions (n-gram masking,
token_boundary).  One change: the n-gram lengths come from a seeded NumPy
generator instead of NumPy's unseeded global one, so the oracle repeats.
"""

from __future__ import annotations

import bisect
import functools
import random

import numpy as np

from tests.common.objectives.bert_reference import truncate_seq_pair


def create_instances_from_document(documents, index, max_seq_length, short_seq_prob, random_next_sentence,
                                   rng: random.Random):
    """(tokens_a, tokens_b, label) per instance of one document."""
    document = documents[index]
    max_num_tokens = max_seq_length - 3
    target_seq_length = max_num_tokens
    if rng.random() < short_seq_prob:
        target_seq_length = rng.randint(2, max_num_tokens)
    instances = []
    chunk, length, i = [], 0, 0
    while i < len(document):
        chunk.append(document[i])
        length += len(document[i])
        if i == len(document) - 1 or length >= target_seq_length:
            if chunk:
                a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
                tokens_a = [t for segment in chunk[:a_end] for t in segment]
                tokens_b = []
                if len(chunk) == 1 or (random_next_sentence and rng.random() < 0.5):
                    label = 1
                    target_b_length = target_seq_length - len(tokens_a)
                    for _ in range(10):
                        random_index = rng.randint(0, len(documents) - 1)
                        if random_index != index:
                            break
                    other = documents[random_index]
                    for segment in other[rng.randint(0, len(other) - 1):]:
                        tokens_b.extend(segment)
                        if len(tokens_b) >= target_b_length:
                            break
                    i -= len(chunk) - a_end
                elif not random_next_sentence and rng.random() < 0.5:
                    label = 1
                    tokens_b = [t for segment in chunk[a_end:] for t in segment]
                    tokens_a, tokens_b = tokens_b, tokens_a
                else:
                    label = 0
                    tokens_b = [t for segment in chunk[a_end:] for t in segment]
                truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
                instances.append((tokens_a, tokens_b, label))
            chunk, length = [], 0
        i += 1
    return instances


def ngram_pvals(ngram: int, favor_shorter: bool) -> np.ndarray:
    """ALBERT's n-gram length probabilities: 1/n, normalised (reversed without favor_shorter_ngram)."""
    pvals = 1.0 / np.arange(1, ngram + 1)
    pvals /= pvals.sum(keepdims=True)
    return pvals if favor_shorter else pvals[::-1]


@functools.cache
def ngram_cdfs(ngram: int, favor_shorter: bool) -> tuple[tuple[float, ...], ...]:
    """Per number k of n-grams on offer, the cumulative distribution ``RandomState.choice`` draws from with
    ALBERT's ``p=pvals[:k] / pvals[:k].sum()``, computed as it computes it."""
    pvals, cdfs = ngram_pvals(ngram, favor_shorter), []
    for k in range(1, ngram + 1):
        cdf = (pvals[:k] / pvals[:k].sum(keepdims=True)).cumsum()
        cdf /= cdf[-1]
        cdfs.append(tuple(cdf.tolist()))
    return tuple(cdfs)


def choose_ngram(cdfs: tuple[tuple[float, ...], ...], offered: int, nprng: np.random.RandomState) -> int:
    """ALBERT's ``nprng.choice(ngrams[:k], p=...)``: one ``random_sample()`` looked up in that distribution, as
    ``choice`` does (the same n, the same stream: test_albert.py holds the two equal), without its per-call checks
    of ``p``, which were most of the reference's CPU."""
    return bisect.bisect_right(cdfs[offered - 1], nprng.random_sample()) + 1


def create_masked_lm_predictions(tokens, masked_lm_prob, max_predictions_per_seq, vocab_size, rng, nprng,
                                 cls_id, sep_id, mask_id, is_start, whole_word=True, ngram=3, favor_shorter=True):
    """(output tokens, masked positions, labels, token_boundary, n-gram sizes in words)."""
    cand_indexes = []
    token_boundary = [0] * len(tokens)
    for i, token in enumerate(tokens):
        if token in (cls_id, sep_id):
            token_boundary[i] = 1
            continue
        if whole_word and cand_indexes and not is_start(token):
            cand_indexes[-1].append(i)
        else:
            cand_indexes.append([i])
            if is_start(token):
                token_boundary[i] = 1
    output = list(tokens)
    num_to_predict = min(max_predictions_per_seq, max(1, int(round(len(tokens) * masked_lm_prob))))
    cdfs = ngram_cdfs(ngram, favor_shorter)
    ngram_indexes = [[cand_indexes[idx:idx + n] for n in range(1, ngram + 1)] for idx in range(len(cand_indexes))]
    rng.shuffle(ngram_indexes)
    masked, covered, sizes = [], set(), []
    for cand_index_set in ngram_indexes:
        if len(masked) >= num_to_predict:
            break
        if not cand_index_set:
            continue
        n = choose_ngram(cdfs, len(cand_index_set), nprng)
        index_set = sum(cand_index_set[n - 1], [])
        words = len(cand_index_set[n - 1])
        n -= 1
        while len(masked) + len(index_set) > num_to_predict:
            if n == 0:
                break
            index_set = sum(cand_index_set[n - 1], [])
            words = len(cand_index_set[n - 1])
            n -= 1
        if len(masked) + len(index_set) > num_to_predict:
            continue
        if any(index in covered for index in index_set):
            continue
        sizes.append(words)
        for index in index_set:
            covered.add(index)
            if rng.random() < 0.8:
                replacement = mask_id
            elif rng.random() < 0.5:
                replacement = tokens[index]
            else:
                replacement = rng.randint(0, vocab_size - 1)
            output[index] = replacement
            masked.append((index, tokens[index]))
    masked.sort()
    return output, [p for p, _ in masked], [label for _, label in masked], token_boundary, sizes
