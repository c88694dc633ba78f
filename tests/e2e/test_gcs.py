"""gs:// wherever s3:// works, against a real GCS emulator (fake-gcs-server, started by scripts/gcs-server.sh):
one job read from and written to gs://, then every command that takes an output or a corpus URI on it."""

import json
import subprocess
import sys
import time

import pytest

from tests.e2e.object_stores import (
    JOB,
    assert_only_the_unchanged_object_done,
    local_run,  # noqa: F401  (the fixture: the local reference run)
)
from tests.support.helpers import REPO, WIKI, need_shared, python_module, run_ventilator, shard_digests
from tests.support.tf_reader import read_examples

pytestmark = [pytest.mark.e2e, pytest.mark.gcs]


def test_a_job_from_gcs_to_gcs_is_the_local_bytes_and_every_command_reads_it(gcs, local_run, tmp_path, monkeypatch):
    """Workers read byte ranges of the objects themselves; shards, manifest and summary land on gs://, the
    same bytes as a local run; mlm-verify, mlm-report, the loader and mlm-train-vocab take the gs:// URIs."""
    bucket = gcs.new_bucket("job")
    gcs.upload_tree(bucket, WIKI, "wiki", "wiki_*")
    output = f"gs://{bucket}/bert/run1"
    result = run_ventilator(f"gs://{bucket}/wiki", output, *JOB, "--workers", "2", env=gcs.env())
    assert result.returncode == 0, result.stderr[-3000:]

    names = gcs.download_prefix(bucket, "bert/run1", tmp_path / "dl")
    assert {"manifest.jsonl", "summary.json", "dataset_info.json"} <= set(names)
    assert not [n for n in names if n.endswith(".tmp")]
    assert shard_digests(tmp_path / "dl") == shard_digests(local_run)  # storage does not change output
    entries = [json.loads(line) for line in (tmp_path / "dl" / "manifest.jsonl").read_text().splitlines()]
    assert {e["source"] for e in entries} == {"AA/wiki_00", "AB/wiki_00"}
    for entry in entries:
        for shard in entry["shards"]:
            assert len(read_examples(str(tmp_path / "dl" / shard["name"]))) == shard["records"] > 0
    # Objects are private: nothing grants anyone outside the project.
    for blob in gcs.client().list_blobs(bucket, prefix="bert/run1/"):
        blob.acl.reload()
        assert not [e for e in blob.acl if e["entity"] in ("allUsers", "allAuthenticatedUsers")], blob.name

    verified = python_module("sink.verify", output, env=gcs.env())
    out, _ = verified.communicate(timeout=120)
    assert verified.returncode == 0, out
    assert f"{sum(e['records'] for e in entries):,} records" in out and "all match the manifest" in out

    made = subprocess.run([sys.executable, "-m", "report", output], cwd=REPO, capture_output=True, text=True,
                          timeout=180, env={**__import__("os").environ, **gcs.env()})
    assert made.returncode == 0, made.stderr
    report = json.loads(gcs.client().bucket(bucket).blob("bert/run1/report/report.json").download_as_bytes())
    assert report["ok"], report["problems"]
    assert report["sides"]["train"]["sequences"] == sum(e["records"] for e in entries)
    assert report["sample"]["files_read"] == report["sample"]["files_total"] > 0  # it read the shards on gs://

    # The loader's --data: the shard list and the shards' bytes, as it serves them (tests/e2e/test_loader_s3.py
    # serves batches from gs:// through the real loader process).
    from loader.shards import open_dataset

    for name, value in gcs.env().items():
        monkeypatch.setenv(name, value)
    storage, shards = open_dataset(output)
    assert shards.records == sum(e["records"] for e in entries)
    assert storage.get_bytes(entries[0]["shards"][0]["name"]) == (tmp_path / "dl" / entries[0]["shards"][0]["name"]).read_bytes()

    # mlm-train-vocab on the gs:// corpus: the same vocabulary as from the directory.
    vocabularies = []
    for data in (f"gs://{bucket}/wiki/AA", str(WIKI / "AA")):
        target = tmp_path / f"vocab-{len(vocabularies)}.txt"
        trained = subprocess.run([sys.executable, "-m", "common.tokenization.training", "--data", data, "--output",
                                  str(target), "--vocab-size", "400"], cwd=REPO, capture_output=True, text=True,
                                 timeout=180, env={**__import__("os").environ, **gcs.env()})
        assert trained.returncode == 0, trained.stderr
        vocabularies.append(target.read_text())
    assert vocabularies[0] == vocabularies[1] and len(vocabularies[0].splitlines()) > 100


def test_bad_gs_uris_are_one_line_errors(gcs, tmp_path):
    """No such bucket, no credentials: one line, no traceback, before any work."""
    # (a malformed gs:// URI and an unserved scheme: tests/common/test_storage_gcs.py)
    missing = f"no-such-bucket-{time.monotonic_ns()}"
    for data, expected in ((f"gs://{missing}/c", f"no such bucket: {missing}"),):
        result = run_ventilator(data, tmp_path / "out", *JOB, env=gcs.env(), timeout=120)
        assert result.returncode != 0 and expected in result.stderr, result.stderr[-2000:]
        assert "Traceback" not in result.stderr, result.stderr[-2000:]
    # No emulator and no Application Default Credentials (no file, no gcloud login, no metadata server)
    env = {name: value for name, value in __import__("os").environ.items()
           if name not in ("STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS")}
    env.update(CLOUDSDK_CONFIG=str(tmp_path / "gcloud"), GCE_METADATA_HOST="127.0.0.1:9", GCE_METADATA_IP="127.0.0.1:9",
               NO_GCE_CHECK="True")
    result = subprocess.run([sys.executable, "-m", "ventilator", "--data", "gs://bucket/c", "--output",
                             str(tmp_path / "out"), *JOB], cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 1 and "gs://: no Google credentials (Application Default Credentials" in result.stderr
    assert "Traceback" not in result.stderr, result.stderr[-2000:]


def test_an_object_changed_after_planning_is_refused_not_half_read(gcs, local_run, tmp_path):
    """Listed (its generation pinned), then overwritten before a worker reads it: its tasks are quarantined
    with the reason instead of mixing versions; the rest completes."""
    from tests.support.cluster import Cluster

    need_shared()
    bucket = gcs.new_bucket("changing")
    gcs.upload_tree(bucket, WIKI, "wiki", "wiki_*")
    c = Cluster(f"gs://{bucket}/wiki", tmp_path / "out", JOB, tmp_path, env=gcs.env())
    try:
        c.start_sink()
        c.start_ventilator()  # lists the objects (and their generations) now
        deadline = time.monotonic() + 60
        while "ready" not in c.log_text():
            assert time.monotonic() < deadline, c.tail()
            time.sleep(0.2)
        changed = (WIKI / "AB" / "wiki_00").read_bytes().replace(b"the ", b"teh ")
        gcs.client().bucket(bucket).blob("wiki/AB/wiki_00").upload_from_string(changed)
        c.start_worker()
        c.start_worker()
        assert c.wait() == 3, c.tail()  # exit status 3: tasks quarantined
        assert_only_the_unchanged_object_done(tmp_path / "out")
        written = shard_digests(tmp_path / "out")
        assert written and written == {name: digest for name, digest in shard_digests(local_run).items()
                                       if name in written}  # what was written is the unchanged object's
    finally:
        c.close()
