"""The mixing plan (loader/mixture.py), pure: token shares, passes, epochs, phases, and its inputs."""

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loader.mixture import (
    MixError,
    MixPlan,
    PhaseSpec,
    SourceTokens,
    parse_schedule,
    parse_weights,
    served_tokens,
    share_tolerance,
    split_data_weight,
    temperature_weights,
)


def make_sources(sizes, seed=0, longest=300, fixed=None):
    """Sources of ``sizes`` records in a few shards each, of random lengths 1..longest (or all ``fixed``)."""
    rng = np.random.default_rng(seed)
    out, first = [], 0
    for n in sizes:
        cuts = np.sort(rng.choice(np.arange(1, n), size=min(2, n - 1), replace=False)) if n > 2 else np.array([], int)
        counts = np.diff(np.concatenate(([0], cuts, [n]))).astype(np.int64)
        lengths = None if fixed else rng.integers(1, longest + 1, n).astype(np.int32)
        out.append(SourceTokens(counts, first, lengths, fixed or 1))
        first += len(counts)
    return out


def served(plan: MixPlan, epoch: int):
    """(source, global record id, tokens) of each position of the epoch, in order."""
    order = plan.epoch(epoch)
    shard, index = order.locate(np.arange(order.records))
    counts = np.concatenate([s.counts for s in plan.sources])
    offsets = np.concatenate(([0], np.cumsum(counts)))
    firsts = np.concatenate(([0], np.cumsum([s.records for s in plan.sources])))
    ids = offsets[shard] + index
    lengths = np.concatenate([s.lengths if s.lengths is not None else np.full(s.records, s.width)
                              for s in plan.sources])
    return order.source.astype(np.int64), ids, lengths[ids].astype(np.int64), firsts


def worst_window_error(source, tokens, weights, window_tokens):
    """The largest |share - weight| over windows of consecutive records holding about ``window_tokens``."""
    cum = np.concatenate(([0], np.cumsum(tokens)))
    per = np.stack([np.concatenate(([0], np.cumsum(np.where(source == i, tokens, 0))))
                    for i in range(len(weights))])
    starts = np.arange(0, len(tokens), max(1, len(tokens) // 200))
    ends = np.searchsorted(cum, cum[starts] + window_tokens)
    keep = ends < len(cum)
    starts, ends = starts[keep], ends[keep]
    total = cum[ends] - cum[starts]
    shares = (per[:, ends] - per[:, starts]) / total
    return np.abs(shares - np.asarray(weights)[:, None]).max(axis=1), int(total.min())


@pytest.mark.parametrize("phase", [PhaseSpec(weights=(0.15, 0.25, 0.6)), PhaseSpec(temperature=0.3),
                                   PhaseSpec(temperature=0.7)], ids=["weights", "alpha-0.3", "alpha-0.7"])
def test_token_shares_track_the_targets_in_every_window(phase):
    sources = make_sources((60, 2500, 40000), seed=1)  # very different sizes, lengths 1..300
    plan = MixPlan(sources, [phase], seed=3, window=1000)
    weights = plan.weights[0]
    if phase.temperature is not None:
        sizes = np.asarray([s.tokens for s in sources], dtype=float)
        np.testing.assert_allclose(weights, sizes ** phase.temperature / (sizes ** phase.temperature).sum())
    source, _, tokens, _ = served(plan, 0)
    for window in (50_000, 500_000):  # ~6 and ~60 batches of 8,192 tokens
        errors, least = worst_window_error(source, tokens, weights, window)
        bound = share_tolerance([300] * 3, weights.tolist(), least)
        assert (errors <= bound).all(), (window, errors, bound)
    # over the whole epoch, within a record's tokens of exact
    whole = np.bincount(source, weights=tokens) / tokens.sum()
    np.testing.assert_allclose(whole, weights, atol=2 * 300 / tokens.sum() * 3)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sizes=st.lists(st.integers(1, 400), min_size=1, max_size=4), seed=st.integers(0, 2**32),
       raw=st.lists(st.floats(0.01, 1.0), min_size=4, max_size=4), longest=st.integers(1, 50),
       fixed=st.booleans())
def test_every_pass_of_every_source_is_each_record_exactly_once(sizes, seed, raw, longest, fixed):
    sources = make_sources(sizes, seed, longest, fixed=7 if fixed else None)
    plan = MixPlan(sources, [PhaseSpec(weights=tuple(raw[:len(sizes)]))], seed=seed, window=37)
    streams = [[] for _ in sizes]
    for epoch in range(3):
        source, ids, tokens, firsts = served(plan, epoch)
        order = plan.epoch(epoch)
        for i in range(len(sizes)):
            streams[i].append(order.position[order.source == i])
            mine = ids[source == i]
            assert ((mine >= firsts[i]) & (mine < firsts[i + 1])).all()
    anchor = int(np.argmax(plan.weights[0]))
    for i, size in enumerate(sizes):
        positions = np.concatenate(streams[i])
        np.testing.assert_array_equal(positions, np.arange(len(positions)))  # no place skipped or served twice
        if i == anchor:  # the largest-weight source makes exactly one pass per epoch
            assert len(positions) == 3 * size
        for p in range(len(positions) // size):  # each whole pass: every record once
            shard, index = plan.pass_order(i, p).locate(np.arange(size))
            offsets = np.concatenate(([0], np.cumsum(sources[i].counts)))
            assert sorted((offsets[shard] + index).tolist()) == list(range(size))


def test_repeats_and_subsampling_are_counted_by_pass():
    sources = make_sources((50, 5000), seed=2)
    plan = MixPlan(sources, [PhaseSpec(weights=(0.4, 0.6))], seed=0, window=100)
    order = plan.epoch(0)
    small = order.source == 0
    passes = order.passes(np.arange(order.records))
    ratio = sources[1].tokens / sources[0].tokens * 0.4 / 0.6  # the small source's passes in one of the large one's
    assert int(passes[small].max()) + 1 in (int(ratio), int(ratio) + 1)
    _, ids, _, _ = served(plan, 0)
    counts = np.bincount(ids[small], minlength=50)
    whole = int(passes[small].max())  # complete passes before the last, partial one
    assert counts.min() >= whole and counts.max() <= whole + 1
    assert (order.source == 1).sum() == 5000 and passes[~small].max() == 0  # the large one: one pass, once each


def test_an_epoch_is_the_same_whatever_was_computed_before():
    sources = make_sources((30, 700, 9000), seed=4)
    specs = [PhaseSpec(weights=(0.2, 0.3, 0.5)), PhaseSpec(at_tokens=1_500_000, temperature=0.3)]
    walked = MixPlan(sources, specs, seed=9, window=64)
    for epoch in range(4):
        walked.epoch(epoch)
    fresh = MixPlan(sources, specs, seed=9, window=64)
    a, b = walked.epoch(3), fresh.epoch(3)
    np.testing.assert_array_equal(a.source, b.source)
    np.testing.assert_array_equal(a.position, b.position)
    np.testing.assert_array_equal(a.locate(np.arange(a.records))[1], b.locate(np.arange(b.records))[1])
    other = MixPlan(sources, specs, seed=10, window=64).epoch(3)
    assert not np.array_equal(other.locate(np.arange(other.records))[1][:200], a.locate(np.arange(200))[1])


def test_a_phase_changes_the_shares_and_a_source_joins_there():
    sources = make_sources((400, 3000, 9000), seed=5, longest=100)
    boundary = 400_000
    specs = [PhaseSpec(weights=(0.0, 0.3, 0.7)), PhaseSpec(at_tokens=boundary, weights=(0.2, 0.4, 0.4))]
    plan = MixPlan(sources, specs, seed=1, window=500)
    source, _, tokens, _ = np.concatenate([served(plan, e)[0] for e in range(2)]), None, \
        np.concatenate([served(plan, e)[2] for e in range(2)]), None
    cum = np.cumsum(tokens)
    cut = int(np.searchsorted(cum, boundary))
    assert not (source[:cut - 3] == 0).any()  # not before its phase
    assert (source[cut + 3:cut + 50] == 0).any()  # and from it on
    for part, weights in ((slice(0, cut), (0.0, 0.3, 0.7)), (slice(cut, None), (0.2, 0.4, 0.4))):
        share = np.bincount(source[part], weights=tokens[part], minlength=3) / tokens[part].sum()
        np.testing.assert_allclose(share, weights, atol=0.002)


@pytest.mark.parametrize("weights, longest", [((0.99, 0.01), 100), ((0.7, 0.3), 300)], ids=["small-share", "long-records"])
def test_many_short_phases_serve_each_source_its_share(weights, longest):
    """An annealing schedule of 1,000 phases shorter than a record of a source's share (each phase's quota of the
    small source is a tenth of a record): the part of a record a phase does not complete is carried into the
    next, so the source is served its share over the phases (it got none when each phase dropped it), and every
    token the clock passes is served."""
    sources = make_sources((2000, 2000), seed=3, longest=longest)
    step = 1000
    specs = [PhaseSpec(at_tokens=k * step, weights=weights) for k in range(1000)]
    plan = MixPlan(sources, specs, seed=1, window=500)
    one = MixPlan(sources, [PhaseSpec(weights=weights)], seed=1, window=500)
    clock = 1000 * step
    got, alone = served_tokens(plan, clock), served_tokens(one, clock)
    # the same records due as with one phase of the same weights, to within a record of each source
    assert (np.abs(got - alone) <= longest).all(), (got, alone)
    assert abs(got.sum() - clock) <= 2 * longest
    np.testing.assert_allclose(got / got.sum(), weights, atol=2 * longest / clock + 1e-9)
    source = np.concatenate([served(plan, e)[0] for e in range(2)])
    assert (source == 1).sum() > 0


def test_temperature_weights():
    assert temperature_weights([100, 100], 0.3) == (0.5, 0.5)
    w = temperature_weights([1000, 10], 0.3)
    assert w[0] / w[1] == pytest.approx(100 ** 0.3)
    assert temperature_weights([1000, 10], 1.0) == pytest.approx((1000 / 1010, 10 / 1010))
    assert temperature_weights([1000, 10], 0.0) == (0.5, 0.5)


def test_weights_and_data_weights_parse_or_are_one_line_errors():
    assert parse_weights("0.7,0.3", 2) == (0.7, 0.3)
    assert split_data_weight("s3://b/web=0.7") == ("s3://b/web", 0.7)
    assert split_data_weight("/out/a=b") == ("/out/a=b", None)
    assert split_data_weight("/out/web") == ("/out/web", None)
    for text, count in (("0.7", 2), ("a,b", 2), ("-1,2", 2), ("nan,1", 2), ("inf,1", 2), ("0,0", 2)):
        with pytest.raises(MixError, match="--weights"):
            parse_weights(text, count)
    with pytest.raises(MixError):
        split_data_weight("/out=-3")


def test_a_schedule_parses_by_source_names():
    names = ["/data/web", "s3://b/code", "/data/wiki/"]
    text = json.dumps({"phases": [{"at_tokens": 0, "weights": {"web": 0.7, "code": 0.3}},
                                  {"at_tokens": 1e6, "temperature": 0.3, "sources": ["web", "code", "wiki"]}]})
    first, second = parse_schedule(text, names)
    assert first.weights == (0.7, 0.3, 0.0) and second.at_tokens == 1_000_000
    assert second.temperature == 0.3 and second.members == (0, 1, 2)


def test_a_schedule_may_start_phases_at_steps_of_a_stated_size():
    text = json.dumps({"step_tokens": 32768, "phases": [{"at_step": 0, "weights": {"a": 1}},
                                                        {"at_step": 1000, "temperature": 0.3}]})
    first, second = parse_schedule(text, ["/x/a", "/x/b"])
    assert (first.at_tokens, second.at_tokens) == (0, 32_768_000)
    for document, match in (({"phases": [{"at_step": 0, "weights": {"a": 1}}]}, "step_tokens"),
                            ({"step_tokens": 0, "phases": [{"weights": {"a": 1}}]}, "step_tokens"),
                            ({"step_tokens": 8, "phases": [{"at_step": -1, "weights": {"a": 1}}]}, "at_step"),
                            ({"step_tokens": 8, "phases": [{"at_step": 0, "at_tokens": 0, "weights": {"a": 1}}]},
                             "no at_tokens"),
                            ({"steps": 8, "phases": [{"weights": {"a": 1}}]}, "unknown")):
        with pytest.raises(MixError, match=match):
            parse_schedule(json.dumps(document), ["/x/a", "/x/b"])


@pytest.mark.parametrize("phases, match", [
    ([], "phases"), ([{"at_tokens": 5, "weights": {"a": 1}}], "starts at 0"),
    ([{"weights": {"a": 1}}, {"at_tokens": 0, "weights": {"a": 1}}], "not after"),
    ([{"weights": {"nope": 1}}], "none of the --data"), ([{"weights": {"a": float("nan")}}], "weight"),
    ([{"temperature": 1e300}], "temperature"), ([{"weights": {"a": 1}, "temperature": 1}], "either"),
    ([{"at_tokens": -1, "weights": {"a": 1}}], "at_tokens"), ([{"weights": {"a": 0}}], None),
    ([{"at_tokens": True, "weights": {"a": 1}}], "at_tokens"), ([{"typo": 1, "weights": {"a": 1}}], "unknown"),
])
def test_a_bad_schedule_is_one_line(phases, match):
    names = ["/x/a", "/x/b"]
    text = json.dumps({"phases": phases})
    if match is None:  # parses, but weighs nothing: refused when resolved
        (spec,) = parse_schedule(text, names)
        with pytest.raises(MixError, match="weighs no source"):
            spec.resolve([10, 10])
        return
    with pytest.raises(MixError, match=match) as error:
        parse_schedule(text, names)
    assert "\n" not in str(error.value)


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner,
                                                                                max_size=4), max_leaves=20))
def test_any_json_schedule_parses_or_is_a_mix_error(document):
    text = json.dumps(document if not isinstance(document, dict) else {"phases": [document]})
    try:
        phases = parse_schedule(text, ["a", "b"])
    except MixError:
        return
    for phase in phases:
        try:
            weights = phase.resolve([100, 1000])
        except MixError:
            continue
        assert all(np.isfinite(weights)) and abs(sum(weights) - 1) < 1e-9


def test_phase_tokens_are_the_tokens_the_epochs_serve_in_each_phase():
    """The status's and the report's per-phase figures (phase_tokens, share_curve) equal counting the records
    the planned epochs hold, cut where their due time crosses each phase's start."""
    from loader.mixture import phase_tokens, share_curve

    sources = make_sources((400, 3000, 9000), seed=5, longest=100)
    boundary = 400_000
    specs = [PhaseSpec(weights=(0.0, 0.3, 0.7)), PhaseSpec(at_tokens=boundary, temperature=0.3)]
    plan = MixPlan(sources, specs, seed=1, window=500)
    source = np.concatenate([served(plan, e)[0] for e in range(2)])
    tokens = np.concatenate([served(plan, e)[2] for e in range(2)])
    clock = 2 * plan.epoch_tokens - 1000
    phases = phase_tokens(plan, clock)
    assert [(p.phase, p.start, p.end) for p in phases] == [(0, 0, boundary), (1, boundary, clock)]
    np.testing.assert_allclose(phases[1].target, temperature_weights([s.tokens for s in sources], 0.3))
    # due order is served order: the records of [start, end) are the ones whose source has reached no further
    per_source = np.stack([np.cumsum(np.where(source == i, tokens, 0)) for i in range(3)])
    for p in phases:
        got = np.asarray(p.tokens)
        # the stream's prefix holding exactly the phase's records: find k with per-source sums == expected
        before = np.asarray(phases[0].tokens) if p.phase else np.zeros(3, dtype=np.int64)
        after = before + got
        k_after = [int(np.searchsorted(per_source[i], after[i], side="right")) for i in range(3)]
        reached = np.asarray([per_source[i][k - 1] if k else 0 for i, k in enumerate(k_after)])
        np.testing.assert_array_equal(reached, after)  # each source's served total lands on a record's end
        realized = np.asarray(p.realized)
        bound = share_tolerance([100] * 3, p.target, int(got.sum()))
        assert (np.abs(realized - np.asarray(p.target)) <= bound).all(), (realized, p.target)
    # the whole stream's per-source tokens up to the clock: the sum of the phases'
    total = np.asarray(phases[0].tokens) + np.asarray(phases[1].tokens)
    due_prefix = int(np.searchsorted(np.cumsum(tokens), clock + 300))
    assert (total <= per_source[:, due_prefix]).all()
    curve = share_curve(plan, [0, boundary // 2, boundary, clock])
    np.testing.assert_allclose(curve.sum(axis=1), 1.0)
    assert curve[0, 0] == 0 and curve[2, 0] > 0  # the small source joins at the boundary


COUNTS = ("phase", "start", "tokens")
HOSTILE = st.one_of(st.sampled_from([float("inf"), float("-inf"), float("nan")]), st.text(max_size=8), st.none(),
                    st.lists(st.integers(0, 3), max_size=2), st.binary(max_size=4),
                    st.dictionaries(st.text(max_size=3), st.integers(-9, 9), max_size=2))


@settings(max_examples=300, deadline=None)
@given(data=st.data(), field=st.sampled_from(["phase", "start", "target", "realized", "tokens"]))
def test_a_hostile_phase_share_in_a_status_is_a_message_error(data, field):
    """Every number of a status's per-phase shares is checked: a value out of its range (a share outside 0..1,
    a negative or huge count, inf, NaN, a string, bad JSON inside a string) is a MessageError, never a Status
    a client believes; a value in range decodes as sent."""
    import msgpack

    from loader import messages

    if field in COUNTS:
        out_of_range = st.one_of(st.integers(-2**63, -1), st.integers(2**53 + 1, 2**64 - 1))
        in_range = st.integers(0, 2**53)
    else:
        out_of_range = st.one_of(st.floats(max_value=-1e-9), st.floats(min_value=1 + 1e-9, allow_infinity=False))
        in_range = st.floats(0.0, 1.0)
    bad = data.draw(st.booleans())
    value = data.draw(st.one_of(HOSTILE, out_of_range, st.just('{"phases": [')) if bad else in_range)
    good = messages.Status("s", mixture=[messages.SourceShare(
        "a", 0.5, 0.4, 10, [messages.PhaseShare(0, 0, 0.5, 0.4, 10)])])
    assert messages.decode(messages.encode(good)) == good
    frame = msgpack.unpackb(messages.encode(good))
    frame["mixture"][0]["phases"][0][field] = value
    if bad:
        with pytest.raises(messages.MessageError):
            messages.decode(msgpack.packb(frame))
    else:
        assert getattr(messages.decode(msgpack.packb(frame)).mixture[0].phases[0], field) == value
