"""The local S3 server (scripts/s3-server.sh + tests/support/s3_server.py) really speaks S3."""

import os
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from boto3.s3.transfer import TransferConfig
from botocore.exceptions import ClientError

from tests.support.s3_server import SCRIPT, S3Server, available

pytestmark = pytest.mark.s3

MiB = 1024 * 1024
ALL_USERS = "http://acs.amazonaws.com/groups/global/AllUsers"


@pytest.fixture(scope="module")
def s3():
    reason = available()
    if reason:
        pytest.skip(reason)
    with S3Server() as server:
        yield server


def _pids_mentioning(text: str) -> list[int]:
    """Live processes whose command line contains text."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # exited meanwhile
            continue
        if text in cmdline:
            pids.append(int(entry.name))
    return pids


def test_multipart_upload_ranged_get_private_acl_delete(s3, tmp_path):
    client = s3.client()
    bucket, key = "mlm-s3-server-test", "shards/part-00000.tfrecord"
    client.create_bucket(Bucket=bucket)

    data = os.urandom(12 * MiB)
    src = tmp_path / "blob"
    src.write_bytes(data)
    client.upload_file(
        str(src), bucket, key,
        Config=TransferConfig(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB),
    )

    head = client.head_object(Bucket=bucket, Key=key)
    assert head["ContentLength"] == len(data)
    assert head["ETag"].strip('"').endswith("-3"), "expected a 3-part multipart upload (5+5+2 MiB)"

    # A range that straddles the boundary between parts 1 and 2.
    first, last = 5 * MiB - 1000, 7 * MiB + 12345
    got = client.get_object(Bucket=bucket, Key=key, Range=f"bytes={first}-{last}")
    assert got["ContentRange"] == f"bytes {first}-{last}/{len(data)}"
    assert got["Body"].read() == data[first:last + 1]

    acl = client.get_object_acl(Bucket=bucket, Key=key)
    assert not [g for g in acl["Grants"] if g["Grantee"].get("URI") == ALL_USERS], acl["Grants"]
    # ...and an anonymous request is indeed refused.
    no_proxy = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with pytest.raises(urllib.error.HTTPError) as refused:
        no_proxy.open(f"{s3.endpoint_url}/{bucket}/{key}", timeout=10)
    assert refused.value.code == 403

    client.delete_object(Bucket=bucket, Key=key)
    with pytest.raises(ClientError) as gone:
        client.head_object(Bucket=bucket, Key=key)
    assert gone.value.response["Error"]["Code"] in ("404", "NoSuchKey")
    client.delete_bucket(Bucket=bucket)


def test_env_has_what_a_subprocess_needs(s3):
    env = s3.env()
    assert env["S3_ENDPOINT_URL"] == s3.endpoint_url == f"http://127.0.0.1:{s3.port}"
    assert env["AWS_ACCESS_KEY_ID"] == s3.access_key
    assert env["AWS_SECRET_ACCESS_KEY"] == s3.secret_key
    assert env["AWS_DEFAULT_REGION"] == s3.region == "us-east-1"


def test_start_again_reuses_and_stop_leaves_nothing():
    reason = available()
    if reason:
        pytest.skip(reason)
    with S3Server() as server:
        workdir = server.workdir
        assert _pids_mentioning(str(workdir)), "no daemons found for the running server"
        # A second start on a running DIR reuses it and prints the same exports.
        again = subprocess.run(
            [str(SCRIPT), "start", str(workdir), str(server.port)],
            capture_output=True, text=True, timeout=60, check=True,
        )
        assert f"export S3_ENDPOINT_URL={server.endpoint_url}" in again.stdout.splitlines()
    assert _pids_mentioning(str(workdir)) == []
    assert not workdir.exists()
    # stop on an already-stopped DIR is a no-op.
    subprocess.run([str(SCRIPT), "stop", str(workdir)], check=True, timeout=60)
