"""--output-format parquet through the real command lines."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.factories import finished_by_fleets
from tests.support.helpers import REPO, VOCAB, WIKI, manifest, need_shared, run_ventilator, shard_digests

pytestmark = pytest.mark.e2e

JOB = ["--vocab-file", VOCAB, "--dupe-factor", "2", "--task-size", "512K", "--output-format", "parquet"]


def test_parquet_output_is_the_same_whatever_the_fleet(tmp_path):
    outputs = finished_by_fleets(tmp_path, *JOB, "--bin-size", "64")
    digests = {p: d for p, d in shard_digests(outputs[0]).items()}
    on_disk = sorted(str(p.relative_to(outputs[0])) for p in outputs[0].rglob("part-*.parquet"))
    listed = sorted(f["name"] for e in manifest(outputs[0]).values() for f in e["shards"])
    assert on_disk == listed and len(listed) > 4, "every bin's file is in the manifest"
    assert sorted(str(p.relative_to(outputs[1])) for p in outputs[1].rglob("part-*.parquet")) == on_disk
    for name in on_disk:
        assert (outputs[0] / name).read_bytes() == (outputs[1] / name).read_bytes(), name
    assert digests == shard_digests(outputs[1])
    verify = subprocess.run([sys.executable, "-m", "sink.verify", str(outputs[0])], cwd=REPO, capture_output=True,
                            text=True, timeout=120)
    assert verify.returncode == 0, verify.stderr
    info = json.loads((outputs[0] / "dataset_info.json").read_text())
    assert info["records"] == sum(e["records"] for e in manifest(outputs[0]).values()) > 0
    assert info["writer"] == {"name": "parquet", "bin_size": 64, "chinese_ref": False, "column_names": "ours"}
    assert info["features"]["input_ids"]["arrow_type"].startswith("list<")


@pytest.mark.parametrize("flags,reason", [
    (["--output-format", "tfrecord", "--bin-size", "64"], "--bin-size does not apply to"),
    (["--output-format", "parquet", "--gzip"], "--gzip does not apply to"),
    (["--output-format", "parquet", "--bin-size", "-1"], "--bin-size must be 0"),
])
def test_flags_a_format_does_not_take_are_refused(tmp_path, flags, reason):
    need_shared()
    result = run_ventilator(WIKI, tmp_path / "out", "--vocab-file", VOCAB, *flags, "--workers", "1")
    assert result.returncode == 1
    assert reason in result.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_finished_parquet_job_resumes_to_nothing_and_a_lost_file_is_written_again(tmp_path):
    need_shared()
    output = tmp_path / "out"
    result = run_ventilator(WIKI, output, *JOB, "--workers", "2")
    assert result.returncode == 0, result.stderr[-3000:]
    before = {p: p.read_bytes() for p in output.rglob("part-*.parquet")}
    lost = sorted(before)[0]
    lost.unlink()
    result = run_ventilator(WIKI, output, *JOB, "--workers", "1")
    assert result.returncode == 0, result.stderr[-3000:]
    after = {p: p.read_bytes() for p in output.rglob("part-*.parquet")}
    assert after == before, "the lost file came back with the same bytes; no other file changed"
    assert len(manifest(output)) == len({e["task"] for e in manifest(output).values()})
