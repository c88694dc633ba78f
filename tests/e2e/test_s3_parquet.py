"""Parquet on a real S3-compatible server (Ceph radosgw): the ventilator
plans from footers (ranged GETs), workers read their row groups by range,
and the output, held-out side included, is the same as from local files."""

from __future__ import annotations

import hashlib
import os

import pytest

from tests.support.helpers import VOCAB, need_shared, run_ventilator
from tests.support.web_corpora import wiki_parquet

pytestmark = [pytest.mark.e2e, pytest.mark.s3]

JOB = ["--vocab-file", VOCAB, "--dupe-factor", "1", "--task-size", "150K", "--report-seconds", "2",
       "--holdout-fraction", "0.2"]


def digests(output):
    return {p.relative_to(output).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(output.rglob("part-*"))}


def test_parquet_objects_give_the_same_output_as_local_files(s3, tmp_path):
    need_shared()
    paths = wiki_parquet(tmp_path / "data", files=2, row_group_size=6)
    local = tmp_path / "local"
    result = run_ventilator(tmp_path / "data", local, *JOB, "--workers", "2")
    assert result.returncode == 0, result.stderr[-3000:]

    client = s3.client()
    bucket = s3.new_bucket("parquet")
    for path in paths:
        client.upload_file(str(path), bucket, f"fineweb/data/{path.name}")
    output = tmp_path / "from-s3"
    result = run_ventilator(f"s3://{bucket}/fineweb/data", output, *JOB, "--workers", "2",
                            "--s3-endpoint-url", s3.endpoint_url, env=s3.env())
    assert result.returncode == 0, result.stderr[-3000:]
    assert "input format: parquet (detected" in result.stderr
    assert digests(output) == digests(local)
    assert any(name.startswith("holdout/") for name in digests(output))


def test_footers_and_row_groups_are_read_by_range_from_s3(s3, tmp_path):
    """Through S3Storage: a task's payload is the same as from the local file."""
    from common.readers import ParseReport, reader_named
    from common.storage import LocalStorage, S3Storage

    need_shared()
    (path,) = wiki_parquet(tmp_path / "data", files=1, row_group_size=6)
    bucket = s3.new_bucket("ranges")
    s3.client().upload_file(str(path), bucket, f"d/{path.name}")
    os.environ.update(s3.env())
    remote, local = S3Storage(f"s3://{bucket}/d", s3.endpoint_url), LocalStorage(str(path.parent))
    reader = reader_named("parquet")()
    remote_files = remote.list_inputs()
    reader.check_inputs(remote, remote_files)
    remote_tasks = list(reader.plan(remote_files, 100_000, remote))
    local_tasks = list(reader.plan(local.list_inputs(), 100_000, local))
    assert [(t.start, t.end) for t in remote_tasks] == [(t.start, t.end) for t in local_tasks]
    assert len(remote_tasks) > 2
    for remote_task, local_task in zip(remote_tasks, local_tasks):
        found = [(d.id, d.lines) for d in reader.documents(remote_task, reader.read(remote, remote_task),
                                                           ParseReport())]
        assert found and found == [(d.id, d.lines) for d in reader.documents(
            local_task, reader.read(local, local_task), ParseReport())]
