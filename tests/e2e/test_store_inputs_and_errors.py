"""The storage axis as a user meets it on gs:// and s3:// (the GCS emulator and Ceph radosgw): one object given
as --data is the corpus, as one local file is; a bucket that does not exist is named, in one line; a store that
accepts connections and never answers is given up on after --storage-timeout (MLM_<COMMAND>_STORAGE_TIMEOUT), not after
the clients' own timeouts times the retries."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import pytest

from tests.e2e.object_stores import JOB
from tests.support.helpers import REPO, WIKI, need_shared, run_ventilator, shard_digests
from tests.support.silent_endpoint import silent_endpoint

pytestmark = [pytest.mark.e2e]

ONE_FILE = WIKI / "AA" / "wiki_00"


@pytest.fixture(scope="module")
def local_file_run(tmp_path_factory) -> object:
    """The job over one local file (what a single object must give)."""
    need_shared()
    out = tmp_path_factory.mktemp("local-file") / "out"
    result = run_ventilator(ONE_FILE, out, *JOB, "--workers", "1")
    assert result.returncode == 0, result.stderr[-3000:]
    assert shard_digests(out)
    return out


@pytest.mark.gcs
def test_one_gcs_object_as_data_is_the_local_file(gcs, local_file_run, tmp_path):
    bucket = gcs.new_bucket("one")
    gcs.client().bucket(bucket).blob("dir/wiki_00").upload_from_filename(str(ONE_FILE))
    gcs.client().bucket(bucket).blob("dir/wiki_00x").upload_from_string(b"<doc id=\"1\">\nnot this one\n</doc>\n")
    result = run_ventilator(f"gs://{bucket}/dir/wiki_00", f"gs://{bucket}/out", *JOB, "--workers", "1",
                            env=gcs.env())
    assert result.returncode == 0, result.stderr[-3000:]
    gcs.download_prefix(bucket, "out", tmp_path / "dl")
    assert shard_digests(tmp_path / "dl") == shard_digests(local_file_run)


@pytest.mark.s3
def test_one_s3_object_as_data_is_the_local_file(s3, local_file_run, tmp_path):
    bucket = s3.new_bucket("one")
    client = s3.client()
    client.upload_file(str(ONE_FILE), bucket, "dir/wiki_00")
    client.put_object(Bucket=bucket, Key="dir/wiki_00x", Body=b"<doc id=\"1\">\nnot this one\n</doc>\n")
    result = run_ventilator(f"s3://{bucket}/dir/wiki_00", tmp_path / "out", *JOB, "--workers", "1",
                            "--s3-endpoint-url", s3.endpoint_url, env=s3.env())
    assert result.returncode == 0, result.stderr[-3000:]
    assert shard_digests(tmp_path / "out") == shard_digests(local_file_run)


def _verify(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sink.verify", *args], cwd=REPO, env={**os.environ, **env},
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.gcs
def test_verify_names_a_missing_gcs_bucket(gcs):
    bucket = f"nosuchbucket-{uuid.uuid4().hex[:8]}"
    result = _verify(f"gs://{bucket}/x", env=gcs.env())
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1 and len(lines) == 1, result.stderr
    assert "no such bucket" in lines[0] and bucket in lines[0], lines
    assert "not an mlm-pipeline output" not in result.stderr


@pytest.mark.s3
def test_verify_names_a_missing_s3_bucket(s3):
    bucket = f"nosuchbucket-{uuid.uuid4().hex[:8]}"
    result = _verify(f"s3://{bucket}/x", "--s3-endpoint-url", s3.endpoint_url, env=s3.env())
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1 and len(lines) == 1, result.stderr
    assert "no such bucket" in lines[0] and bucket in lines[0], lines
    assert "not an mlm-pipeline output" not in result.stderr


#: The bound the tests set, and the generous limit they assert: the unbounded wait was 518 s on gs://, and
#: the default bound (120 s) is far above this limit too, so only the configured bound can pass.
BOUND = 2
LIMIT = 75


def test_a_silent_gcs_endpoint_is_given_up_on_after_the_storage_timeout():
    """mlm-verify with --storage-timeout; the ventilator's listing with MLM_VENTILATOR_STORAGE_TIMEOUT: one line
    each."""
    with silent_endpoint() as (url, held):
        env = {"STORAGE_EMULATOR_HOST": url, "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}
        started = time.monotonic()
        result = _verify("gs://bucket/out", "--storage-timeout", str(BOUND), env=env, timeout=300)
        took = time.monotonic() - started
        assert held, "the client never connected"
        assert result.returncode == 1 and took < LIMIT, (took, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and f"--storage-timeout {BOUND}s" in lines[0], result.stderr

        started = time.monotonic()
        result = subprocess.run([sys.executable, "-m", "ventilator", "--data", "gs://bucket/corpus", "--output",
                                 "/nonexistent-never-written", "--vocab-file", str(JOB[1])], cwd=REPO,
                                env={**os.environ, **env, "MLM_VENTILATOR_STORAGE_TIMEOUT": str(BOUND)},
                                capture_output=True, text=True, timeout=300)
        took = time.monotonic() - started
        assert result.returncode == 1 and took < LIMIT, (took, result.stderr[-2000:])
        # the bound, and the variable that set it
        assert f"--storage-timeout (from MLM_VENTILATOR_STORAGE_TIMEOUT) {BOUND}s" in result.stderr, result.stderr
        assert "Traceback" not in result.stderr, result.stderr


def test_a_silent_s3_endpoint_is_given_up_on_after_the_storage_timeout():
    with silent_endpoint() as (url, held):
        env = {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_DEFAULT_REGION": "us-east-1",
               "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1", "MLM_VERIFY_STORAGE_TIMEOUT": str(BOUND)}
        started = time.monotonic()
        result = _verify("s3://bucket/out", "--s3-endpoint-url", url, env=env, timeout=300)
        took = time.monotonic() - started
        assert held, "the client never connected"
        assert result.returncode == 1 and took < LIMIT, (took, result.stderr)
        lines = result.stderr.strip().splitlines()
        # the bound, and the variable that set it
        assert len(lines) == 1 and f"--storage-timeout (from MLM_VERIFY_STORAGE_TIMEOUT) {BOUND}s" in lines[0], \
            result.stderr


def test_a_storage_timeout_that_is_no_duration_is_refused():
    result = _verify("gs://bucket/out", env={"MLM_VERIFY_STORAGE_TIMEOUT": "0"})
    assert result.returncode == 2 and "Invalid value for '--storage-timeout'" in result.stderr, result.stderr
    assert "MLM_VERIFY_STORAGE_TIMEOUT" in result.stderr, result.stderr  # the variable that caused it is named


@pytest.mark.parametrize("how", ["flag", "variable"])
def test_a_storage_timeout_of_nan_is_refused_not_unbounded(how):
    """NaN compares false with every bound, so a range let it through and the wait had no bound at all (a
    silent endpoint held mlm-verify past 45 s with --storage-timeout nan): refused before any work, as 0 is."""
    args, env = (["--storage-timeout", "nan"], {}) if how == "flag" else ([], {"MLM_VERIFY_STORAGE_TIMEOUT": "nan"})
    result = _verify("gs://bucket/out", *args, env=env, timeout=60)
    assert result.returncode == 2 and "Invalid value for '--storage-timeout'" in result.stderr, result.stderr
    assert "nan" in result.stderr.lower(), result.stderr
