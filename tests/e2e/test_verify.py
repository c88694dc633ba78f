"""mlm-verify on real outputs: a clean one passes; each kind of damage is
named, and makes it exit 1."""

import json
import shutil
import subprocess
import sys

import pytest

from tests.support.factories import finished_job
from tests.support.helpers import REPO, VOCAB

pytestmark = pytest.mark.e2e

JOB = ["--vocab-file", VOCAB, "--dupe-factor", "1", "--task-size", "256K", "--workers", "2"]


@pytest.fixture(scope="module", params=["plain", "gzip"])
def finished(request, tmp_path_factory):
    return finished_job(tmp_path_factory.mktemp(request.param), *JOB, *(["--gzip"] if request.param == "gzip" else []))


def verify(output) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sink.verify", str(output)], cwd=REPO, capture_output=True,
                          text=True, timeout=120)


def damaged_copy(finished, tmp_path):
    copy = tmp_path / "out"
    shutil.copytree(finished, copy)
    entries = [json.loads(line) for line in (copy / "manifest.jsonl").read_text().splitlines()]
    shards = sorted(copy / shard["name"] for e in entries for shard in e["shards"])
    return copy, entries, shards


def test_a_clean_output_matches_its_manifest(finished):
    result = verify(finished)
    assert result.returncode == 0, result.stderr
    summary = json.loads((finished / "summary.json").read_text())
    assert f"{summary['tasks']} tasks, {summary['shards']} shards, {summary['records']:,} records" in result.stdout
    assert "all match the manifest" in result.stdout


def test_a_flipped_byte_is_found(finished, tmp_path):
    copy, _, shards = damaged_copy(finished, tmp_path)
    data = bytearray(shards[0].read_bytes())
    data[len(data) // 2] ^= 0x01
    shards[0].write_bytes(bytes(data))
    result = verify(copy)
    assert result.returncode == 1
    assert f"{shards[0].name}: sha256 differs from the manifest's" in result.stderr
    assert f"{shards[0].name}: corrupt:" in result.stderr  # a record's checksum, or the gzip stream's


def test_missing_truncated_and_unlisted_shards_are_found(finished, tmp_path):
    copy, _, shards = damaged_copy(finished, tmp_path)
    shards[0].unlink()
    shards[1].write_bytes(shards[1].read_bytes()[:-10])
    (copy / f"part-00000000000000000000{shards[2].suffix}").write_bytes(shards[2].read_bytes())
    result = verify(copy)
    assert result.returncode == 1
    problems = result.stderr
    assert f"{shards[0].name}: missing" in problems
    assert f"{shards[1].name}: corrupt:" in problems
    assert f"part-00000000000000000000{shards[2].suffix}: not in the manifest" in problems
    assert "4 problem(s)" in result.stdout  # the truncated shard's sha256 too


def test_a_task_listed_twice_and_a_torn_manifest_are_found(finished, tmp_path):
    copy, entries, _ = damaged_copy(finished, tmp_path)
    manifest = copy / "manifest.jsonl"
    manifest.write_text(manifest.read_text() + json.dumps(entries[0]) + "\n" + '{"task": "torn')
    result = verify(copy)
    assert result.returncode == 1
    assert f"task {entries[0]['task']} is listed twice" in result.stderr
    assert "ends with 14 bytes that are not a complete line" in result.stderr


def test_not_an_output(tmp_path):
    result = verify(tmp_path)
    assert result.returncode == 1
    assert "no manifest.jsonl" in result.stderr
