"""Mixtures through the real loader: several outputs (``--data A --data B``), real server processes, real
clients over loopback ZeroMQ.  Three BERT outputs of very different sizes (76, 430 and ~4,300 records of the
shared Wikipedia sample), one made with another tokenizer and one with another sequence length (refused),
token-stream outputs for --batch-tokens, and two MDS outputs read also with MosaicML's ``Stream``."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from loader.client import LoaderClient, server_status
from loader.mixture import share_tolerance
from loader.shards import open_dataset
from tests.support.factories import finished_job, wiki_prefix
from tests.support.helpers import REPO, VOCAB
from tests.support.loader_helpers import LoaderProcess, vocab_args

pytestmark = pytest.mark.e2e

BERT = ["--vocab-file", VOCAB, "--dupe-factor", "1", "--task-size", "96K", "--workers", "2"]


@pytest.fixture(scope="module")
def outputs(tmp_path_factory, loader_dataset):
    """small (76 records), mid (430), big (the session's ~4,300): the same tokenizer and length."""
    root = tmp_path_factory.mktemp("mix")
    small = finished_job(root / "small", *BERT, data=wiki_prefix(root / "in-small", 20_000))
    mid = finished_job(root / "mid", *BERT, data=wiki_prefix(root / "in-mid", 200_000))
    return [small, mid, loader_dataset]


def sizes(paths) -> list[int]:
    return [open_dataset(str(path))[1].records for path in paths]


def data_args(paths, weights=None) -> list[str]:
    """``--data A --data B ...`` (LoaderProcess gives the first), with ``=weight`` if asked."""
    named = [f"{p}={w}" if weights else str(p) for p, w in zip(paths, weights or [None] * len(paths))]
    return [named[0], *[arg for name in named[1:] for arg in ("--data", name)]]


def source_of(record_ids, paths):
    return np.searchsorted(np.cumsum([0, *sizes(paths)]), record_ids, side="right") - 1


def one_epoch(address, rank, world, **kwargs):
    with LoaderClient(address, rank=rank, world_size=world, timeout_seconds=60, **kwargs) as client:
        batches = []
        while True:
            batches.append(client.next_batch())
            if batches[-1].last_in_epoch:
                return batches


@pytest.mark.parametrize("how, expected", [
    ("weights", lambda n: np.asarray([0.2, 0.3, 0.5])),
    ("0.3", lambda n: n ** 0.3 / (n ** 0.3).sum()),
    ("0.7", lambda n: n ** 0.7 / (n ** 0.7).sum()),
], ids=["weights", "alpha-0.3", "alpha-0.7"])
def test_token_shares_in_every_run_of_steps_and_exactly_once_per_pass(outputs, how, expected):
    counts = np.asarray(sizes(outputs), dtype=float)
    weights = expected(counts * 128)  # fixed-size records: each counts its 128 token slots
    args = data_args(outputs, [0.2, 0.3, 0.5] if how == "weights" else None)
    extra = [] if how == "weights" else ["--temperature", how]
    with LoaderProcess(*args, *extra, "--batch-size", 32, "--shuffle-window", 1000) as server:
        ranks = [one_epoch(server.address, rank, 2) for rank in range(2)]
        status = server_status(server.address)
    np.testing.assert_allclose([s.target for s in status.mixture], weights, rtol=1e-9)
    # global step k: both ranks' batch k, one contiguous run of the mixed stream
    steps = [np.concatenate([ranks[r][k].record_ids for r in range(2) if k < len(ranks[r])])
             for k in range(max(map(len, ranks)))]
    sources = [source_of(ids, outputs) for ids in steps]
    for start in range(0, len(steps) - 10, 5):  # every run of 10 steps (640 records, 81,920 tokens)
        run = np.concatenate(sources[start:start + 10])
        share = np.bincount(run, minlength=3) / len(run)
        bound = share_tolerance([128] * 3, weights.tolist(), len(run) * 128)
        assert (np.abs(share - weights) <= bound).all(), (start, share, weights, bound)
    served = np.concatenate(steps)
    realized = np.bincount(source_of(served, outputs), minlength=3) / len(served)
    # the server counts what it sent: these epochs and the next one's first prefetched batches
    np.testing.assert_allclose([s.realized for s in status.mixture], realized, atol=0.01)
    np.testing.assert_allclose(realized, weights, atol=0.01)
    # the largest-weight source (big) makes one pass: each record once; the small one repeats, each pass whole
    firsts = np.cumsum([0, *counts.astype(int)])
    per_record = np.bincount(served, minlength=int(firsts[-1]))
    big = per_record[firsts[2]:]
    assert (big == 1).all()
    small = per_record[:firsts[1]]
    passes = small.min()
    assert passes >= 2 and small.max() <= passes + 1  # whole passes, then part of the next (each once)


@pytest.mark.faults
def test_kill_9_mid_mixture_resumes_every_rank_exactly(outputs):
    args = (*data_args(outputs), "--temperature", "0.3", "--batch-size", 32, "--dynamic-masking", *vocab_args())
    with LoaderProcess(*args) as server:
        reference = [[b for b in one_epoch(server.address, rank, 2)][:60] for rank in range(2)]
        clients = [LoaderClient(server.address, rank=r, world_size=2, patience_seconds=0.3, timeout_seconds=60)
                   for r in range(2)]
        got = [[client.next_batch() for _ in range(20)] for client in clients]
        server.kill()  # SIGKILL, mid-mixture
        server.start()
        for rank, client in enumerate(clients):
            got[rank] += [client.next_batch() for _ in range(40)]
            assert client.reattaches >= 1
            client.close()
    for ours, theirs in zip(reference, got):
        assert len(ours) == len(theirs) == 60
        for a, b in zip(ours, theirs):
            assert (a.epoch, a.index) == (b.epoch, b.index)
            np.testing.assert_array_equal(a.record_ids, b.record_ids)
            for key in ("input_ids", "masked_lm_positions", "labels"):
                np.testing.assert_array_equal(a.features[key], b.features[key])
    ids = np.concatenate([b.record_ids for rank in got for b in rank])
    sources = source_of(ids, outputs)
    assert set(sources.tolist()) == {0, 1, 2}
    # ranks disjoint within a source's pass: the big one (one pass an epoch) never repeats in these 60 steps,
    # the small one (76 records) repeats by whole passes
    big = ids[sources == 2]
    assert len(big) == len(set(big.tolist()))
    small = np.bincount(ids[sources == 0], minlength=76)
    assert small.min() >= 1 and small.max() <= small.min() + 1


def test_a_schedule_with_a_joining_source_resumes_across_the_phase_change(outputs, tmp_path):
    small, mid, big = map(str, outputs)
    boundary_step = 30  # global steps of 2 x 32 records x 128 tokens
    schedule = tmp_path / "phases.json"
    schedule.write_text(json.dumps({"phases": [
        {"at_tokens": 0, "weights": {mid: 0.4, big: 0.6}},
        {"at_tokens": boundary_step * 64 * 128, "temperature": 0.3},  # every source, the small one joins
    ]}))
    args = (*data_args(outputs), "--mix-schedule", schedule, "--batch-size", 32)
    with LoaderProcess(*args) as server:
        reference = [one_epoch(server.address, rank, 2)[:60] for rank in range(2)]
        states = []
        for rank in range(2):
            with LoaderClient(server.address, rank=rank, world_size=2, timeout_seconds=60) as client:
                [client.next_batch() for _ in range(25)]
                states.append(client.state())
        server.kill()
        server.start()  # a new process, resumed before the boundary, read across it
        resumed = []
        for rank in range(2):
            with LoaderClient(server.address, rank=rank, world_size=2, state=states[rank],
                              timeout_seconds=60) as client:
                resumed.append([client.next_batch() for _ in range(35)])
    for rank in range(2):
        for a, b in zip(reference[rank][25:], resumed[rank]):
            assert (a.epoch, a.index) == (b.epoch, b.index)
            np.testing.assert_array_equal(a.record_ids, b.record_ids)
            np.testing.assert_array_equal(a.features["input_ids"], b.features["input_ids"])
    sources = [np.concatenate([source_of(reference[r][k].record_ids, outputs) for r in range(2)])
               for k in range(60)]
    assert not any((s == 0).any() for s in sources[:boundary_step - 1])  # not before its phase
    assert all((s == 0).any() for s in sources[boundary_step + 1:boundary_step + 20])  # joined
    early = np.concatenate(sources[:boundary_step - 1])
    assert abs((early == 2).mean() - 0.6) < 0.02


def test_a_schedule_and_a_state_of_another_mixture_are_refused(outputs, tmp_path):
    with LoaderProcess(*data_args(outputs[:2]), "--weights", "0.5,0.5", "--batch-size", 16) as server:
        with LoaderClient(server.address, timeout_seconds=30) as client:
            client.next_batch()
            state = client.state()
    with LoaderProcess(*data_args(outputs[:2]), "--weights", "0.6,0.4", "--batch-size", 16) as other:
        with LoaderClient(other.address, state=state, timeout_seconds=30) as client:
            with pytest.raises(Exception, match="order"):
                client.next_batch()


@pytest.fixture(scope="module")
def mismatched(tmp_path_factory):
    from tests.support.tokenizer_families import tokenizer_path

    root = tmp_path_factory.mktemp("mismatch")
    text = wiki_prefix(root / "in", 20_000)
    bpe = finished_job(root / "bpe", "--tokenizer", tokenizer_path("bpe"), "--dupe-factor", "1", "--workers", "2",
                       data=text)
    short = finished_job(root / "short", "--vocab-file", VOCAB, "--dupe-factor", "1", "--max-seq-length", "64",
                         "--max-predictions-per-seq", "10", "--workers", "2", data=text)
    return bpe, short


def test_a_mixture_of_tokenizers_or_lengths_is_refused_in_one_line(outputs, mismatched):
    bpe, short = mismatched
    for other, words in ((bpe, "another tokenizer"), (short, "sequence length 64")):
        server = LoaderProcess(*data_args([outputs[1], other]))
        output = server.wait()
        assert server.process.returncode == 1, output
        line = [text for text in output.splitlines() if "Error" in text]
        assert len(line) == 1 and words in line[0] and str(other) in line[0] and str(outputs[1]) in line[0]
        assert "Traceback" not in output and "listening" not in output


def test_bad_mixture_flags_are_one_line_before_any_work(outputs, tmp_path):
    cases = [(data_args(outputs[:2]) + ["--weights", "1,2,3"], "for 2 --data"),
             ([str(outputs[0]), "--weights", "1"], "several --data"),
             (data_args(outputs[:2], [0.5, 0.5]) + ["--temperature", "0.3"], "one way"),
             ([str(outputs[0]), "--data", str(outputs[0])], "given twice")]
    for args, words in cases:
        server = LoaderProcess(*args)
        output = server.wait()
        assert server.process.returncode != 0 and words in output and "Traceback" not in output, output


# --------------------------------------------------------------------------
# Token-budget batches: a token-stream output and 128-token records, mixed by tokens
# --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def token_outputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("mix-tokens")
    long_docs = finished_job(root / "docs", "--vocab-file", VOCAB, "--objective", "tokens", "--max-seq-length",
                             "1024", "--output-format", "parquet", "--task-size", "128K", "--workers", "2",
                             data=wiki_prefix(root / "in-docs", 400_000))
    records = finished_job(root / "rows", "--vocab-file", VOCAB, "--objective", "roberta", "--masking", "none",
                           "--task-size", "96K", "--workers", "2", data=wiki_prefix(root / "in-rows", 150_000))
    return [long_docs, records]


@pytest.mark.parametrize("kind", ["flat", "padded", "whole-words"])
def test_token_budget_batches_mix_by_tokens(token_outputs, kind):
    from loader.samples import SampleCache

    lengths = []
    for path in token_outputs:
        storage, shards = open_dataset(str(path))
        lengths.append(SampleCache(storage, shards, 1 << 30).lengths())
    every = np.concatenate(lengths)
    args = [*data_args(token_outputs, [0.7, 0.3]), "--batch-tokens", 4096, "--pack-window", 64,
            "--batch-layout", "padded" if kind == "padded" else "flat", "--dynamic-masking", *vocab_args()]
    if kind == "whole-words":
        args.append("--whole-word-mask")
    with LoaderProcess(*args) as server:
        ranks = [one_epoch(server.address, rank, 2) for rank in range(2)]
        status = server_status(server.address)
    ids = np.concatenate([b.record_ids for rank in ranks for b in rank])
    source = source_of(ids, token_outputs)
    tokens = np.bincount(source, weights=every[ids], minlength=2)
    assert tokens.sum() > 100_000
    np.testing.assert_allclose(tokens / tokens.sum(), [0.7, 0.3], atol=share_tolerance(
        [1024, 128], [0.7, 0.3], int(tokens.sum()))[0])
    sent = np.asarray([s.tokens for s in status.mixture])  # the epoch and what was prefetched of the next
    assert (sent >= tokens).all() and abs(status.mixture[0].realized - 0.7) < 0.03
    # the long documents' output is the anchor: each sample once; the rows make whole passes and part of one
    first = np.bincount(ids[source == 0], minlength=len(lengths[0]))
    assert (first == 1).all()
    rows = np.bincount(ids[source == 1] - len(lengths[0]), minlength=len(lengths[1]))
    assert rows.max() <= rows.min() + 1
    for batch in (b for rank in ranks for b in rank):
        labels = batch.features["labels"]
        assert (labels != -100).any()
        if kind == "padded":
            assert labels.size <= 4096
        else:
            assert batch.features["input_ids"].shape[1] <= 4096


# --------------------------------------------------------------------------
# MosaicML streaming: our MDS outputs as Streams with proportions
# --------------------------------------------------------------------------

def epoch_lengths(address: str, epochs: int) -> list[int]:
    """Each epoch's batches (what a rank of world size 1 is told when it attaches there)."""
    counts = []
    for epoch in range(epochs):
        state = {"epoch": epoch, "batch": 0, "rank": 0, "world_size": 1}
        with LoaderClient(address, state=state, timeout_seconds=60) as client:
            counts.append(client.info.batches_per_epoch)
    return counts


def test_a_rank_with_no_batch_in_a_shorter_epoch_goes_on_to_the_next(token_outputs):
    """A mixture's epochs differ in length (the other sources' shares of a pass of the anchor).  With as many ranks
    as the longest epoch has batches, the last rank has none in a shorter epoch: it goes on to the next epoch, as
    the others do after their batch of it, resumed there too; the server, and the other ranks, go on (the server
    died of an IndexError there)."""
    args = [*data_args(token_outputs, [0.7, 0.3]), "--batch-tokens", 8192, "--pack-window", 64]
    with LoaderProcess(*args) as server:
        counts = epoch_lengths(server.address, 8)
        world = max(counts)
        assert min(counts) < world, counts  # the epochs differ (if not, this budget no longer shows it)
        full = [epoch for epoch, count in enumerate(counts) if count == world]
        with LoaderClient(server.address, rank=world - 1, world_size=world, timeout_seconds=60) as last:
            got = [last.next_batch() for _ in full]
        assert [batch.epoch for batch in got] == full and all(batch.last_in_epoch for batch in got)
        short = counts.index(min(counts))
        resumed = {"epoch": short, "batch": 0, "rank": world - 1, "world_size": world}
        with LoaderClient(server.address, rank=world - 1, world_size=world, state=resumed,
                          timeout_seconds=60) as last:
            assert last.next_batch().epoch == min(e for e in full if e > short)
        # the short epoch's batches go to the first ranks, one each
        served = [one_epoch(server.address, rank, world, state={"epoch": short, "batch": 0, "rank": rank,
                                                                 "world_size": world})
                  for rank in range(counts[short])]
        assert [[batch.epoch for batch in batches] for batches in served] == [[short]] * counts[short]
        assert server.process.poll() is None


@pytest.fixture(scope="module")
def mds_outputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("mix-mds")
    return [finished_job(root / name, *BERT, "--output-format", "mds", data=wiki_prefix(root / f"in-{name}", size))
            for name, size in (("a", 60_000), ("b", 200_000))]


def test_two_mds_outputs_mix_with_streaming_stream_as_with_the_loader(mds_outputs):
    epoch = 400
    reader = subprocess.run([sys.executable, "-m", "tests.e2e.streaming_mix_reader", str(epoch),
                             f"{mds_outputs[0]}=0.7", f"{mds_outputs[1]}=0.3"], cwd=REPO, capture_output=True,
                            text=True, timeout=300)
    assert reader.returncode == 0, reader.stderr[-2000:]
    theirs = [tuple(row) for row in json.loads(reader.stdout)]
    assert len(theirs) == epoch
    rows = []
    for path in mds_outputs:
        from loader.shards import ShardCache

        storage, shards = open_dataset(str(path))
        cache = ShardCache(storage, shards, 1 << 30)
        rows.append({tuple(cache.columns(i)["input_ids"][j].tolist())
                     for i in range(len(shards.names)) for j in range(int(shards.counts[i]))})
    stream_of = [0 if row in rows[0] else 1 if row in rows[1] else -1 for row in theirs]
    assert -1 not in stream_of
    assert stream_of.count(0) == round(0.7 * epoch)  # Stream's proportion: samples of the epoch
    with LoaderProcess(*data_args(mds_outputs, [0.7, 0.3]), "--batch-size", 40) as server:
        with LoaderClient(server.address, timeout_seconds=60) as client:
            ours = np.concatenate([client.next_batch().record_ids for _ in range(epoch // 40)])
    share = (source_of(ours, mds_outputs) == 0).mean()
    assert abs(share - 0.7) <= share_tolerance([128, 128], [0.7, 0.3], epoch * 128)[0]


# --------------------------------------------------------------------------
# Held-out sides mix by the same rule
# --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def holdout_outputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("mix-holdout")
    return [finished_job(root / name, *BERT, "--holdout-fraction", "0.3", data=wiki_prefix(root / f"in-{name}", size))
            for name, size in (("a", 60_000), ("b", 300_000))]


def test_held_out_sides_mix_by_the_same_rule(holdout_outputs, outputs):
    held = [open_dataset(str(path), split="holdout")[1].records for path in holdout_outputs]
    with LoaderProcess(*data_args(holdout_outputs), "--split", "holdout", "--weights", "0.5,0.5",
                       "--batch-size", 8) as server:
        batches = one_epoch(server.address, 0, 1)
        client_info = LoaderClient(server.address, timeout_seconds=30)
        try:
            assert client_info.info.records == sum(held)  # the held-out sides only
        finally:
            client_info.close()
    ids = np.concatenate([b.record_ids for b in batches])
    firsts = np.cumsum([0, *held])
    source = np.searchsorted(firsts, ids, side="right") - 1
    assert (ids < firsts[-1]).all()
    share = (source == 0).mean()
    assert abs(share - 0.5) <= share_tolerance([128, 128], [0.5, 0.5], len(ids) * 128)[0]
    server = LoaderProcess(*data_args([holdout_outputs[0], outputs[0]]), "--split", "holdout")
    output = server.wait()
    assert server.process.returncode == 1 and str(outputs[0]) in output and "held-out" in output
    assert "Traceback" not in output


def test_a_temperature_of_nan_is_refused_by_its_flag(outputs):
    """--temperature nan passed the range (NaN compares false) and failed later as "the phase at 0 tokens
    weighs no source", which names neither the flag nor the value."""
    result = subprocess.run([sys.executable, "-m", "loader", "--data", str(outputs[0]), "--data", str(outputs[1]),
                             "--temperature", "nan", "--port", "1", "--bind-host", "127.0.0.1"],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "Invalid value for '--temperature'" in result.stderr, result.stderr


def test_one_output_given_twice_under_two_spellings_is_refused(outputs, tmp_path):
    """``--data OUT --data OUT/`` (or a copy of OUT) passed the check for a source given twice, which compared
    the strings, and served every record as two sources' (each 'exactly once')."""
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(outputs[0], copy)
    for second in (f"{outputs[0]}/", str(copy)):
        result = subprocess.run([sys.executable, "-m", "loader", "--data", str(outputs[0]), "--data", second,
                                 "--port", "1", "--bind-host", "127.0.0.1"],
                                cwd=REPO, capture_output=True, text=True, timeout=120)
        assert result.returncode != 0 and "is the same output as --data" in result.stderr, result.stderr[-2000:]
        assert "Traceback" not in result.stderr
