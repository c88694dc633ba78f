"""Instance building and masking on hand-made token lists."""

import itertools
import math
import random
from collections import Counter

import numpy as np
import pytest

from common.objectives import TokenizedDocuments
from common.objectives.bert import BertParams, InstancePlan, build_batch, plan_instances, truncation_counts
from common.objectives.masking import num_to_predict
from common.tokenization import SpecialIds
from tests.common.objectives import bert_reference

CLS, SEP, MASK, PAD = 2, 3, 4, 0
VOCAB = 1000
CONTINUATION = np.zeros(VOCAB, dtype=bool)
CONTINUATION[500:] = True  # ids >= 500 play the '##' pieces
SPECIAL = SpecialIds(cls=CLS, sep=SEP, mask=MASK, pad=PAD, unk=1, vocab_size=VOCAB, starts_word=~CONTINUATION)


def plan_as_lists(documents: TokenizedDocuments, plan: InstancePlan):
    tokens = documents.tokens.tolist()
    return [(tokens[a:a + la], tokens[b:b + lb], bool(r)) for a, la, b, lb, r in
            zip(plan.a_start, plan.a_length, plan.b_start, plan.b_length, plan.is_random_next)]


def single_token_documents(rng: random.Random, count: int) -> list[list[list[int]]]:
    next_id = itertools.count(10)
    return [[[next(next_id)] for _ in range(rng.randint(1, 300))] for _ in range(count)]


@pytest.mark.parametrize("seed", range(5))
def test_from_tokenizer_output_drops_empty_segments_and_documents(seed):
    rng = random.Random(seed)
    documents = [[[rng.randint(10, 99) for _ in range(rng.choice([0, 0, 1, 5]))]
                  for _ in range(rng.randint(0, 4))] for _ in range(rng.randint(0, 30))]
    segments = [segment for document in documents for segment in document]
    tokens = np.asarray([t for segment in segments for t in segment], dtype=np.int32)
    built, dropped = TokenizedDocuments.from_segments(tokens, [len(s) for s in segments],
                                                      [len(d) for d in documents])
    expected = TokenizedDocuments.from_lists(documents)
    assert built.tokens.tolist() == expected.tokens.tolist()
    assert built.segment_offsets == expected.segment_offsets
    assert built.document_offsets == expected.document_offsets
    assert dropped == sum(1 for document in documents if not any(document))


# --------------------------------------------------------------------------
# Planning: BERT's control flow
# --------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("short_seq_prob", [0.0, 0.1, 0.7])
def test_plan_matches_reference_exactly_without_truncation(seed, short_seq_prob):
    """With one-token segments nothing is ever truncated, so both implementations
    make the same random draws in the same order: the instances must be identical,
    including the random documents and the segments put back."""
    rng = random.Random(1000 + seed)
    documents = single_token_documents(rng, rng.randint(1, 6))
    params = BertParams(max_seq_length=rng.choice([8, 32, 64]), short_seq_prob=short_seq_prob)
    tokenized = TokenizedDocuments.from_lists(documents)

    ours = plan_as_lists(tokenized, plan_instances(tokenized, params, random.Random(seed)))
    reference_rng = random.Random(seed)
    reference = [instance for index in range(len(documents)) for instance in
                 bert_reference.create_instances_from_document(documents, index, params.max_seq_length,
                                                               params.short_seq_prob, reference_rng)]
    assert ours == reference


@pytest.mark.parametrize("max_num_tokens", [2, 3, 10, 125])
def test_truncation_counts_match_berts_loop(max_num_tokens):
    for a, b in itertools.product(range(1, 60), range(1, 60)):
        tokens_a, tokens_b = list(range(a)), list(range(b))
        bert_reference.truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, random.Random(0))
        assert truncation_counts(a, b, max_num_tokens) == (a - len(tokens_a), b - len(tokens_b))


def test_truncation_front_back_split_is_berts_distribution():
    """BERT flips a fair coin per removed token; the number of front removals per
    side is then Binomial(removed, 1/2), independently: we draw that directly.
    Exhaustive over every coin sequence for small cases."""
    for a, b, m in [(5, 3, 4), (6, 6, 5), (2, 7, 3), (4, 4, 2)]:
        removals = a + b - m
        distribution = Counter()
        for coins in itertools.product([0, 1], repeat=removals):
            la, lb, front_a, front_b = a, b, 0, 0
            for coin in coins:
                if la > lb:
                    la -= 1
                    front_a += coin
                else:
                    lb -= 1
                    front_b += coin
            distribution[(front_a, front_b)] += 1
        ra, rb = truncation_counts(a, b, m)
        for (fa, fb), count in distribution.items():
            expected = math.comb(ra, fa) * math.comb(rb, fb) / 2 ** removals
            assert count / 2 ** removals == pytest.approx(expected)


def test_random_next_puts_unused_segments_back():
    """Document of 4 three-token segments, target 6: the chunk closes after two
    segments.  When B comes from another document, segment 2 is put back and
    starts the next chunk; when B is the actual next, it is used."""
    documents = [[[10, 11, 12], [20, 21, 22], [30, 31, 32], [40, 41, 42]], [[90, 91]]]
    tokenized = TokenizedDocuments.from_lists(documents)
    params = BertParams(max_seq_length=9, short_seq_prob=0.0)  # max_num_tokens 6
    seen_put_back = seen_actual = False
    for seed in range(200):
        instances = plan_as_lists(tokenized, plan_instances(tokenized, params, random.Random(seed)))
        first = instances[0]
        assert first[0] == [10, 11, 12]
        if first[2]:
            assert first[1][:2] == [90, 91]
            assert instances[1][0] == [20, 21, 22]  # put back: starts the next instance
            seen_put_back = True
        else:
            assert first[1] == [20, 21, 22]
            assert instances[1][0] == [30, 31, 32]
            seen_actual = True
    assert seen_put_back and seen_actual


def test_every_instance_fits_and_is_contiguous():
    rng = random.Random(5)
    documents = [[[rng.randint(5, 400) for _ in range(rng.randint(1, 90))] for _ in range(rng.randint(1, 12))]
                 for _ in range(30)]
    tokenized = TokenizedDocuments.from_lists(documents)
    for max_seq_length in (5, 16, 128):
        params = BertParams(max_seq_length=max_seq_length)
        plan = plan_instances(tokenized, params, random.Random(max_seq_length))
        assert len(plan) > 0
        assert (plan.a_length >= 1).all() and (plan.b_length >= 1).all()
        assert (plan.a_length + plan.b_length <= max_seq_length - 3).all()
        assert (plan.a_start + plan.a_length <= len(tokenized.tokens)).all()
        assert (plan.b_start + plan.b_length <= len(tokenized.tokens)).all()


# --------------------------------------------------------------------------
# Masking
# --------------------------------------------------------------------------

def one_instance(a, b, random_next=False):
    tokens = np.asarray(a + b, dtype=np.int32)
    plan = InstancePlan(np.array([0]), np.array([len(a)]), np.array([len(a)]), np.array([len(b)]), np.array([random_next]))
    return tokens, plan


def test_layout_padding_and_segment_ids():
    tokens, plan = one_instance([11, 12, 13], [21, 22], random_next=True)
    params = BertParams(max_seq_length=12, max_predictions_per_seq=4, masked_lm_prob=1e-9)
    batch = build_batch(tokens, plan, params, SPECIAL, np.random.default_rng(0))
    original = [CLS, 11, 12, 13, SEP, 21, 22, SEP, 0, 0, 0, 0]
    masked_position = batch.columns["masked_lm_positions"][0, 0]
    ids = batch.columns["input_ids"][0].tolist()
    ids[masked_position] = original[masked_position]
    assert ids == original
    assert batch.columns["input_mask"][0].tolist() == [1] * 8 + [0] * 4
    assert batch.columns["segment_ids"][0].tolist() == [0] * 5 + [1] * 3 + [0] * 4
    assert batch.columns["next_sentence_labels"].tolist() == [[1]]
    # One prediction (max(1, round(8 * 1e-9))) on a non-special position, label = original.
    assert batch.columns["masked_lm_weights"][0].tolist() == [1, 0, 0, 0]
    assert masked_position not in (0, 4, 7)
    assert batch.columns["masked_lm_ids"][0, 0] == original[masked_position]


@pytest.mark.parametrize("length", range(5, 600))
def test_num_to_predict_is_pythons_round(length):
    params = BertParams(masked_lm_prob=0.15, max_predictions_per_seq=80)
    expected = min(80, max(1, int(round(length * 0.15))))
    assert num_to_predict(np.array([length]), params.masked_lm_prob, params.max_predictions_per_seq)[0] == expected


def random_batch(rng, n, max_seq_length, continuation_rate=0.0):
    a_lengths = rng.integers(1, (max_seq_length - 3) // 2 + 1, n)
    b_lengths = rng.integers(1, (max_seq_length - 3) // 2 + 1, n)
    words = rng.integers(10, 500, 10 * n * max_seq_length)
    pieces = rng.integers(500, VOCAB, words.size)
    tokens = np.where(rng.random(words.size) < continuation_rate, pieces, words).astype(np.int32)
    a_start = rng.integers(0, tokens.size - max_seq_length, n)
    b_start = rng.integers(0, tokens.size - max_seq_length, n)
    return tokens, InstancePlan(a_start, a_lengths, b_start, b_lengths, rng.random(n) < 0.5)


@pytest.mark.parametrize("whole_word", [False, True])
@pytest.mark.parametrize("masked_lm_prob,max_predictions", [(0.15, 20), (0.5, 10), (1.0, 200)])
def test_masking_invariants(whole_word, masked_lm_prob, max_predictions):
    rng = np.random.default_rng(3)
    params = BertParams(max_seq_length=64, max_predictions_per_seq=max_predictions,
                        masked_lm_prob=masked_lm_prob, do_whole_word_mask=whole_word)
    tokens, plan = random_batch(rng, 500, 64, continuation_rate=0.4 if whole_word else 0.0)
    batch = build_batch(tokens, plan, params, SPECIAL, np.random.default_rng(9))
    unmasked = build_batch(tokens, plan, BertParams(max_seq_length=64, masked_lm_prob=1e-9,
                                                    max_predictions_per_seq=1), SPECIAL, np.random.default_rng(9))
    sequence_length = plan.a_length + plan.b_length + 3
    budget = num_to_predict(sequence_length, params.masked_lm_prob, params.max_predictions_per_seq)
    for i in range(len(plan)):
        original = unmasked.columns["input_ids"][i].copy()
        original[unmasked.columns["masked_lm_positions"][i, 0]] = unmasked.columns["masked_lm_ids"][i, 0]
        count = int(batch.columns["masked_lm_weights"][i].sum())
        positions = batch.columns["masked_lm_positions"][i, :count]
        assert count <= budget[i]
        assert (np.diff(positions) > 0).all(), "positions sorted, distinct"
        assert not set(positions.tolist()) & {0, int(plan.a_length[i]) + 1, int(sequence_length[i]) - 1}
        assert (positions < sequence_length[i]).all()
        assert (batch.columns["masked_lm_ids"][i, :count] == original[positions]).all(), "labels are the original tokens"
        assert (batch.columns["masked_lm_positions"][i, count:] == 0).all() and (batch.columns["masked_lm_ids"][i, count:] == 0).all()
        untouched = np.ones(64, dtype=bool)
        untouched[positions] = False
        assert (batch.columns["input_ids"][i][untouched] == original[untouched]).all()
        if not whole_word:
            assert count == min(budget[i], sequence_length[i] - 3)
        else:
            # Whole words: a word's pieces are masked together or not at all.
            candidates = [p for p in range(1, sequence_length[i] - 1) if p != plan.a_length[i] + 1]
            word_start = {}
            current = None
            for p in candidates:
                if current is None or not CONTINUATION[original[p]]:
                    current = p
                word_start[p] = current
            masked_words = Counter(word_start[p] for p in positions.tolist())
            sizes = Counter(word_start.values())
            assert all(masked_words[w] == sizes[w] for w in masked_words)


def test_whole_word_piece_opening_b_joins_last_word_of_a():
    """BERT skips [SEP] when grouping, so a '##' piece at the start of B extends
    the last word of A: both are masked together or not at all."""
    tokens, plan = one_instance([11, 12], [600, 13])
    params = BertParams(max_seq_length=8, max_predictions_per_seq=8, masked_lm_prob=0.4, do_whole_word_mask=True)
    together = 0
    for seed in range(300):
        batch = build_batch(tokens, plan, params, SPECIAL, np.random.default_rng(seed))
        count = int(batch.columns["masked_lm_weights"][0].sum())
        positions = set(batch.columns["masked_lm_positions"][0, :count].tolist())
        assert (2 in positions) == (4 in positions)
        together += 2 in positions
    assert together > 0


def test_80_10_10_replacement():
    rng = np.random.default_rng(11)
    params = BertParams(max_seq_length=128, max_predictions_per_seq=20)
    tokens, plan = random_batch(rng, 4000, 128)
    batch = build_batch(tokens, plan, params, SPECIAL, np.random.default_rng(12))
    weights = batch.columns["masked_lm_weights"].astype(bool)
    replaced = np.take_along_axis(batch.columns["input_ids"], batch.columns["masked_lm_positions"], axis=1)[weights]
    labels = batch.columns["masked_lm_ids"][weights]
    total = labels.size
    as_mask = (replaced == MASK).mean()
    kept = (replaced == labels).mean()
    random_word = ((replaced != MASK) & (replaced != labels)).mean()
    # Binomial standard error at n ~ 40k is ~0.002: 5 sigma.
    assert total > 30000
    assert as_mask == pytest.approx(0.8, abs=0.01)
    assert kept == pytest.approx(0.1, abs=0.01)
    assert random_word == pytest.approx(0.1, abs=0.01)


def test_whole_word_selection_matches_reference_distribution():
    """Greedy whole-word selection (skip words that do not fit) gives BERT's
    distribution of masked counts."""
    rng = np.random.default_rng(4)
    params = BertParams(max_seq_length=48, max_predictions_per_seq=7, masked_lm_prob=0.3, do_whole_word_mask=True)
    tokens, plan = random_batch(rng, 1, 48, continuation_rate=0.5)
    plan = plan.take(np.zeros(6000, dtype=np.int64))
    batch = build_batch(tokens, plan, params, SPECIAL, np.random.default_rng(5))
    ours = Counter(batch.columns["masked_lm_weights"].sum(axis=1).astype(int).tolist())
    sequence = [CLS] + tokens[plan.a_start[0]:plan.a_start[0] + plan.a_length[0]].tolist() + [SEP] + \
        tokens[plan.b_start[0]:plan.b_start[0] + plan.b_length[0]].tolist() + [SEP]
    reference_rng = random.Random(6)
    reference = Counter(len(bert_reference.create_masked_lm_predictions(
        sequence, 0.3, 7, VOCAB, reference_rng, CLS, SEP, MASK, lambda t: CONTINUATION[t])[1]) for _ in range(6000))
    for count in set(ours) | set(reference):
        assert ours[count] / 6000 == pytest.approx(reference[count] / 6000, abs=0.03), count
    # Per-position masking frequency agrees too.
    ours_positions = Counter(batch.columns["masked_lm_positions"][batch.columns["masked_lm_weights"] > 0].tolist())
    reference_rng = random.Random(7)
    reference_positions = Counter(p for _ in range(6000) for p in bert_reference.create_masked_lm_predictions(
        sequence, 0.3, 7, VOCAB, reference_rng, CLS, SEP, MASK, lambda t: CONTINUATION[t])[1])
    for position in range(len(sequence)):
        assert ours_positions[position] / 6000 == pytest.approx(reference_positions[position] / 6000, abs=0.035)
