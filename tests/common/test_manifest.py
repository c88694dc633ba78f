import json

import pytest

from common.output.manifest import MANIFEST_NAME, ManifestMismatch
from common.storage import LocalStorage
from sink.manifest import Manifest


def entry(task, job="j1"):
    return {"task": task, "job": job, "records": 1,
            "shards": [{"name": f"{task}.tfrecord", "records": 1, "sha256": "", "bytes": 5}]}


def test_append_is_idempotent_and_survives_a_torn_line(tmp_path):
    for task in "abc":
        (tmp_path / f"{task}.tfrecord").write_bytes(b"shard")
    storage = LocalStorage(str(tmp_path))
    manifest = Manifest(storage, "j1", str(tmp_path / "state"))
    manifest.load()
    assert [e["task"] for e in manifest.append([entry("a"), entry("b"), entry("a")])] == ["a", "b"]
    assert manifest.append([entry("b")]) == []
    manifest.close()
    path = tmp_path / MANIFEST_NAME
    with open(path, "ab") as handle:
        handle.write(b'{"task": "c", "jo')  # a crash mid-write
    reopened = Manifest(storage, "j1", str(tmp_path / "state"))
    assert sorted(reopened.load()) == ["a", "b"]
    reopened.append([entry("c")])
    reopened.close()
    lines = path.read_bytes().splitlines()
    assert [json.loads(line)["task"] for line in lines] == ["a", "b", "c"]


def test_another_jobs_manifest_is_refused(tmp_path):
    storage = LocalStorage(str(tmp_path))
    manifest = Manifest(storage, "j1", str(tmp_path / "state"))
    manifest.load()
    manifest.append([entry("a")])
    manifest.close()
    with pytest.raises(ManifestMismatch, match="another job"):
        Manifest(storage, "j2", str(tmp_path / "state")).load()


def test_a_task_is_done_only_once_its_line_is_on_disk(tmp_path):
    """A failed write (disk full) must not leave the task counted as done:
    the sink would confirm it to the ventilator and it would never be redone."""
    import errno

    class FullDisk:
        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

        def close(self):
            pass

    manifest = Manifest(LocalStorage(str(tmp_path)), "j1", str(tmp_path / "state"))
    manifest.load()
    real, manifest._handle = manifest._handle, FullDisk()
    with pytest.raises(OSError):
        manifest.append([entry("a")])
    assert "a" not in manifest.done and manifest.totals["tasks"] == 0
    manifest._handle = real
    assert [e["task"] for e in manifest.append([entry("a")])] == ["a"]
    manifest.close()


def test_lines_whose_shard_is_gone_no_longer_count_as_done(tmp_path):
    storage = LocalStorage(str(tmp_path))
    manifest = Manifest(storage, "j1", str(tmp_path / "state"))
    manifest.load()
    for name in ("a", "b"):
        (tmp_path / f"{name}.tfrecord").write_bytes(b"shard")
    empty = {**entry("e"), "shards": [], "records": 0}  # a task with no instance has no shard to lose
    manifest.append([entry("a"), entry("b"), empty])
    manifest.close()
    (tmp_path / "b.tfrecord").unlink()
    reopened = Manifest(storage, "j1", str(tmp_path / "state"))
    assert sorted(reopened.load()) == ["a", "e"]
    assert reopened.totals["tasks"] == 2
    reopened.close()
    assert [json.loads(line)["task"] for line in (tmp_path / MANIFEST_NAME).read_text().splitlines()] == ["a", "e"]


def test_resume_streams_the_lines_instead_of_holding_them(tmp_path):
    """A web-scale manifest is read line by line: memory holds the done set
    and the totals, not every line (30,000 lines of ~400 bytes held as dicts
    would take ~80 MB)."""
    import tracemalloc

    line = {**entry("x"), "source": "part-001.txt", "start": 0, "end": 8388608, "version": "123-456",
            "documents": 2000, "skipped": {"too_short": 3}, "tokens": 1234567, "bytes": 12345678,
            "worker": "worker-abc-1234"}
    line["shards"] = [{"name": "x.tfrecord", "records": 1, "sha256": "3" * 64, "bytes": 5}]
    (tmp_path / "x.tfrecord").write_bytes(b"shard")
    with open(tmp_path / MANIFEST_NAME, "wb") as handle:
        for i in range(30_000):
            handle.write(json.dumps({**line, "task": f"{i:020x}"}, sort_keys=True).encode() + b"\n")
    manifest = Manifest(LocalStorage(str(tmp_path)), "j1", str(tmp_path / "state"))
    tracemalloc.start()
    done = manifest.load()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    manifest.close()
    assert len(done) == 30_000 and manifest.totals["tokens"] == 30_000 * 1234567
    assert manifest.totals["skipped_documents"] == {"too_short": 90_000}
    assert peak < 20e6, f"peak {peak / 1e6:.0f} MB while loading"


def test_the_ventilator_reads_only_the_first_line_to_know_the_job(tmp_path):
    from common.output.manifest import read_first_entry

    storage = LocalStorage(str(tmp_path))
    assert read_first_entry(storage) is None
    (tmp_path / MANIFEST_NAME).write_bytes(b"")
    assert read_first_entry(storage) is None
    long_first = {**entry("a"), "padding": "p" * 100_000}  # longer than the head that is read first
    (tmp_path / MANIFEST_NAME).write_bytes(json.dumps(long_first).encode() + b"\n" + b'{"task": "b", "jo')
    assert read_first_entry(storage)["task"] == "a"
    (tmp_path / MANIFEST_NAME).write_bytes(b"".join(json.dumps(entry(t)).encode() + b"\n" for t in "abc"))
    assert read_first_entry(storage)["task"] == "a"


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600)])
def test_output_files_honour_the_umask(tmp_path, umask, mode):
    """Shards were 0600 whatever the umask (mkstemp's mode, renamed as it was): a
    trainer running as another user could not read them."""
    import os
    import stat

    previous = os.umask(umask)
    try:
        storage = LocalStorage(str(tmp_path))
        storage.put_bytes("part-x.tfrecord", b"shard")
        storage.put_bytes("holdout/part-y.parquet", b"shard")
    finally:
        os.umask(previous)
    for name in ("part-x.tfrecord", "holdout/part-y.parquet"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == mode, name
