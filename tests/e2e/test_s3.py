"""Against a real S3-compatible server (Ceph radosgw, started by scripts/s3-server.sh)."""

import hashlib
import json
import uuid

import pytest

from tests.helpers import VOCAB, WIKI, need_shared, run_ventilator, shard_digests
from tests.tf_reader import read_examples

pytestmark = [pytest.mark.e2e, pytest.mark.s3]

JOB = ["--vocab-file", VOCAB, "--dupe-factor", "1", "--task-size", "300K", "--report-seconds", "2"]


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    need_shared()
    output = tmp_path_factory.mktemp("local") / "out"
    result = run_ventilator(WIKI, output, *JOB, "--workers", "2")
    assert result.returncode == 0, result.stderr[-3000:]
    return output


def download_all(client, bucket, prefix, target):
    target.mkdir(parents=True)
    names = []
    for obj in client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", []):
        name = obj["Key"][len(prefix):]
        names.append(name)
        client.download_file(bucket, obj["Key"], str(target / name))
    return sorted(names)


def test_output_to_s3(s3, local_run, tmp_path):
    client = s3.client()
    bucket = f"out-{uuid.uuid4().hex[:8]}"
    client.create_bucket(Bucket=bucket)
    result = run_ventilator(WIKI, f"s3://{bucket}/bert/run1", *JOB, "--workers", "2",
                            "--s3-endpoint-url", s3.endpoint_url, env=s3.env())
    assert result.returncode == 0, result.stderr[-3000:]

    names = download_all(client, bucket, "bert/run1/", tmp_path / "dl")
    assert "manifest.jsonl" in names and "summary.json" in names
    assert not [n for n in names if n.endswith(".tmp")]
    # Same bytes as the local run: storage does not change output.
    assert shard_digests(tmp_path / "dl") == shard_digests(local_run)
    entries = [json.loads(line) for line in (tmp_path / "dl" / "manifest.jsonl").read_text().splitlines()]
    for entry in entries:
        if not entry["shard"]:
            continue
        assert entry["shard"].startswith(f"s3://{bucket}/bert/run1/part-")
        path = tmp_path / "dl" / entry["shard"].rsplit("/", 1)[1]
        assert hashlib.sha256(path.read_bytes()).hexdigest() == entry["sha256"]
        assert len(read_examples(str(path))) == entry["records"] > 0
    # Objects are private.
    acl = client.get_object_acl(Bucket=bucket, Key=f"bert/run1/{names[-1]}")
    assert not [g for g in acl["Grants"] if "AllUsers" in str(g.get("Grantee", {}))]


def test_corpus_on_s3_gives_the_same_output_as_local(s3, local_run, tmp_path):
    """Workers read byte ranges of the objects themselves (the ventilator does not read them)."""
    client = s3.client()
    bucket = f"corpus-{uuid.uuid4().hex[:8]}"
    client.create_bucket(Bucket=bucket)
    for path in sorted(WIKI.rglob("wiki_*")):
        client.upload_file(str(path), bucket, f"wiki/{path.relative_to(WIKI).as_posix()}")
    output = tmp_path / "out"
    result = run_ventilator(f"s3://{bucket}/wiki", output, *JOB, "--workers", "3",
                            "--s3-endpoint-url", s3.endpoint_url, env=s3.env())
    assert result.returncode == 0, result.stderr[-3000:]
    assert shard_digests(output) == shard_digests(local_run)
