"""``--dedup`` end to end: the real ventilator, sink and workers over
loopback, on a corpus with planted duplicates (tests/support/dedup_corpus.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from common.steps.dedup import stages
from common.steps.dedup.in_memory import deduplicate
from common.steps.dedup.settings import DedupSettings
from tests.support.dedup_corpus import planted_corpus, write_wikiextractor
from tests.support.helpers import REPO, VOCAB, WIKI, check_shards, manifest, need_shared, run_ventilator, shard_digests

pytestmark = pytest.mark.e2e

JOB = ["--vocab-file", VOCAB, "--dupe-factor", "1", "--report-seconds", "2"]
SHORT = ["tiny note", "tiny   note", "another short one"]  # too short to shingle; the first two exact copies


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    need_shared()
    corpus = planted_corpus(WIKI, limit=12)
    for text in SHORT:
        corpus.add(text, len(corpus.texts), "short", 0.0)
    data = tmp_path_factory.mktemp("planted") / "data"
    order = write_wikiextractor(corpus, data)
    texts_in_order = [corpus.texts[int(i)] for i in order]
    return data, order, texts_in_order


def _run(data, output, *args):
    result = run_ventilator(data, output, *JOB, *args)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads((output / "summary.json").read_text())


def _removed_ids(output) -> set[str]:
    removed = set()
    for line in (output / stages.CLUSTERS_NAME).read_text().splitlines():
        cluster = json.loads(line)
        kept = [m for m in cluster["members"] if m.get("kept")]
        assert len(kept) == 1 and kept[0]["id"] == cluster["kept"]
        removed |= {m["id"] for m in cluster["members"] if not m.get("kept")}
    return removed


def _expected_removed(order, texts, mode) -> set[str]:
    settings = DedupSettings(mode=mode).resolved(0)
    outcome = deduplicate(texts, settings)
    return {order[i] for i in np.flatnonzero(~outcome.kept)}


@pytest.fixture(scope="module")
def minhash_run(planted, tmp_path_factory):
    data, _order, _texts = planted
    output = tmp_path_factory.mktemp("minhash") / "out"
    summary = _run(data, output, "--dedup", "minhash", "--task-size", "96K", "--workers", "2",
                   "--dedup-partitions", "3")
    return output, summary


def test_minhash_job_removes_what_the_method_removes(planted, minhash_run):
    data, order, texts = planted
    output, summary = minhash_run
    expected = _expected_removed(order, texts, "minhash")
    assert len(expected) > 40
    assert _removed_ids(output) == expected
    dedup = summary["dedup"]
    assert dedup["removed_exact"] + dedup["removed_minhash"] == len(expected)
    assert dedup["removed_exact"] >= 1 and dedup["removed_minhash"] >= 1  # "tiny note" x2, and near copies
    assert dedup["removed_exact_bytes"] + dedup["removed_minhash_bytes"] > 100_000
    assert dedup["too_short_documents"] == len(SHORT) and dedup["signed_documents"] == len(order)
    assert summary["documents"] == len(order) - len(expected)
    stages_seen = {entry.get("stage", "") for entry in manifest(output).values()}
    assert stages_seen == {"signature", "bucket", "resolve", ""}
    check_shards(output, max_predictions=20)
    verify = subprocess.run([sys.executable, "-m", "sink.verify", str(output)], cwd=REPO, capture_output=True,
                            text=True, timeout=120)
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_kept_documents_and_shards_do_not_depend_on_the_fleet(planted, minhash_run, tmp_path):
    """One worker instead of two (and workers reading the corpus themselves):
    byte-identical shards; whole files as tasks: the same documents kept."""
    data, _order, _texts = planted
    output, _summary = minhash_run
    one = tmp_path / "one"
    _run(data, one, "--dedup", "minhash", "--task-size", "96K", "--workers", "1", "--dedup-partitions", "2",
         "--shared-fs")
    assert shard_digests(one) == shard_digests(output) and len(shard_digests(one)) > 20
    whole = tmp_path / "whole"
    _run(data, whole, "--dedup", "minhash", "--task-size", "64M", "--workers", "2")
    assert _removed_ids(whole) == _removed_ids(output)


def test_exact_job_leaves_tasks_without_copies_as_the_plain_job_writes_them(planted, tmp_path):
    data, order, texts = planted
    plain, exact = tmp_path / "plain", tmp_path / "exact"
    plain_summary = _run(data, plain, "--task-size", "96K", "--workers", "2")
    summary = _run(data, exact, "--dedup", "exact", "--task-size", "96K", "--workers", "2")
    expected = _expected_removed(order, texts, "exact")
    assert _removed_ids(exact) == expected and len(expected) >= 5
    assert summary["dedup"]["removed_exact"] == len(expected) and "removed_minhash" not in summary["dedup"]
    assert "dedup" not in plain_summary
    assert all("stage" not in entry for entry in manifest(plain).values())
    # The normal pass keeps its task ids and random streams: a task that lost no document writes the same bytes.
    plain_digests, exact_digests = shard_digests(plain), shard_digests(exact)
    entries = manifest(exact)
    unchanged = [e for e in entries.values() if not e.get("stage") and not e.get("dedup") and e["shards"]]
    changed = [e for e in entries.values() if not e.get("stage") and e.get("dedup")]
    assert unchanged and changed
    for entry in unchanged:
        name = os.path.basename(entry["shards"][0]["name"])
        assert exact_digests[name] == plain_digests[name]
    for entry in changed:
        if entry["shards"]:
            name = os.path.basename(entry["shards"][0]["name"])
            assert exact_digests[name] != plain_digests[name]


def test_resume_skips_finished_stages_and_rebuilds_a_corrupt_signature_file(planted, minhash_run, tmp_path):
    """A job stopped after its signature stage, one of whose files was since
    corrupted: the rerun does only that signature task again (not the
    others), then the rest, and writes what an uninterrupted run wrote."""
    data, _order, _texts = planted
    finished, _summary = minhash_run
    output = tmp_path / "out"
    shutil.copytree(finished, output)
    lines = (output / "manifest.jsonl").read_text().splitlines()
    signature_lines = [line for line in lines if json.loads(line).get("stage") == "signature"]
    (output / "manifest.jsonl").write_text("".join(line + "\n" for line in signature_lines))
    for name in ("summary.json", stages.CLUSTERS_NAME):
        (output / name).unlink()
    shutil.rmtree(output / "dedup" / "pairs")
    shutil.rmtree(output / "dedup" / "removed")
    for shard in output.glob("part-*"):
        shard.unlink()
    victim = sorted((output / "dedup" / "signatures" / "p00001").iterdir())[2]
    data_bytes = bytearray(victim.read_bytes())
    data_bytes[len(data_bytes) // 2] ^= 0x55
    victim.write_bytes(bytes(data_bytes))
    untouched = {p: p.stat().st_mtime_ns for p in (output / "dedup" / "signatures").rglob("*.sig")
                 if p.stem != victim.stem}
    summary = _run(data, output, "--dedup", "minhash", "--task-size", "96K", "--workers", "2",
                   "--dedup-partitions", "3")
    assert summary["this_run"]["duplicate_acks"] == 1  # the rebuilt signature task, already in the manifest
    assert all(p.stat().st_mtime_ns == mtime for p, mtime in untouched.items())
    assert victim.read_bytes() == (finished / victim.relative_to(output)).read_bytes()
    assert shard_digests(output) == shard_digests(finished)
    assert _removed_ids(output) == _removed_ids(finished)


@pytest.mark.s3
def test_dedup_job_on_s3_writes_what_the_local_one_writes(s3, planted, minhash_run, tmp_path):
    """The stages' files go to the output store: on S3, the same kept set and shards."""
    data, _order, _texts = planted
    local, _summary = minhash_run
    client = s3.client()
    bucket = s3.new_bucket("dedup")
    result = run_ventilator(data, f"s3://{bucket}/run", *JOB, "--dedup", "minhash", "--task-size", "96K",
                            "--workers", "2", "--dedup-partitions", "3", "--s3-endpoint-url", s3.endpoint_url,
                            env=s3.env())
    assert result.returncode == 0, result.stderr[-3000:]
    downloaded = tmp_path / "dl"
    for obj in client.list_objects_v2(Bucket=bucket, Prefix="run/", MaxKeys=10000).get("Contents", []):
        name = obj["Key"][len("run/"):]
        if name.startswith("part-") or name in ("summary.json", stages.CLUSTERS_NAME):
            (downloaded / name).parent.mkdir(parents=True, exist_ok=True)
            client.download_file(bucket, obj["Key"], str(downloaded / name))
    assert _removed_ids(downloaded) == _removed_ids(local)
    assert shard_digests(downloaded) == shard_digests(local)
    summary = json.loads((downloaded / "summary.json").read_text())
    assert summary["dedup"]["removed_minhash"] == json.loads((local / "summary.json").read_text())["dedup"][
        "removed_minhash"]
