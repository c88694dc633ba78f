"""``mlm-report OUT_A OUT_B OUT_C --mix-schedule FILE``: the Mixture section of three real outputs of very
different sizes (76, 430 and ~4,300 BERT records of the shared Wikipedia sample), checked against the plan's
own targets, the stated tolerance, a real loader's status, and the stream a real client reads; and the
one-line refusals of bad mixture flags."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from loader.client import LoaderClient, server_status
from tests.e2e.test_loader_mixture import (  # noqa: F401  (outputs, token_outputs: the fixtures)
    data_args,
    outputs,
    sizes,
    source_of,
    token_outputs,
)
from tests.support.helpers import REPO
from tests.support.loader_helpers import LoaderProcess

pytestmark = pytest.mark.e2e
pytest.importorskip("matplotlib")

STEP_TOKENS = 2 * 32 * 128  # a global step: 2 ranks x 32 records x 128 tokens
BOUNDARY_STEP = 30


def report(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "report", *map(str, args), "--input-sample", "0"], cwd=REPO,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def schedule(outputs, tmp_path_factory):
    small, mid, big = map(str, outputs)
    path = tmp_path_factory.mktemp("schedule") / "phases.json"
    path.write_text(json.dumps({"step_tokens": STEP_TOKENS, "phases": [
        {"at_step": 0, "weights": {mid: 0.4, big: 0.6}},
        {"at_step": BOUNDARY_STEP, "temperature": 0.3},  # every source: the small one joins
    ]}))
    return path


def test_the_mixture_section_holds_the_plans_shares_per_phase_within_tolerance(outputs, schedule):
    done = report(*outputs, "--mix-schedule", schedule, "--mix-tokens", 60 * STEP_TOKENS)
    assert done.returncode == 0, done.stderr
    written = json.loads((outputs[0] / "report" / "report.json").read_text())
    mixture = written["mixture"]
    names = [str(p) for p in outputs]
    assert mixture["sources"] == names and mixture["horizon_tokens"] == 60 * STEP_TOKENS
    tokens = np.asarray(sizes(outputs), dtype=float) * 128
    targets = [np.asarray([0.0, 0.4, 0.6]), tokens ** 0.3 / (tokens ** 0.3).sum()]
    assert [p["from_tokens"] for p in mixture["phases"]] == [0, BOUNDARY_STEP * STEP_TOKENS]
    for phase, target in zip(mixture["phases"], targets):
        shares = [phase["sources"][name] for name in names]
        np.testing.assert_allclose([s["target"] for s in shares], target, rtol=1e-9)
        realized = np.asarray([s["realized"] for s in shares])
        assert (np.abs(realized - target) <= [s["tolerance"] for s in shares]).all(), (realized, target)
        assert sum(s["tokens"] for s in shares) == phase["tokens"]
        assert phase["tokens"] % 128 == 0 and abs(phase["tokens"] - 30 * STEP_TOKENS) <= 3 * 128
    assert mixture["phases"][0]["sources"][names[0]]["tokens"] == 0  # the small one joins at the boundary
    curve = mixture["curve"]
    assert curve["phase_starts"] == [BOUNDARY_STEP * STEP_TOKENS]
    assert np.allclose(np.sum([curve["shares"][n] for n in names], axis=0), 1.0)
    page = (outputs[0] / "report" / "index.html").read_text()
    section = page[page.index("<h2 id=mixture>Mixture</h2>"):]
    assert section.count("<svg") >= 1 and 'id="phase-start' in section
    # the table's cells are the JSON's, as percentages
    for name in names:
        assert f"{mixture['phases'][1]['sources'][name]['target'] * 100:.2f}%" in section


def test_the_report_equals_the_loaders_status_and_the_stream_it_serves(outputs, schedule):
    with LoaderProcess(*data_args(outputs), "--mix-schedule", schedule, "--batch-size", 32) as server:
        ranks = []
        for rank in range(2):
            with LoaderClient(server.address, rank=rank, world_size=2, timeout_seconds=60) as client:
                ranks.append([client.next_batch() for _ in range(50)])
        status = server_status(server.address)
    sent = sum(s.tokens for s in status.mixture)
    assert sent >= 100 * 32 * 128
    done = report(*outputs, "--mix-schedule", schedule, "--mix-tokens", sent)
    assert done.returncode == 0, done.stderr
    phases = json.loads((outputs[0] / "report" / "report.json").read_text())["mixture"]["phases"]
    names = [str(p) for p in outputs]
    # the running server's per-phase figures (status) are the report's, computed without it
    for i, source in enumerate(status.mixture):
        assert source.source == names[i] and len(source.phases) == len(phases) == 2
        for got, want in zip(source.phases, phases):
            assert (got.phase, got.start, got.tokens) == (want["phase"], want["from_tokens"],
                                                          want["sources"][names[i]]["tokens"])
            assert got.target == pytest.approx(want["sources"][names[i]]["target"], rel=1e-12)
            assert got.realized == pytest.approx(want["sources"][names[i]]["realized"], rel=1e-12)
    # and the stream a client read has the report's shares in each phase, to within the stated tolerance
    steps = [np.concatenate([source_of(ranks[r][k].record_ids, outputs) for r in range(2)]) for k in range(50)]
    for phase, part in zip(phases, (steps[:BOUNDARY_STEP], steps[BOUNDARY_STEP:])):
        run = np.concatenate(part)
        read = np.bincount(run, minlength=3) / len(run)
        for i, name in enumerate(names):
            share = phase["sources"][name]
            assert abs(read[i] - share["target"]) <= share["tolerance"] + 128 / (len(run) * 128) * 2, (phase, read)


def test_a_token_stream_output_is_planned_by_each_records_tokens(token_outputs):
    """Long documents (a token-stream output, records of varying length) and 128-token rows: the report plans
    by each record's own tokens, as the loader's --batch-tokens does; over one mixture epoch the anchor (the
    documents, weight 0.7) makes exactly one pass, so its tokens are all its records' lengths."""
    from loader.samples import SampleCache
    from loader.shards import open_dataset

    storage, shards = open_dataset(str(token_outputs[0]))
    documents = int(SampleCache(storage, shards, 1 << 30).lengths().sum())
    done = report(*token_outputs, "--weights", "0.7,0.3", "--mix-tokens", math.ceil(documents / 0.7))
    assert done.returncode == 0, done.stderr
    mixture = json.loads((token_outputs[0] / "report" / "report.json").read_text())["mixture"]
    assert mixture["epoch_tokens"] == math.ceil(documents / 0.7) and mixture["anchor"] == str(token_outputs[0])
    (phase,) = mixture["phases"]
    docs, rows = (phase["sources"][str(p)] for p in token_outputs)
    assert docs["tokens"] == documents
    for share, target in ((docs, 0.7), (rows, 0.3)):
        assert share["target"] == pytest.approx(target) and abs(share["realized"] - target) <= share["tolerance"]


@pytest.mark.parametrize("flags, message", [
    (["--weights", "0.5,x,1"], "'x' is not a number"),
    (["--weights", "0.5,0.5"], "2 weight(s) for 3"),
    (["--weights", "1,1,1", "--temperature", "0.3"], "give a mixture's weights one way"),
    (["--temperature", "0.3"], "is for several"),  # one output
], ids=["not-a-number", "too-few", "twice", "one-output"])
def test_bad_mixture_flags_are_one_line(outputs, flags, message):
    given = outputs[:1] if message == "is for several" else outputs
    done = report(*given, *flags)
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1 and message in lines[0], done.stderr


def test_a_bad_schedule_is_one_line(outputs, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"phases": [{"at_tokens": 0, "weights": {"nowhere": 1}}]}))
    done = report(*outputs, "--mix-schedule", bad)
    assert done.returncode == 2 and "'nowhere' is none of the" in done.stderr, done.stderr
