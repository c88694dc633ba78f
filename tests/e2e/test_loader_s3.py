"""The loader reading an output on S3 (Ceph radosgw) or on GCS (fake-gcs-server): the same batches as from a
directory."""

import pytest

from loader.client import LoaderClient
from tests.support.loader_helpers import LoaderProcess

pytestmark = [pytest.mark.e2e]


@pytest.mark.s3
def test_an_output_on_s3_serves_the_same_batches(s3, loader_dataset):
    client = s3.client()
    bucket = s3.new_bucket("loader")
    for path in loader_dataset.iterdir():
        client.upload_file(str(path), bucket, f"bert/{path.name}")
    batches = {}
    for where, extra, env in ((str(loader_dataset), [], None),
                              (f"s3://{bucket}/bert", ["--s3-endpoint-url", s3.endpoint_url], s3.env())):
        with LoaderProcess(where, "--batch-size", 128, *extra, env=env) as server:
            with LoaderClient(server.address, rank=1, world_size=2, timeout_seconds=60) as loader:
                batches[where.startswith("s3")] = [loader.next_batch() for _ in range(12)]
    for local, remote in zip(batches[False], batches[True]):
        assert (local.record_ids == remote.record_ids).all()
        assert (local.features["input_ids"] == remote.features["input_ids"]).all()


@pytest.mark.gcs
def test_an_output_on_gcs_serves_the_same_batches(gcs, loader_dataset):
    bucket = gcs.new_bucket("loader")
    gcs.upload_tree(bucket, loader_dataset, "bert")
    batches = []
    for where, env in ((str(loader_dataset), None), (f"gs://{bucket}/bert", gcs.env())):
        with LoaderProcess(where, "--batch-size", 128, env=env) as server:
            with LoaderClient(server.address, rank=1, world_size=2, timeout_seconds=60) as loader:
                batches.append([loader.next_batch() for _ in range(12)])
    for local, remote in zip(*batches):
        assert (local.record_ids == remote.record_ids).all()
        assert (local.features["input_ids"] == remote.features["input_ids"]).all()
