"""Google Cloud Storage (``gs://bucket/prefix``) through Google's own client, ``google-cloud-storage``.

The guarantees of the S3 backend, in GCS's own terms (docs/design.md, "Storage"):

- an input's version is its *generation*, listed at planning; every read names it (``generation=`` and
  ``ifGenerationMatch=``), so an object replaced since is refused (VersionChanged), never half-read;
- reads are ranged GETs of the stored bytes (``raw_download``: an object uploaded with
  ``Content-Encoding: gzip`` is not transcoded, so compressed inputs stay whole tasks of their listed size);
  whole reads are checked against the object's CRC32C by the client;
- a shard is spooled to a local file and uploaded in one request (or one resumable session for a large
  one): GCS makes an object visible only when its upload is finalized, so never half-written; uploads carry
  their CRC32C, which GCS checks;
- nothing sets an ACL: objects take the bucket's own policy (private unless the bucket's owner says otherwise);
- one retry layer, the project's (:class:`RetryPolicy`, 429, 408, 5xx and transport errors, with backoff and a
  log line); the client's own retries are off so a failing request is retried alone and visibly; each request
  waits at most the time the operation has left of ``--storage-timeout`` (the client's own is 60 s a request);
- a 404 whose bucket is missing says "no such bucket" (asked once, by a listing of one name);
- a prefix that lists nothing but names an object is that one object (``--data gs://bucket/dir/file``);
- listing pages (1,000 names a request, only the fields needed), each page retried on its own and dropped once
  read.

Credentials come from Application Default Credentials as Google's clients find them; ``STORAGE_EMULATOR_HOST``
points the client at an emulator (anonymous credentials), as it does any Google client.  The job's
``--s3-endpoint-url`` does not apply.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from common.job.tasks import InputFile
from common.storage.base import (
    AtomicWriter,
    Backend,
    RangeReader,
    RetryPolicy,
    StorageError,
    VersionChanged,
    ignored,
    split_bucket_uri,
    spool_file,
)

#: HTTP statuses that mean "later": retried (with backoff) and, past the retries, waited out by the worker.
_LATER = frozenset({408, 429, 500, 502, 503, 504})
#: Files past this size are uploaded by a resumable session in chunks of this size (the client's default is
#: 100 MiB); smaller ones in one multipart request.
UPLOAD_CHUNK = 32 * 1024 * 1024
#: google-cloud-storage's own switch for its background bucket-metadata fetches.
_NO_BUCKET_METADATA = "DISABLE_GCS_PYTHON_CLIENT_OTEL_BUCKET_METADATA"


def _client():
    """A client as Google's libraries make one: ``STORAGE_EMULATOR_HOST`` or Application Default Credentials."""
    try:
        from google.auth.exceptions import DefaultCredentialsError
        from google.cloud import storage
    except ImportError:
        raise StorageError("gs:// needs Google's client: pip install 'mlm-pipeline[gcs]' "
                           "(google-cloud-storage)") from None

    try:
        return storage.Client()
    except DefaultCredentialsError as error:
        raise StorageError(f"gs://: no Google credentials (Application Default Credentials: run `gcloud auth "
                           f"application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS): "
                           f"{str(error).splitlines()[0]}") from None


class GCSStorage(Backend):
    name = "gs"

    #: Names per listing request (GCS's own maximum; tests page smaller).
    list_page_size = 1000

    @classmethod
    def open(cls, uri: str, endpoint_url: str | None = None) -> GCSStorage:
        return cls(uri)

    @classmethod
    def busy(cls, error: BaseException) -> str | None:
        if not type(error).__module__.startswith("google."):
            return None
        code = getattr(error, "code", None)
        return f"the store answered {code} {type(error).__name__}" if code in (429, 503) else None

    def __init__(self, uri: str, retry: RetryPolicy | None = None, client=None):
        # The client (3.x) otherwise fetches each bucket's metadata in a background thread, for its tracing
        # spans: a request the job never asked for, which a service account limited to objects is refused.
        os.environ.setdefault(_NO_BUCKET_METADATA, "true")
        self.bucket_name, self.prefix = split_bucket_uri(uri, self.name)
        self.retry = retry or RetryPolicy()
        self.unlisted: dict[str, str] = {}  # a listing is all or nothing on GCS
        self.client = client or _client()
        self.bucket = self.client.bucket(self.bucket_name)
        self._bucket_seen = False  # a listing found the bucket (so a 404 is the object's)

    def _key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix and name else (self.prefix or name)

    def uri(self, name: str) -> str:
        return f"gs://{self.bucket_name}/{self._key(name)}"

    def _call(self, what: str, operation, not_found=None):
        """``operation(timeout)`` under the retry policy, each request waiting at most the time the policy has
        left (``timeout``, seconds): 4xx other than 408/429 are final (one line; a 404 is ``not_found()`` if
        given, or "no such bucket" when the bucket is what is missing), the rest are retried."""
        from google.api_core import exceptions

        def attempt(timeout: float):
            try:
                return operation(timeout)
            except exceptions.NotFound as error:
                if not self._bucket_exists(timeout):
                    raise StorageError(f"{what}: no such bucket: {self.bucket_name}") from None
                if not_found is not None:
                    return not_found()
                raise StorageError(f"{what}: not found ({_message(error)})") from None
            except exceptions.ClientError as error:
                if error.code in _LATER:
                    raise
                raise StorageError(f"{what}: {error.code} {_message(error)}") from None

        return self.retry.run(what, attempt, permanent=(StorageError,), timed=True)

    def _bucket_exists(self, timeout: float) -> bool:
        """Whether the bucket is there, asked once a 404 came (a listing of one name: the permission a job
        needs anyway, unlike the bucket's metadata); remembered once it is."""
        if not self._bucket_seen:
            from google.api_core import exceptions

            try:
                next(self.client.list_blobs(self.bucket_name, max_results=1, retry=None, timeout=timeout,
                                            fields="items(name)").pages, None)
            except exceptions.NotFound:
                return False
            except exceptions.ClientError:  # not allowed to list (403): it cannot say; the object's 404 stands
                return True
            self._bucket_seen = True
        return True

    # Inputs -----------------------------------------------------------------
    def _objects(self) -> Iterator[tuple[str, int, int]]:
        """(name below the prefix, size, generation) of every object, a page at a time: each page one request,
        retried on its own (a failure on page 900 of a million-object listing does not start it over), and
        dropped once read."""
        prefix = f"{self.prefix}/" if self.prefix else ""
        token: str | None = None
        pages = 0
        while True:
            def page(timeout: float, token=token):
                listing = self.client.list_blobs(self.bucket_name, prefix=prefix, page_size=self.list_page_size,
                                                 page_token=token, retry=None, timeout=timeout,
                                                 fields="items(name,size,generation),nextPageToken")
                items = [(blob.name, int(blob.size or 0), int(blob.generation or 0)) for blob in next(listing.pages)]
                return items, listing.next_page_token

            items, token = self._call(f"list {self.uri('')} (page {pages + 1})", page)
            pages += 1
            for name, size, generation in items:
                yield name[len(prefix):], size, generation
            if not token:
                return

    def list_inputs(self) -> list[InputFile]:
        """The objects below the prefix, as a directory's files; if there are none, the object the prefix names
        (``gs://bucket/dir/file``: one file, path "", as a local file given as --data)."""
        found = [InputFile(name, size, str(generation)) for name, size, generation in self._objects()
                 if name and not name.endswith("/") and not ignored(name)]
        if not found and self.prefix:
            single = self._call(f"GET {self.uri('')} (metadata)", lambda timeout: self.bucket.get_blob(
                self.prefix, retry=None, timeout=timeout), not_found=lambda: None)
            if single is not None:
                return [InputFile("", int(single.size or 0), str(single.generation))]
        found.sort(key=lambda f: f.path)  # GCS lists in UTF-8 byte order, which is code point order: no work
        return found

    def _get(self, relative: str, version: str, start: int | None = None, end: int | None = None) -> bytes:
        """The stored bytes of ``relative`` at generation ``version`` (``start``..``end`` inclusive, if given)."""
        try:
            generation = int(version)
        except ValueError:
            raise StorageError(f"{self.uri(relative)}: {version!r} is not a GCS generation") from None
        blob = self.bucket.blob(self._key(relative), generation=generation)

        def changed(timeout: float = 60.0):
            """The pinned generation is gone: replaced (refused) or deleted."""
            current = self.bucket.get_blob(self._key(relative), retry=None, timeout=timeout)
            if current is None:
                raise StorageError(f"{self.uri(relative)}: no such object")
            raise VersionChanged(f"{self.uri(relative)}: object changed since it was listed "
                                 f"(generation {version} -> {current.generation})")

        def get(timeout: float) -> bytes:
            from google.api_core import exceptions

            try:
                return blob.download_as_bytes(start=start, end=end, raw_download=True, if_generation_match=generation,
                                              retry=None, timeout=timeout)
            except exceptions.PreconditionFailed:
                return changed(timeout)
            except exceptions.RequestRangeNotSatisfiable:  # past the end, or an empty object
                return b""

        where = f"GET {self.uri(relative)}" + (f" bytes={start}-{end}" if start is not None else "")
        return self._call(where, get, not_found=changed)

    def open_reader(self, relative: str, version: str) -> RangeReader:
        return RangeReader(lambda offset, length: self._get(relative, version, offset, offset + length - 1)
                           if length > 0 else b"")

    def read_all(self, relative: str, version: str) -> bytes:
        return self._get(relative, version)

    # Outputs ----------------------------------------------------------------
    def _blob(self, name: str):
        blob = self.bucket.blob(self._key(name))
        blob.chunk_size = UPLOAD_CHUNK
        return blob

    def open_atomic(self, name: str) -> AtomicWriter:
        handle = spool_file()

        def commit() -> str:
            handle.flush()
            handle.close()
            self._call(f"upload {self.uri(name)}", lambda timeout: self._blob(name).upload_from_filename(
                handle.name, checksum="crc32c", retry=None, timeout=timeout))
            os.unlink(handle.name)
            return self.uri(name)

        return AtomicWriter(handle, commit, handle.name)

    def put_bytes(self, name: str, data: bytes) -> str:
        self._call(f"PUT {self.uri(name)}", lambda timeout: self._blob(name).upload_from_string(
            data, content_type="application/octet-stream", checksum="crc32c", retry=None, timeout=timeout))
        return self.uri(name)

    def create_if_absent(self, name: str, data: bytes) -> bool:
        """Write ``name`` only if there is no such object (``ifGenerationMatch=0``): True if this call made
        it.  A retry of a create whose answer was lost finds its own bytes there, and says True."""
        from google.api_core import exceptions

        attempts = 0

        def create(timeout: float) -> bool:
            nonlocal attempts
            attempts += 1
            try:
                self._blob(name).upload_from_string(data, content_type="application/octet-stream",
                                                    checksum="crc32c", if_generation_match=0, retry=None,
                                                    timeout=timeout)
                return True
            except exceptions.PreconditionFailed:
                return attempts > 1 and self.get_bytes(name) == data

        return self._call(f"create {self.uri(name)}", create)

    def remove(self, name: str) -> None:
        """Delete the object (nothing happens if there is none)."""
        self._call(f"DELETE {self.uri(name)}", lambda timeout: self.bucket.blob(self._key(name)).delete(
            retry=None, timeout=timeout), not_found=lambda: None)

    def get_bytes(self, name: str, limit: int | None = None) -> bytes | None:
        """The object's bytes (its first ``limit`` only, if given: a ranged GET); None if there is none."""
        from google.api_core import exceptions

        end = None if limit is None else max(limit, 1) - 1

        def get(timeout: float) -> bytes:
            try:
                return self.bucket.blob(self._key(name)).download_as_bytes(
                    start=None if end is None else 0, end=end, raw_download=True, retry=None, timeout=timeout)
            except exceptions.RequestRangeNotSatisfiable:  # a ranged GET of an empty object
                return b""

        return self._call(f"GET {self.uri(name)}", get, not_found=lambda: None)

    def list_outputs(self) -> list[str]:
        return sorted(name for name, _size, _generation in self._objects())

    def output_sizes(self) -> dict[str, int]:
        """Every object below the prefix and its size, from the listing itself (no metadata GET per object)."""
        return {name: size for name, size, _generation in self._objects()}

    def remove_temporaries(self) -> int:
        """Nothing to do on the store: an unfinished upload never becomes an object (a resumable session left
        behind expires by itself within a week)."""
        return 0


def _message(error) -> str:
    """The first line of a google.api_core error's message, without the request it echoes."""
    return (getattr(error, "message", None) or str(error)).splitlines()[0][:300]
