"""google-research/bert's instance algorithm, token by token, as the oracle.

A plain re-statement of create_pretraining_data.py's
create_instances_from_document, truncate_seq_pair and
create_masked_lm_predictions, on token ids and Python's ``random``.  The
production code must agree with it in distribution (tests compare
statistics) and, for the deterministic parts, exactly.
"""

from __future__ import annotations

import random


def truncate_seq_pair(tokens_a: list, tokens_b: list, max_num_tokens: int, rng: random.Random) -> None:
    """BERT's truncate_seq_pair (``truncate_seq_pair_as_written``) with the same draws and the same result, without
    its loop over single tokens (most of the statistics tests' CPU at short lengths).  Which list loses each token
    is fixed by the lengths alone: the longer one until they are level (``tokens_b`` on a tie), then ``tokens_b``
    and ``tokens_a`` in turn; only the end it is cut from is drawn, one ``rng.random()`` per token, in order.
    tests/common/objectives/test_bert.py holds the two equal, lists and random stream."""
    la, lb = len(tokens_a), len(tokens_b)
    excess = la + lb - max_num_tokens
    if excess <= 0:
        return
    fronts = [rng.random() < 0.5 for _ in range(excess)]
    lead, alternate = fronts[:min(abs(la - lb), excess)], fronts[min(abs(la - lb), excess):]
    of_a, of_b = ((lead + alternate[1::2], alternate[0::2]) if la > lb else (alternate[1::2], lead + alternate[0::2]))
    for tokens, coins in ((tokens_a, of_a), (tokens_b, of_b)):
        assert len(coins) <= len(tokens)  # BERT's: a list is never cut when empty
        keep = len(tokens) - len(coins)
        del tokens[:sum(coins)]
        del tokens[keep:]


def truncate_seq_pair_as_written(tokens_a: list, tokens_b: list, max_num_tokens: int, rng: random.Random) -> None:
    """create_pretraining_data.py's loop, token by token: what ``truncate_seq_pair`` is held to."""
    while len(tokens_a) + len(tokens_b) > max_num_tokens:
        trunc = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        assert len(trunc) >= 1
        if rng.random() < 0.5:
            del trunc[0]
        else:
            trunc.pop()


def create_masked_lm_predictions(tokens, masked_lm_prob, max_predictions_per_seq, vocab_size, rng,
                                 cls_id, sep_id, mask_id, is_continuation=None):
    cand_indexes = []
    for i, token in enumerate(tokens):
        if token in (cls_id, sep_id):
            continue
        if is_continuation is not None and cand_indexes and is_continuation(token):
            cand_indexes[-1].append(i)
        else:
            cand_indexes.append([i])
    rng.shuffle(cand_indexes)
    output = list(tokens)
    num_to_predict = min(max_predictions_per_seq, max(1, int(round(len(tokens) * masked_lm_prob))))
    masked = []
    covered = set()
    for index_set in cand_indexes:
        if len(masked) >= num_to_predict:
            break
        if len(masked) + len(index_set) > num_to_predict:
            continue
        if any(i in covered for i in index_set):
            continue
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
    return output, [i for i, _ in masked], [label for _, label in masked]


def create_instances_from_document(all_documents, document_index, max_seq_length, short_seq_prob, rng):
    """Unmasked instances: (tokens_a, tokens_b, is_random_next)."""
    document = all_documents[document_index]
    max_num_tokens = max_seq_length - 3
    target_seq_length = max_num_tokens
    if rng.random() < short_seq_prob:
        target_seq_length = rng.randint(2, max_num_tokens)
    instances = []
    current_chunk = []
    current_length = 0
    i = 0
    while i < len(document):
        segment = document[i]
        current_chunk.append(segment)
        current_length += len(segment)
        if i == len(document) - 1 or current_length >= target_seq_length:
            if current_chunk:
                a_end = 1
                if len(current_chunk) >= 2:
                    a_end = rng.randint(1, len(current_chunk) - 1)
                tokens_a = [t for j in range(a_end) for t in current_chunk[j]]
                tokens_b = []
                if len(current_chunk) == 1 or rng.random() < 0.5:
                    is_random_next = True
                    target_b_length = target_seq_length - len(tokens_a)
                    for _ in range(10):
                        random_document_index = rng.randint(0, len(all_documents) - 1)
                        if random_document_index != document_index:
                            break
                    random_document = all_documents[random_document_index]
                    random_start = rng.randint(0, len(random_document) - 1)
                    for j in range(random_start, len(random_document)):
                        tokens_b.extend(random_document[j])
                        if len(tokens_b) >= target_b_length:
                            break
                    i -= len(current_chunk) - a_end
                else:
                    is_random_next = False
                    for j in range(a_end, len(current_chunk)):
                        tokens_b.extend(current_chunk[j])
                truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
                assert tokens_a and tokens_b
                instances.append((tokens_a, tokens_b, is_random_next))
            current_chunk = []
            current_length = 0
        i += 1
    return instances
