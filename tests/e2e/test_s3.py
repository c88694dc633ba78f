"""Against a real S3-compatible server (Ceph radosgw, started by scripts/s3-server.sh)."""

import hashlib
import json
import os
import subprocess
import sys

import pytest

from common.readers import ParseReport, reader_named
from common.readers.content import task_content
from tests.e2e.object_stores import (
    JOB,
    assert_only_the_unchanged_object_done,
    local_run,  # noqa: F401  (the fixture: the local reference run)
)
from tests.support.helpers import REPO, VOCAB, WIKI, need_shared, python_module, run_ventilator, shard_digests
from tests.support.tf_reader import read_examples

WIKI_READER, JSON_READER, TEXT_READER = (reader_named(name)() for name in ("wikiextractor", "json", "text"))


pytestmark = [pytest.mark.e2e, pytest.mark.s3]


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
    bucket = s3.new_bucket("out")
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
        for shard in entry["shards"]:
            assert shard["name"].startswith("part-")
            path = tmp_path / "dl" / shard["name"]
            assert hashlib.sha256(path.read_bytes()).hexdigest() == shard["sha256"]
            assert len(read_examples(str(path))) == shard["records"] == entry["records"] > 0
    # Objects are private.
    acl = client.get_object_acl(Bucket=bucket, Key=f"bert/run1/{names[-1]}")
    assert not [g for g in acl["Grants"] if "AllUsers" in str(g.get("Grantee", {}))]
    # mlm-verify reads the shards back from S3 itself.
    verified = python_module("sink.verify", f"s3://{bucket}/bert/run1", "--s3-endpoint-url", s3.endpoint_url,
                             env=s3.env())
    out, _ = verified.communicate(timeout=120)
    assert verified.returncode == 0, out
    assert f"{sum(e['records'] for e in entries):,} records" in out and "all match the manifest" in out


@pytest.fixture(scope="module")
def s3_corpus_run(s3, tmp_path_factory):
    """The shared sample uploaded to a bucket, and a job reading it there into a local output."""
    need_shared()
    client = s3.client()
    bucket = s3.new_bucket("corpus")
    for path in sorted(WIKI.rglob("wiki_*")):
        client.upload_file(str(path), bucket, f"wiki/{path.relative_to(WIKI).as_posix()}")
    output = tmp_path_factory.mktemp("s3-corpus") / "out"
    result = run_ventilator(f"s3://{bucket}/wiki", output, *JOB, "--workers", "3",
                            "--s3-endpoint-url", s3.endpoint_url, env=s3.env())
    assert result.returncode == 0, result.stderr[-3000:]
    return bucket, output


def test_corpus_on_s3_gives_the_same_output_as_local(s3_corpus_run, local_run):
    """Workers read byte ranges of the objects themselves (the ventilator does not read them)."""
    _bucket, output = s3_corpus_run
    assert shard_digests(output) == shard_digests(local_run)


def report(output, *args, env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "report", str(output), "--sample", "1", "--input-sample", "64K",
                           *args], cwd=REPO, capture_output=True, text=True, timeout=180, env={**os.environ, **env})


def test_an_s3_corpus_is_read_again_re_uploaded_or_gone(s3, s3_corpus_run, tmp_path, monkeypatch):
    """mlm-report on the local output reads the input again on the job's own S3 endpoint (dataset_info.json
    records it); an object uploaded again with the same bytes (a one-part multipart upload: a new ETag) is a
    changed corpus, refused in one line (docs/design.md says why); a bucket that is gone is said at once (no
    retries), by the report (which then does not say "no problem found") and by the ventilator."""
    bucket, output = s3_corpus_run
    client = s3.client()
    made = report(output, env=s3.env())
    assert made.returncode == 0, made.stderr
    unknown = json.loads((output / "report" / "report.json").read_text())["unknown_text"]
    assert unknown.get("input_bytes_read", 0) > 0, unknown
    assert "no problem found" in made.stdout and "input was not read" not in made.stdout

    key = sorted(o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix="wiki/")["Contents"])[0]
    data = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    upload = client.create_multipart_upload(Bucket=bucket, Key=key)
    part = client.upload_part(Bucket=bucket, Key=key, UploadId=upload["UploadId"], PartNumber=1, Body=data)
    client.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload["UploadId"],
                                     MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})
    assert client.get_object(Bucket=bucket, Key=key)["Body"].read() == data
    again = run_ventilator(f"s3://{bucket}/wiki", output, *JOB, "--workers", "1", "--s3-endpoint-url",
                           s3.endpoint_url, env=s3.env())
    assert again.returncode == 1
    assert "belongs to another job" in again.stderr and "no option changed: the corpus changed since" in again.stderr

    for obj in client.list_objects_v2(Bucket=bucket)["Contents"]:
        client.delete_object(Bucket=bucket, Key=obj["Key"])
    client.delete_bucket(Bucket=bucket)
    gone = report(output, env=s3.env())
    assert gone.returncode == 0, gone.stderr
    assert "no such bucket (NoSuchBucket)" in gone.stderr and "retrying" not in gone.stderr
    assert "no problem found" in gone.stdout and "the input was not read" in gone.stdout
    refused = run_ventilator(f"s3://{bucket}/wiki", tmp_path / "other", *JOB, "--s3-endpoint-url", s3.endpoint_url,
                             env=s3.env())
    assert refused.returncode == 1 and "retrying" not in refused.stderr
    assert refused.stderr.strip().splitlines()[-1].endswith("no such bucket (NoSuchBucket)")
    from common.storage import S3Storage, StorageError

    for name, value in s3.env().items():
        monkeypatch.setenv(name, value)
    storage = S3Storage(f"s3://{bucket}/out", s3.endpoint_url)
    with pytest.raises(StorageError, match=r"no such bucket \(NoSuchBucket\)"):
        with storage.open_atomic("part-x") as writer:  # boto3's transfer wraps the error: S3UploadFailedError
            writer.file.write(b"x")
            writer.commit()


def test_byte_ranges_of_s3_objects_cover_every_document_once(s3):
    """Ranged GETs against the real server, split sizes from a few bytes to
    more than the object, documents straddling every boundary."""
    import random

    from common.job.tasks import plan_tasks
    from common.storage import S3Storage
    from tests.common.test_tasks import make_corpus

    client = s3.client()
    bucket = s3.new_bucket("ranges")
    data, expected = make_corpus(WIKI_READER, random.Random(9), documents=8)
    client.put_object(Bucket=bucket, Key="c/wiki_00", Body=data)
    import os
    os.environ.update(s3.env())
    storage = S3Storage(f"s3://{bucket}/c", s3.endpoint_url)
    for task_size in (9, 100, 700, 10 ** 9):
        found = []
        for task in plan_tasks(storage.list_inputs(), task_size):
            content = task_content(task, WIKI_READER.read(storage, task))
            found.extend([line for line in d.lines if line.strip()] for d in
                         WIKI_READER.parse(content, 0, ParseReport()))
        assert found == expected, task_size


def test_a_changed_object_fails_its_tasks_clearly(s3, tmp_path):
    """Listed, then overwritten before a worker reads it: its tasks are
    quarantined with the reason instead of mixing versions; the rest completes."""
    from tests.support.cluster import Cluster

    need_shared()
    client = s3.client()
    bucket = s3.new_bucket("changing")
    for path in sorted(WIKI.rglob("wiki_*")):
        client.upload_file(str(path), bucket, f"wiki/{path.relative_to(WIKI).as_posix()}")
    c = Cluster(f"s3://{bucket}/wiki", tmp_path / "out", [*JOB, "--s3-endpoint-url", s3.endpoint_url], tmp_path,
                env=s3.env())
    try:
        c.start_sink()
        c.start_ventilator()  # lists the objects (and their ETags) now
        deadline = __import__("time").monotonic() + 60
        while "ready" not in c.log_text():
            assert __import__("time").monotonic() < deadline, c.tail()
            __import__("time").sleep(0.2)
        changed = (WIKI / "AB" / "wiki_00").read_bytes().replace(b"the ", b"teh ")
        client.put_object(Bucket=bucket, Key="wiki/AB/wiki_00", Body=changed)
        c.start_worker()
        c.start_worker()
        assert c.wait() == 3, c.tail()  # exit status 3: tasks quarantined
        assert_only_the_unchanged_object_done(tmp_path / "out")
    finally:
        c.close()


def test_compressed_objects_are_whole_tasks(s3, tmp_path):
    import bz2
    import gzip

    import zstandard

    need_shared()
    client = s3.client()
    bucket = s3.new_bucket("compressed")
    client.put_object(Bucket=bucket, Key="c/AA/wiki_00.gz", Body=gzip.compress((WIKI / "AA" / "wiki_00").read_bytes()))
    client.put_object(Bucket=bucket, Key="c/AB/wiki_00.zst",
                      Body=zstandard.ZstdCompressor().compress((WIKI / "AB" / "wiki_00").read_bytes()))
    client.put_object(Bucket=bucket, Key="c/AC/small.bz2",
                      Body=bz2.compress(b'<doc id="1" url="u" title="t">\nt\n\nOne sentence here. And another one.\n</doc>\n'))
    output = tmp_path / "out"
    result = run_ventilator(f"s3://{bucket}/c", output, *JOB, "--workers", "2", "--s3-endpoint-url", s3.endpoint_url,
                            env=s3.env())
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((output / "summary.json").read_text())
    assert summary["tasks"] == 3 and summary["documents"] == 104
    from tests.support.helpers import check_shards
    assert check_shards(output)["records"] > 1000


def test_a_deleted_output_is_written_again(s3, local_run, tmp_path):
    """The S3 output is removed (as the 'another job' error suggests) while
    the sink's journal stays on this host: the same command writes every
    shard again instead of calling the job done from the journal."""
    client = s3.client()
    bucket = s3.new_bucket("again")
    output = f"s3://{bucket}/bert/run"
    args = [*JOB, "--workers", "2", "--s3-endpoint-url", s3.endpoint_url]
    assert run_ventilator(WIKI, output, *args, env=s3.env()).returncode == 0
    for obj in client.list_objects_v2(Bucket=bucket, Prefix="bert/run/")["Contents"]:
        client.delete_object(Bucket=bucket, Key=obj["Key"])
    again = run_ventilator(WIKI, output, *args, env=s3.env())
    assert again.returncode == 0, again.stderr[-3000:]
    assert "their tasks will be done again" in again.stderr
    download_all(client, bucket, "bert/run/", tmp_path / "dl")
    assert shard_digests(tmp_path / "dl") == shard_digests(local_run)


@pytest.mark.parametrize("flags,suffixes", [
    (["--output-format", "parquet", "--bin-size", "64"], (".parquet",)),
    (["--objective", "tokens", "--output-format", "megatron"], (".bin", ".idx")),
], ids=["parquet", "megatron"])
def test_other_formats_to_s3_are_the_local_bytes(s3, tmp_path, flags, suffixes):
    """Every writer's files go to S3 atomically, with the same bytes as a local run, and mlm-verify agrees."""
    import subprocess
    import sys

    from tests.support.helpers import REPO

    need_shared()
    local = tmp_path / "local"
    job = JOB if "tokens" not in flags else ["--vocab-file", VOCAB, "--task-size", "300K"]  # no passes to count
    result = run_ventilator(WIKI, local, *job, *flags, "--workers", "2")
    assert result.returncode == 0, result.stderr[-3000:]
    client = s3.client()
    bucket = s3.new_bucket("formats")
    result = run_ventilator(WIKI, f"s3://{bucket}/out", *job, *flags, "--workers", "2",
                            "--s3-endpoint-url", s3.endpoint_url, env=s3.env())
    assert result.returncode == 0, result.stderr[-3000:]
    keys = [o["Key"][len("out/"):] for o in client.list_objects_v2(Bucket=bucket, Prefix="out/").get("Contents", [])]
    files = sorted(k for k in keys if k.endswith(suffixes))
    # Every file of the format, Megatron's merged pairs included, with the local run's names and bytes.
    assert files and files == sorted(str(p.relative_to(local)) for p in local.rglob("*")
                                     if p.is_file() and p.name.endswith(suffixes))
    assert any(name.rsplit("/", 1)[-1].startswith("part-") for name in files)
    for key in files:
        body = client.get_object(Bucket=bucket, Key=f"out/{key}")["Body"].read()
        assert body == (local / key).read_bytes(), key
    verify = subprocess.run([sys.executable, "-m", "sink.verify", f"s3://{bucket}/out", "--s3-endpoint-url",
                             s3.endpoint_url], cwd=REPO, capture_output=True, text=True, timeout=120,
                            env={**__import__("os").environ, **s3.env()})
    assert verify.returncode == 0, verify.stderr
