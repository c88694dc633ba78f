"""A full output disk: workers wait and retry without spending attempts, the
sink survives, and once room is made the run ends as a clean run would.
The disk is real: a small tmpfs mounted by the test (root, as in CI)."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import time

import pytest

from common.storage import RetryPolicy, StorageError
from tests.support.cluster import Cluster
from tests.support.helpers import VOCAB, WIKI, need_shared, run_ventilator, shard_digests
from worker.backoff import Backoff, no_room

JOB = ["--vocab-file", VOCAB, "--dupe-factor", "1", "--task-size", "256K", "--max-attempts", "3"]


def test_no_room_is_recognised_through_wrapping():
    from botocore.exceptions import ClientError

    def slow_down():
        raise ClientError({"Error": {"Code": "SlowDown", "Message": "Please reduce your request rate."}}, "PutObject")

    with pytest.raises(StorageError) as raised:
        RetryPolicy(attempts=1).run("PUT s3://b/k", slow_down)
    assert no_room(raised.value) == "the store answered SlowDown"
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as error:
            raise RuntimeError("writing a shard") from error
    except RuntimeError as wrapped:
        assert "no space on the output" in no_room(wrapped)
    assert no_room(ValueError("bad record")) is None
    assert no_room(OSError(errno.EIO, "I/O error")) is None
    backoff = Backoff(first=1, most=4)
    assert [backoff.next_delay() for _ in range(5)] == [1, 2, 4, 4, 4] and backoff.waited == 15


@pytest.fixture
def small_disk(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_waits_for_room_and_the_run_ends_as_a_clean_one(tmp_path, small_disk):
    need_shared()
    clean = tmp_path / "clean"
    result = run_ventilator(WIKI, clean, *JOB, "--workers", "2")
    assert result.returncode == 0, result.stderr[-3000:]
    output_bytes = sum(p.stat().st_size for p in clean.rglob("*") if p.is_file())

    # Ballast leaves room for the manifest's lines but not for the shards.
    ballast = small_disk / "ballast"
    stats = os.statvfs(small_disk)
    ballast.write_bytes(b"\0" * (stats.f_bavail * stats.f_frsize - 200_000))
    assert output_bytes > 1_000_000
    c = Cluster(WIKI, small_disk / "out", JOB, tmp_path).start(2)
    try:
        deadline = time.monotonic() + 120
        while "without spending an attempt" not in c.log_text():
            assert time.monotonic() < deadline and c.ventilator.poll() is None, c.tail()
            time.sleep(0.2)
        time.sleep(3)  # a few rounds of waiting: nothing is quarantined meanwhile
        assert "quarantined after" not in c.log_text(), c.tail()
        ballast.unlink()
        assert c.wait() == 0, c.tail()
        assert all(w.returncode == 0 for w in c.workers) and c.sink.returncode == 0, c.tail()
    finally:
        c.close()
    assert shard_digests(small_disk / "out") == shard_digests(clean)
    summary = json.loads((small_disk / "out" / "summary.json").read_text())
    assert summary["quarantined"] == {} and summary["complete"] is True
    assert "Traceback" not in c.log_text()
