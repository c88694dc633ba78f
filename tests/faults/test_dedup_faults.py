"""A dedup job under kill -9: a worker killed during the signature stage, the
ventilator killed once that stage is done and restarted; the output must be
the clean run's (same manifest tasks, shards and clusters), nothing redone
twice into the manifest."""

from __future__ import annotations

import re
import shutil
import time

import pytest

from common.steps.dedup import stages
from tests.support.cluster import Cluster
from tests.support.dedup_corpus import planted_corpus, write_wikiextractor
from tests.support.helpers import VOCAB, WIKI, manifest, need_shared, run_ventilator, shard_digests

pytestmark = [pytest.mark.e2e, pytest.mark.faults]

JOB = ["--vocab-file", VOCAB, "--dupe-factor", "1", "--task-size", "64K", "--dedup", "minhash",
       "--dedup-partitions", "4"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    need_shared()
    directory = tmp_path_factory.mktemp("planted") / "data"
    write_wikiextractor(planted_corpus(WIKI, limit=8), directory)
    return directory


def test_kill_9_workers_and_ventilator_during_the_dedup_stages(data, tmp_path):
    clean = tmp_path / "clean"
    result = run_ventilator(data, clean, *JOB, "--workers", "2")
    assert result.returncode == 0, result.stderr[-3000:]
    signature_tasks = sum(1 for e in manifest(clean).values() if e.get("stage") == "signature")
    assert signature_tasks >= 10

    c = Cluster(data, tmp_path / "out", JOB, tmp_path).start(2)
    try:
        c.wait_for_progress(signature_tasks // 3)  # in the signature stage
        c.kill(c.live_workers()[0])
        c.start_worker()
        c.wait_for_progress(signature_tasks + 1)  # past the signature stage (bucket tasks are quick)
        c.kill(c.ventilator)
        time.sleep(1)
        c.start_ventilator()  # the same command
        assert c.wait() == 0, c.tail()
        # The restarted ventilator found the job part done: the signature stage at least, not the normal pass.
        ready = [line for line in c.log_text().splitlines() if "tasks already done" in line]
        done, total = map(int, re.search(r"ready: (\d+) of (\d+) tasks", ready[-1]).groups())
        assert signature_tasks <= done < total, ready[-1]
    finally:
        c.close()
    ours, reference = manifest(c.output), manifest(clean)  # manifest() fails on a task listed twice
    assert set(ours) == set(reference)
    assert shard_digests(c.output) == shard_digests(clean)
    assert (c.output / stages.CLUSTERS_NAME).read_bytes() == (clean / stages.CLUSTERS_NAME).read_bytes()


def test_a_dedup_job_resumed_after_a_quarantine_deduplicates_the_whole_corpus(data, tmp_path):
    """An input file unreadable during the signature stage: the first run ends rc 3; with the file back, the
    same command ends rc 0 with the clean run's output (not the duplicates the stale stages let through)."""
    job = ["--vocab-file", VOCAB, "--dupe-factor", "1", "--task-size", "64K", "--dedup", "exact",
           "--dedup-partitions", "4", "--max-attempts", "2"]
    clean = tmp_path / "clean"
    result = run_ventilator(data, clean, *job, "--workers", "2")
    assert result.returncode == 0, result.stderr[-3000:]

    inputs = tmp_path / "inputs"
    shutil.copytree(data, inputs)
    victim = sorted(p for p in inputs.rglob("*") if p.is_file())[-1]  # its tasks come last
    away = tmp_path / "away"
    c = Cluster(inputs, tmp_path / "out", job, tmp_path).start(1)
    try:
        c.wait_for_progress(1)  # planned, and in the signature stage
        victim.rename(away)
        assert c.wait() == 3, c.tail()
    finally:
        c.close()
    away.rename(victim)
    first = manifest(tmp_path / "out")
    assert any((e.get("dedup") or {}).get("signature_tasks_skipped") for e in first.values()), "no stale stage"

    result = run_ventilator(inputs, tmp_path / "out", *job, "--workers", "2")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "done again, so the whole corpus is covered" in result.stderr
    ours, reference = manifest(tmp_path / "out"), manifest(clean)
    assert set(ours) == set(reference)
    assert sum(e["documents"] for e in ours.values()) == sum(e["documents"] for e in reference.values())
    assert shard_digests(tmp_path / "out") == shard_digests(clean)
    assert ((tmp_path / "out" / stages.CLUSTERS_NAME).read_bytes()
            == (clean / stages.CLUSTERS_NAME).read_bytes())
