import json

import pytest

from common.manifest import MANIFEST_NAME, Manifest, ManifestMismatch
from common.storage import LocalStorage


def entry(task, job="j1"):
    return {"task": task, "job": job, "shard": f"{task}.tfrecord", "records": 1}


def test_append_is_idempotent_and_survives_a_torn_line(tmp_path):
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
