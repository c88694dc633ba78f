"""The gs:// backend against a real GCS emulator (fake-gcs-server, scripts/gcs-server.sh): the S3 backend's
guarantees in GCS's terms (common/storage/gcs.py), each shown on the wire."""

from __future__ import annotations

import gzip
import random

import pytest

from common.job.tasks import plan_tasks
from common.readers import ParseReport, reader_named
from common.readers.content import task_content
from common.storage import (
    GCSStorage,
    LocalStorage,
    RetryPolicy,
    S3Storage,
    StorageError,
    VersionChanged,
    backends,
    busy_reason,
    open_storage,
)
from tests.common.test_tasks import make_corpus
from tests.support.faulty_proxy import FaultyProxy

pytestmark = [pytest.mark.gcs]

WIKI_READER = reader_named("wikiextractor")()
#: GCS's JSON API errors, for the proxy to answer with.
GCS_ERRORS = [(429, "rateLimitExceeded", "The rate of change requests to the object is too high."),
              (503, "backendError", "Backend Error")]


@pytest.fixture
def bucket(gcs, monkeypatch):
    """A fresh bucket, and this process pointed at the emulator as Google's clients find one."""
    for name, value in gcs.env().items():
        monkeypatch.setenv(name, value)
    return gcs.new_bucket("t")


def test_the_scheme_picks_the_backend(bucket, tmp_path):
    assert {"file", "s3", "gs"} <= set(backends())
    assert isinstance(open_storage(f"gs://{bucket}/p"), GCSStorage)
    assert isinstance(open_storage("s3://b/p"), S3Storage)
    assert isinstance(open_storage(str(tmp_path)), LocalStorage)
    with pytest.raises(StorageError, match=r"az://x/y: no storage backend for az:// \(installed: .*gs://"):
        open_storage("az://x/y")
    with pytest.raises(StorageError, match="expected gs://bucket/prefix"):
        open_storage("gs://")


def test_byte_ranges_cover_every_document_once(bucket, gcs):
    """Ranged GETs of the stored bytes, split sizes from a few bytes to more than the object."""
    data, expected = make_corpus(WIKI_READER, random.Random(9), documents=8)
    gcs.client().bucket(bucket).blob("c/wiki_00").upload_from_string(data)
    storage = open_storage(f"gs://{bucket}/c")
    for task_size in (9, 700, 10 ** 9):
        found = []
        for task in plan_tasks(storage.list_inputs(), task_size):
            content = task_content(task, WIKI_READER.read(storage, task))
            found.extend([line for line in d.lines if line.strip()] for d in WIKI_READER.parse(content, 0, ParseReport()))
        assert found == expected, task_size


def test_a_read_is_pinned_to_the_generation_listed(bucket, gcs):
    """Replaced after listing: refused, on the first range and on a range after it; deleted: no such object."""
    blobs = gcs.client().bucket(bucket)
    blobs.blob("c/a").upload_from_string(b"first version " * 100)
    storage = open_storage(f"gs://{bucket}/c")
    (listed,) = storage.list_inputs()
    assert listed.version == str(blobs.get_blob("c/a").generation)
    with storage.open_reader(listed.path, listed.version) as reader:
        assert reader.read_at(0, 5) == b"first"
        assert reader.read_at(10 ** 6, 10) == b""  # past the end
        blobs.blob("c/a").upload_from_string(b"second version " * 100)
        with pytest.raises(VersionChanged, match=f"gs://{bucket}/c/a: object changed since it was listed "
                                                 f"\\(generation {listed.version} -> "):
            reader.read_at(5, 100)
    with pytest.raises(VersionChanged):
        storage.read_all(listed.path, listed.version)
    current = storage.list_inputs()[0]
    assert storage.read_all(current.path, current.version) == b"second version " * 100
    blobs.blob("c/a").delete()
    with pytest.raises(StorageError, match="no such object") as raised:
        storage.read_all(current.path, current.version)
    assert not isinstance(raised.value, VersionChanged)


def test_compressed_objects_are_read_as_stored(bucket, gcs):
    """An object uploaded with Content-Encoding: gzip is not decompressed on the way (no transcoding): its
    bytes are those listed, so a compressed input is one task of its listed size."""
    text = b"<doc id=\"1\">\nTitle\n\nSome text here.\n</doc>\n" * 50
    blob = gcs.client().bucket(bucket).blob("c/wiki_00.gz")
    blob.content_encoding = "gzip"
    blob.upload_from_string(gzip.compress(text, mtime=0))
    storage = open_storage(f"gs://{bucket}/c")
    (listed,) = storage.list_inputs()
    stored = storage.read_all(listed.path, listed.version)
    assert len(stored) == listed.size and gzip.decompress(stored) == text
    (task,) = plan_tasks([listed], 10)
    assert (task.start, task.end, task.compression) == (0, listed.size, "gzip")


def test_a_shard_is_visible_only_once_committed(bucket, gcs, monkeypatch):
    """Spooled locally, uploaded whole (a resumable session in chunks past UPLOAD_CHUNK), private; an aborted
    writer leaves nothing; create_if_absent makes an object once."""
    import common.storage.gcs as gcs_module

    monkeypatch.setattr(gcs_module, "UPLOAD_CHUNK", 256 * 1024)
    storage = open_storage(f"gs://{bucket}/out")
    payload = random.Random(1).randbytes(700 * 1024)  # three chunks of a resumable upload
    with storage.open_atomic("sub/part-0") as writer:
        writer.file.write(payload)
        writer.file.flush()
        assert storage.list_outputs() == []
        assert writer.commit() == f"gs://{bucket}/out/sub/part-0"
    with storage.open_atomic("part-1") as writer:
        writer.file.write(b"never")  # aborted: not committed
    assert storage.output_sizes() == {"sub/part-0": len(payload)}
    assert storage.get_bytes("sub/part-0") == payload and storage.get_bytes("sub/part-0", limit=3) == payload[:3]
    assert storage.get_bytes("missing") is None
    storage.put_bytes("empty", b"")
    assert storage.get_bytes("empty", limit=10) == b""
    blob = gcs.client().bucket(bucket).get_blob("out/sub/part-0")
    acl = list(blob.acl)
    assert acl and not [entry for entry in acl if entry["entity"] in ("allUsers", "allAuthenticatedUsers")]
    assert storage.create_if_absent("lock", b"mine") is True
    assert storage.create_if_absent("lock", b"theirs") is False
    assert storage.get_bytes("lock") == b"mine"
    storage.remove("lock")
    storage.remove("lock")  # gone already: nothing happens
    assert storage.get_bytes("lock") is None and storage.create_if_absent("lock", b"next") is True
    assert storage.remove_temporaries() == 0


def test_listing_pages_and_a_failing_page_is_retried_alone(bucket, gcs):
    names = [f"corpus/{i % 7}/part-{i:04d}.txt" for i in range(50)] + ["corpus/ü-last.txt", "corpus/_SUCCESS"]
    blobs = gcs.client().bucket(bucket)
    for number, name in enumerate(names):
        blobs.blob(name).upload_from_string(b"x" * (number + 1))
    # Requests 4 and 5 are the fourth page's request and its first retry: the project's retry gets that
    # page alone, and does not start the listing over.
    with FaultyProxy(gcs.url, fail_every=0, fail_requests=frozenset({4, 5}), errors=GCS_ERRORS) as proxy:
        storage = GCSStorage(f"gs://{bucket}/corpus", RetryPolicy(attempts=3, first_delay=0.05),
                             client=gcs.client(proxy.url))
        storage.list_page_size = 7
        listed = storage.list_inputs()
        pages = -(-len(names) // 7)
        assert proxy.failed == 2 and proxy.requests == pages + 2, "a page retried alone, not the listing"
    expected = sorted(n.removeprefix("corpus/") for n in names if not n.endswith("_SUCCESS"))
    assert [f.path for f in listed] == expected
    sizes = {name.removeprefix("corpus/"): number + 1 for number, name in enumerate(names)}
    assert all(f.size == sizes[f.path] and f.version.isdigit() for f in listed)
    assert storage.output_sizes() == sizes


def test_throttling_and_server_errors_are_retried_and_client_errors_are_not(bucket, gcs):
    """429 and 503 on every other request: every read and write still succeeds.  A 403 is final at once."""
    with FaultyProxy(gcs.url, fail_every=2, errors=GCS_ERRORS) as proxy:
        storage = GCSStorage(f"gs://{bucket}/r", RetryPolicy(attempts=4, first_delay=0.01),
                             client=gcs.client(proxy.url))
        storage.put_bytes("a", b"abcdef")
        (listed,) = storage.list_inputs()
        assert storage.open_reader("a", listed.version).read_at(2, 3) == b"cde"
        assert storage.get_bytes("a") == b"abcdef"
        assert (proxy.failed, proxy.requests) == (3, 7)  # the list and both GETs failed once each
    with FaultyProxy(gcs.url, fail_every=1, errors=[(403, "forbidden", "no access")]) as proxy:
        storage = GCSStorage(f"gs://{bucket}/r", RetryPolicy(attempts=4, first_delay=0.01),
                             client=gcs.client(proxy.url))
        with pytest.raises(StorageError, match=f"GET gs://{bucket}/r/a: 403 "):
            storage.get_bytes("a")
        assert proxy.requests == 1


def test_the_worker_waits_out_a_throttled_store():
    """A 429 past the retries is "later", not a fault of the task (worker/backoff.py asks each backend)."""
    exceptions = pytest.importorskip("google.api_core.exceptions")
    from worker.backoff import no_room

    try:
        try:
            raise exceptions.TooManyRequests("slow down")
        except exceptions.TooManyRequests as error:
            raise StorageError("GET gs://b/x: 429") from error
    except StorageError as wrapped:
        assert no_room(wrapped) == "the store answered 429 TooManyRequests"
    assert busy_reason(exceptions.NotFound("gone")) is None


def test_parquet_footers_and_row_groups_are_read_by_range(bucket, gcs, tmp_path):
    """Footers of several objects read at once (the reader's threads share the storage's client), row groups
    by range: every task's documents are those of the local files."""
    from tests.support.helpers import need_shared
    from tests.support.web_corpora import wiki_parquet

    need_shared()
    paths = wiki_parquet(tmp_path / "data", files=3, row_group_size=6)
    gcs.upload_tree(bucket, tmp_path / "data", "d")
    remote, local = open_storage(f"gs://{bucket}/d"), LocalStorage(str(paths[0].parent))
    reader = reader_named("parquet")()
    remote_files = remote.list_inputs()
    reader.check_inputs(remote, remote_files)
    remote_tasks = list(reader.plan(remote_files, 100_000, remote))
    local_tasks = list(reader.plan(local.list_inputs(), 100_000, local))
    assert [(t.path, t.start, t.end) for t in remote_tasks] == [(t.path, t.start, t.end) for t in local_tasks]
    assert len(remote_tasks) > 3
    for remote_task, local_task in zip(remote_tasks, local_tasks):
        found = [(d.id, d.lines) for d in reader.documents(remote_task, reader.read(remote, remote_task),
                                                           ParseReport())]
        assert found and found == [(d.id, d.lines) for d in reader.documents(
            local_task, reader.read(local, local_task), ParseReport())]
