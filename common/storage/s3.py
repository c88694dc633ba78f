"""S3 and S3-compatible stores through boto3.  Credentials come from boto3's standard chain (environment,
shared config, instance role), never from the job.  An object appears only when its upload completes, so a
shard is never visible half-written; reads are pinned to the ETag listed at planning (``IfMatch``)."""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Iterator

from common.job.tasks import InputFile
from common.storage.base import (
    REQUEST_TIMEOUT,
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

#: S3 (and radosgw) error codes that mean "later", not "never".
S3_BACKOFF_CODES = frozenset({"SlowDown", "QuotaExceeded", "ServiceUnavailable", "Throttling", "ThrottlingException",
                              "RequestLimitExceeded", "TooManyRequests", "XMinioStorageFull"})


def endpoint_problem(endpoint_url: str | None) -> str | None:
    """Why ``endpoint_url`` (``--s3-endpoint-url``) cannot be used, or None.  The URL travels in the job to every
    worker, lands in ``dataset_info.json`` and is quoted by botocore's errors: credentials in it
    (``http://KEY:SECRET@host``) would be spread everywhere, so they are refused, and the URL is never echoed."""
    if not endpoint_url:
        return None
    if not isinstance(endpoint_url, str):  # a recorded one (dataset_info.json) is any JSON value
        return "--s3-endpoint-url is not a URL (not a string)"
    # Any "@": a secret may hold "/", "?" or "#" (an AWS secret key does), which end urlsplit's host early, so
    # its user:secret@ would be read as a host and a port, and accepted.  An endpoint needs no "@".
    if "@" in endpoint_url:
        return ("--s3-endpoint-url holds a user name or password (user:secret@host): a job's endpoint "
                "travels to every worker and into the output, and errors quote it; boto3 reads credentials "
                "from its own chain (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, ~/.aws, an instance role)")
    try:
        parts = urllib.parse.urlsplit(endpoint_url)
        parts.port  # noqa: B018 - urlsplit checks the port only when it is asked for
    except ValueError:  # its words quote the text it could not read (a port, a host): not repeated
        return "--s3-endpoint-url is not a URL (its host or port cannot be read: http://HOST:PORT, http://[IPv6]:PORT)"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "--s3-endpoint-url must be an http:// or https:// URL naming a host (http://HOST:PORT)"
    return None


class S3Storage(Backend):
    """Amazon S3 or an S3-compatible store (``--s3-endpoint-url``)."""

    name = "s3"

    @classmethod
    def open(cls, uri: str, endpoint_url: str | None = None) -> S3Storage:
        return cls(uri, endpoint_url)

    @classmethod
    def busy(cls, error: BaseException) -> str | None:
        response = getattr(error, "response", None)
        code = response.get("Error", {}).get("Code") if isinstance(response, dict) else None
        return f"the store answered {code}" if code in S3_BACKOFF_CODES else None

    def __init__(self, uri: str, endpoint_url: str | None = None, retry: RetryPolicy | None = None):
        import boto3
        from botocore.config import Config

        problem = endpoint_problem(endpoint_url)
        if problem:
            raise StorageError(problem)
        self.bucket, self.prefix = split_bucket_uri(uri, "s3")
        self.retry = retry or RetryPolicy()
        self.unlisted: dict[str, str] = {}  # a listing is all or nothing on S3
        # botocore retries quickly and silently; RetryPolicy waits longer and logs.
        # botocore tries a request twice, each waiting at most half the operation's bound (--storage-timeout), so
        # one attempt of RetryPolicy's, which keeps the bound, cannot outlast it.
        half = self.retry.bound() / 2
        config = Config(retries={"total_max_attempts": 2, "mode": "standard"}, connect_timeout=min(10.0, half),
                        read_timeout=min(REQUEST_TIMEOUT, half))
        # A session of its own: credentials read now (the default session caches the first ones it found, and
        # is not thread-safe).
        self.client = boto3.session.Session().client("s3", endpoint_url=endpoint_url or None, config=config)

    def _key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix and name else (self.prefix or name)

    def uri(self, name: str) -> str:
        return f"s3://{self.bucket}/{self._key(name)}"

    # Inputs -----------------------------------------------------------------
    #: Keys per listing request (S3's own maximum; tests page smaller).
    list_page_size = 1000

    def _objects(self, what: str) -> Iterator[tuple[str, dict]]:
        """(name below the prefix, its listing entry) of every object, a page at a time.  Each page is one
        request, retried on its own (a failure on page 900 of a million-object listing does not start it
        over), and dropped once read: the listing is never held as pages beside what is kept of it."""
        prefix = f"{self.prefix}/" if self.prefix else ""
        request = {"Bucket": self.bucket, "Prefix": prefix, "MaxKeys": self.list_page_size}
        pages = 0
        while True:
            page = self.retry.run(f"list {self.uri('')} (page {pages + 1})",
                                  lambda: self.client.list_objects_v2(**request))
            pages += 1
            for obj in page.get("Contents", ()):
                yield obj["Key"][len(prefix):], obj
            if not page.get("IsTruncated"):
                return
            request["ContinuationToken"] = page["NextContinuationToken"]

    def list_inputs(self) -> list[InputFile]:
        """The objects below the prefix, as a directory's files; if there are none, the object the prefix names
        (``s3://bucket/dir/file``: one file, path "", as a local file given as --data)."""
        found = [InputFile(name, obj["Size"], obj["ETag"]) for name, obj in self._objects("list")
                 if name and not name.endswith("/") and not ignored(name)]
        if not found and self.prefix:
            single = self._head(self.prefix)
            if single is not None:
                return [InputFile("", int(single["ContentLength"]), single["ETag"])]
        found.sort(key=lambda f: f.path)  # S3 lists in UTF-8 byte order, which is code point order: no work
        return found

    def _head(self, key: str) -> dict | None:
        """The object ``key``'s metadata (HEAD), or None if there is no such object."""
        from botocore.exceptions import ClientError

        def head() -> dict | None:
            try:
                return self.client.head_object(Bucket=self.bucket, Key=key)
            except ClientError as error:
                if error.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NotFound"):
                    return None
                raise

        return self.retry.run(f"HEAD s3://{self.bucket}/{key}", head)

    def _get(self, relative: str, version: str, byte_range: str | None) -> bytes:
        from botocore.exceptions import ClientError

        def get() -> bytes:
            kwargs = {"Bucket": self.bucket, "Key": self._key(relative), "IfMatch": version}
            if byte_range:
                kwargs["Range"] = byte_range
            try:
                return self.client.get_object(**kwargs)["Body"].read()
            except ClientError as error:
                code = error.response.get("Error", {}).get("Code", "")
                if code in ("PreconditionFailed", "412"):
                    raise VersionChanged(f"{self.uri(relative)}: object changed since it was listed "
                                         f"(ETag {version})") from error
                if code in ("InvalidRange", "416"):
                    return b""
                if code in ("NoSuchKey", "404"):
                    raise StorageError(f"{self.uri(relative)}: no such object") from error
                raise

        return self.retry.run(f"GET {self.uri(relative)} {byte_range or ''}", get,
                              permanent=(VersionChanged, StorageError))

    def open_reader(self, relative: str, version: str) -> RangeReader:
        return RangeReader(lambda offset, length: self._get(
            relative, version, f"bytes={offset}-{offset + length - 1}") if length > 0 else b"")

    def read_all(self, relative: str, version: str) -> bytes:
        return self._get(relative, version, None)

    # Outputs ----------------------------------------------------------------
    def open_atomic(self, name: str) -> AtomicWriter:
        from boto3.s3.transfer import TransferConfig

        handle = spool_file()
        transfer = TransferConfig(multipart_threshold=64 * 1024 * 1024, multipart_chunksize=64 * 1024 * 1024)

        def commit() -> str:
            handle.flush()
            handle.close()
            self.retry.run(f"upload {self.uri(name)}", lambda: self.client.upload_file(
                handle.name, self.bucket, self._key(name), Config=transfer))
            os.unlink(handle.name)
            return self.uri(name)

        return AtomicWriter(handle, commit, handle.name)

    def put_bytes(self, name: str, data: bytes) -> str:
        self.retry.run(f"PUT {self.uri(name)}", lambda: self.client.put_object(
            Bucket=self.bucket, Key=self._key(name), Body=data))
        return self.uri(name)

    def create_if_absent(self, name: str, data: bytes) -> bool:
        """PUT ``data`` as ``name`` unless the object exists (a conditional PUT, ``If-None-Match: *``: AWS S3 and
        Ceph radosgw refuse it with 412 when the key exists, so of two creators exactly one wins); whether
        this call wrote it.  A store that ignores the condition would overwrite: use one that honours it."""
        from botocore.exceptions import ClientError

        def put() -> bool:
            try:
                self.client.put_object(Bucket=self.bucket, Key=self._key(name), Body=data, IfNoneMatch="*")
                return True
            except ClientError as error:
                code = error.response.get("Error", {}).get("Code")
                if code in ("PreconditionFailed", "412"):
                    return False
                if code in ("NotImplemented", "501"):
                    raise StorageError(f"{self.uri(name)}: the store does not do conditional writes "
                                       "(If-None-Match)") from error
                raise  # 409 ConditionalRequestConflict (a racing PUT) and transport errors: retried

        return self.retry.run(f"PUT {self.uri(name)} (if absent)", put, permanent=(StorageError,))

    def remove(self, name: str) -> None:
        """Delete the object (nothing happens if there is none)."""
        self.retry.run(f"DELETE {self.uri(name)}", lambda: self.client.delete_object(
            Bucket=self.bucket, Key=self._key(name)))

    def get_bytes(self, name: str, limit: int | None = None) -> bytes | None:
        """The object's bytes (its first ``limit`` only, if given: a ranged GET); None if there is none."""
        from botocore.exceptions import ClientError

        ranged = {} if limit is None else {"Range": f"bytes=0-{max(limit, 1) - 1}"}

        def get():
            try:
                return self.client.get_object(Bucket=self.bucket, Key=self._key(name), **ranged)["Body"].read()
            except ClientError as error:
                code = error.response.get("Error", {}).get("Code")
                if code in ("NoSuchKey", "404"):
                    return None
                if code in ("InvalidRange", "416"):  # a ranged GET of an empty object
                    return b""
                raise

        return self.retry.run(f"GET {self.uri(name)}", get)

    def list_outputs(self) -> list[str]:
        return sorted(name for name, _obj in self._objects("list"))

    def output_sizes(self) -> dict[str, int]:
        """Every object below the prefix and its size, from the listing itself (no HEAD per object)."""
        return {name: int(obj["Size"]) for name, obj in self._objects("list")}

    def remove_temporaries(self) -> int:
        """Nothing to do on the store: an unfinished upload never becomes an
        object (abort leftover multipart uploads with a bucket lifecycle rule)."""
        return 0
