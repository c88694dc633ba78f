"""Token-budget packing, sample masking and layouts: the pure parts of --batch-tokens."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loader.packing import best_fit_decreasing, padded_runs, slots
from loader.sample_masking import SampleMasking, mask_samples
from loader.token_layout import flat, padded

budgets = st.integers(min_value=1, max_value=600)


@st.composite
def windows(draw):
    budget = draw(budgets)
    lengths = draw(st.lists(st.integers(min_value=1, max_value=budget), max_size=300))
    return np.asarray(lengths, dtype=np.int64), budget


@pytest.mark.parametrize("pack", [best_fit_decreasing, padded_runs])
@settings(max_examples=60, deadline=None)
@given(window=windows())
def test_every_sample_once_no_bin_over_budget_deterministic(pack, window):
    lengths, budget = window
    bins = pack(lengths, budget)
    assert sorted(bins.order.tolist()) == list(range(len(lengths)))
    assert bins.bounds[0] == 0 and bins.bounds[-1] == len(lengths) and (np.diff(bins.bounds) > 0).all()
    for index in range(len(bins)):
        members = lengths[bins.bin(index)]
        cost = members.sum() if pack is best_fit_decreasing else len(members) * members.max()
        assert cost <= budget
    again = pack(lengths.copy(), budget)
    assert np.array_equal(again.order, bins.order) and np.array_equal(again.bounds, bins.bounds)


@settings(max_examples=50, deadline=None)
@given(window=windows())
def test_best_fit_never_leaves_two_bins_that_would_fit_together(window):
    """Best fit's guarantee: no two bins are both at most half full (else the later one's samples would have
    gone into the earlier), so the bins needed are fewer than 2 x tokens / budget + 1."""
    lengths, budget = window
    bins = best_fit_decreasing(lengths, budget)
    totals = [int(lengths[bins.bin(i)].sum()) for i in range(len(bins))]
    assert sum(1 for total in totals if 2 * total <= budget) <= 1
    assert len(bins) <= 2 * lengths.sum() / budget + 1


def test_best_fit_chooses_the_tightest_bin():
    # 6 opens bin A (room 4), 5 opens bin B (room 5); 4 goes to A (tightest), 3 to B, 2 to B.
    bins = best_fit_decreasing(np.array([6, 5, 4, 3, 2]), 10)
    assert [sorted(bins.bin(i).tolist()) for i in range(len(bins))] == [[0, 2], [1, 3, 4]]


def test_padded_runs_group_similar_lengths():
    lengths = np.array([100, 3, 98, 4, 97, 5])
    bins = padded_runs(lengths, 300)
    assert [sorted(lengths[bins.bin(i)].tolist()) for i in range(len(bins))] == [[97, 98, 100], [3, 4, 5]]
    assert slots(lengths, bins, "padded", 300) == 300 + 15


def test_a_sample_over_the_budget_is_refused():
    with pytest.raises(ValueError, match="sample 1 has 11 tokens: a bin holds 1 to 10"):
        best_fit_decreasing(np.array([3, 11]), 10)


@st.composite
def samples(draw):
    lengths = draw(st.lists(st.integers(min_value=1, max_value=60), min_size=1, max_size=12))
    total = sum(lengths)
    ids = draw(st.lists(st.integers(min_value=5, max_value=99), min_size=total, max_size=total))
    starts = draw(st.lists(st.booleans(), min_size=total, max_size=total))
    special = draw(st.lists(st.integers(min_value=0, max_value=9), min_size=total, max_size=total))
    return (np.asarray(ids, dtype=np.int32), np.asarray(lengths), np.asarray(starts),
            np.asarray(special) == 0)


@settings(max_examples=60, deadline=None)
@given(batch=samples(), whole=st.booleans(), seed=st.integers(0, 3))
def test_masks_stay_inside_each_sample_and_do_not_depend_on_the_batch(batch, whole, seed):
    """Per sample: the budget (max(1, round(30% x length)), never more maskable tokens than there are), no
    special token touched, whole words all or nothing; and a sample's masks are the same alone or in any batch."""
    ids, lengths, starts, special = batch
    params = SampleMasking(mask_id=3, vocab_size=100, masked_lm_prob=0.3, whole_word=whole)
    records = np.arange(len(lengths)) * 7 + 11
    masked = mask_samples(ids, lengths, records, seed, 0, params, special, starts)
    selected = masked.labels != -100
    assert not (selected & special).any()
    assert (masked.labels[selected] == ids[selected]).all()
    assert (masked.input_ids[~selected] == ids[~selected]).all()
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    for sample, (start, stop) in enumerate(zip(offsets[:-1], offsets[1:])):
        chosen, maskable = selected[start:stop], ~special[start:stop]
        budget = max(1, round(0.3 * (stop - start)))
        assert chosen.sum() <= budget
        if not whole:
            assert chosen.sum() == min(budget, maskable.sum())
        else:
            # A word: a maskable start (or a maskable token after a special one or the sample's start) and the
            # maskable non-starts after it.
            word, words = -1, []
            for position in range(stop - start):
                if not maskable[position]:
                    word = -1
                    continue
                if word == -1 or starts[start + position]:
                    word = len(words)
                    words.append([])
                words[word].append(position)
            for members in words:
                assert len({bool(chosen[p]) for p in members}) == 1, "a word is masked whole or not at all"
            if words:
                assert chosen.sum() > 0 or min(map(len, words)) > budget
        alone = mask_samples(ids[start:stop], lengths[sample:sample + 1], records[sample:sample + 1], seed, 0,
                             params, special[start:stop], starts[start:stop])
        assert np.array_equal(alone.labels, masked.labels[start:stop])
        assert np.array_equal(alone.input_ids, masked.input_ids[start:stop])


def test_whole_words_follow_berts_skip_rule():
    """Words that do not fit the budget are skipped and shorter ones after them taken, exactly as
    create_pretraining_data.py's loop over shuffled words does."""
    rng = np.random.default_rng(0)
    for trial in range(200):
        lengths = rng.integers(1, 5, size=rng.integers(1, 8))
        starts = np.zeros(lengths.sum(), dtype=bool)
        starts[np.concatenate(([0], np.cumsum(lengths)[:-1]))] = True
        ids = rng.integers(5, 99, size=lengths.sum()).astype(np.int32)
        params = SampleMasking(3, 100, masked_lm_prob=0.45, whole_word=True)
        masked = mask_samples(ids, np.array([len(ids)]), np.array([trial]), 1, 0, params,
                              np.zeros(len(ids), dtype=bool), starts)
        chosen = masked.labels != -100
        budget = max(1, round(0.45 * len(ids)))
        # Whatever order was drawn, BERT's loop leaves no unchosen word that still fits.
        word_starts = np.flatnonzero(starts)
        room = budget - chosen.sum()
        for first, length in zip(word_starts, lengths):
            if not chosen[first]:
                assert length > room, (lengths, budget, chosen)


def test_layouts_carry_the_same_tokens():
    tokens = {"input_ids": np.arange(10, 16, dtype=np.int32), "labels": np.array([-100, 11, -100, -100, 14, -100])}
    lengths = np.array([3, 1, 2])
    out = flat(tokens, lengths)
    assert out["input_ids"].tolist() == [[10, 11, 12, 13, 14, 15]]
    assert out["position_ids"].tolist() == [[0, 1, 2, 0, 0, 1]]
    for side in ("q", "k"):
        assert out[f"cu_seq_lens_{side}"].tolist() == [0, 3, 4, 6] and out[f"cu_seq_lens_{side}"].dtype == np.int32
        assert int(out[f"max_length_{side}"]) == 3
    assert out["labels"].tolist() == [[-100, 11, -100, -100, 14, -100]]
    out = padded(tokens, lengths, pad_id=0)
    assert out["input_ids"].tolist() == [[10, 11, 12], [13, 0, 0], [14, 15, 0]]
    assert out["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0], [1, 1, 0]]
    assert out["labels"].tolist() == [[-100, 11, -100], [-100, -100, -100], [14, -100, -100]]


def test_tabled_draws_are_the_fixed_length_maskings_draws():
    from loader.masking import _uniform
    from loader.sample_masking import _draws

    rng = np.random.default_rng(0)
    keys, positions = rng.integers(0, 2**63, 500).astype(np.uint64), rng.integers(0, 20000, 500)
    for stream in (0, 2, 4):
        assert np.array_equal(_draws(keys, positions, stream), _uniform(keys, positions, stream))
