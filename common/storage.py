"""One storage layer for local directories and S3 (or an S3-compatible store).

Inputs are listed and read by byte range; outputs are written atomically: a
shard is visible under its final name only once complete (temporary name and
rename locally; a finished upload on S3, where an object only appears when
its upload completes).  S3 credentials come from boto3's standard chain
(environment, shared config, instance role), never from the job.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from dataclasses import dataclass
from typing import BinaryIO, Callable, Iterator, Protocol

from common.tasks import InputFile

log = logging.getLogger(__name__)

_IGNORED_PREFIXES = (".", "_")


class Storage(Protocol):
    """What the roles need of a place holding a corpus or an output:
    :class:`LocalStorage` and :class:`S3Storage` are the two."""

    unlisted: dict[str, str]  # inputs that could not even be listed, with why

    def uri(self, name: str) -> str: ...
    def list_inputs(self) -> list[InputFile]: ...
    def open_reader(self, relative: str, version: str) -> "RangeReader": ...
    def read_all(self, relative: str, version: str) -> bytes: ...
    def open_atomic(self, name: str) -> "AtomicWriter": ...
    def put_bytes(self, name: str, data: bytes) -> str: ...
    def create_if_absent(self, name: str, data: bytes) -> bool: ...
    def remove(self, name: str) -> None: ...
    def get_bytes(self, name: str, limit: int | None = None) -> bytes | None: ...
    def list_outputs(self) -> list[str]: ...
    def output_sizes(self) -> dict[str, int]: ...
    def remove_temporaries(self) -> int: ...


def _umask() -> int:
    """The process's umask (read by setting it, so set it straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


class StorageError(Exception):
    """A storage operation failed after its retries."""


class VersionChanged(StorageError):
    """The object changed since it was listed: reading on would mix versions."""


def is_s3(uri: str) -> bool:
    return uri.startswith("s3://")


def split_s3_uri(uri: str) -> tuple[str, str]:
    rest = uri[len("s3://"):]
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise ValueError(f"not an S3 URI: {uri!r} (expected s3://bucket/prefix)")
    return bucket, prefix.strip("/")


def _ignored(relative_path: str) -> bool:
    return any(part.startswith(_IGNORED_PREFIXES) for part in relative_path.split("/"))


# --------------------------------------------------------------------------
# Local
# --------------------------------------------------------------------------

class LocalStorage:
    def __init__(self, root: str):
        self.root = os.path.abspath(root)
        self.unlisted: dict[str, str] = {}  # inputs that could not even be listed, with why

    def uri(self, name: str) -> str:
        return os.path.join(self.root, name)

    # Inputs -----------------------------------------------------------------
    def list_inputs(self) -> list[InputFile]:
        if os.path.isfile(self.root):
            stat = os.stat(self.root)
            return [InputFile("", stat.st_size, f"{stat.st_size}-{stat.st_mtime_ns}")]
        if not os.path.isdir(self.root):
            raise StorageError(f"--data {self.root}: no such file or directory")
        found = []
        for directory, subdirs, files in os.walk(self.root):
            subdirs.sort()
            for name in sorted(files):
                full = os.path.join(directory, name)
                relative = os.path.relpath(full, self.root).replace(os.sep, "/")
                if _ignored(relative):
                    continue
                try:
                    stat = os.stat(full)
                except OSError as error:  # a dangling link, a file removed meanwhile
                    self.unlisted[relative] = f"cannot stat: {error.strerror}"
                    continue
                found.append(InputFile(relative, stat.st_size, f"{stat.st_size}-{stat.st_mtime_ns}"))
        found.sort(key=lambda f: f.path)
        return found

    def _path(self, relative: str) -> str:
        return os.path.join(self.root, relative) if relative else self.root

    def check_version(self, relative: str, version: str) -> None:
        stat = os.stat(self._path(relative))
        current = f"{stat.st_size}-{stat.st_mtime_ns}"
        if current != version:
            raise VersionChanged(f"{relative}: file changed since it was listed ({version} -> {current})")

    def open_reader(self, relative: str, version: str) -> "RangeReader":
        self.check_version(relative, version)
        handle = open(self._path(relative), "rb")
        return RangeReader(lambda offset, length: os.pread(handle.fileno(), length, offset), handle.close)

    def read_all(self, relative: str, version: str) -> bytes:
        self.check_version(relative, version)
        with open(self._path(relative), "rb") as handle:
            return handle.read()

    # Outputs ----------------------------------------------------------------
    def open_atomic(self, name: str) -> "AtomicWriter":
        """``name`` may hold ``/``: a file in a subdirectory of the output."""
        final = self.uri(name)
        directory = os.path.dirname(final)
        os.makedirs(directory, exist_ok=True)
        handle = tempfile.NamedTemporaryFile(dir=directory, prefix=f".{os.path.basename(final)}.", suffix=".tmp",
                                             delete=False)
        # mkstemp makes the file 0600; the output is read by trainers that may run as another user, so it gets
        # the mode any other writer's file gets: 0666 less the umask.
        os.fchmod(handle.fileno(), 0o666 & ~_umask())

        def commit() -> str:
            handle.flush()
            os.fsync(handle.fileno())
            handle.close()
            os.replace(handle.name, final)
            _fsync_directory(directory)
            return final

        return AtomicWriter(handle, commit, handle.name)

    def put_bytes(self, name: str, data: bytes) -> str:
        with self.open_atomic(name) as writer:
            writer.file.write(data)
            return writer.commit()

    def create_if_absent(self, name: str, data: bytes) -> bool:
        """Write ``data`` as ``name`` unless it exists, atomically (a hard link of a complete temporary file:
        a reader sees all of it or nothing, and of two creators exactly one wins); whether this call wrote it."""
        with self.open_atomic(name) as writer:
            writer.file.write(data)
            writer.file.flush()
            os.fsync(writer.file.fileno())
            try:
                os.link(writer.file.name, self.uri(name))
            except FileExistsError:
                return False
            _fsync_directory(os.path.dirname(self.uri(name)))
            return True  # the temporary name is removed as the writer is left uncommitted

    def remove(self, name: str) -> None:
        """Delete the file if it is there."""
        try:
            os.unlink(self.uri(name))
        except FileNotFoundError:
            pass

    def get_bytes(self, name: str, limit: int | None = None) -> bytes | None:
        """The file's bytes (its first ``limit`` only, if given); None if there is no such file."""
        try:
            with open(self.uri(name), "rb") as handle:
                return handle.read(-1 if limit is None else limit)
        except FileNotFoundError:
            return None

    def list_outputs(self) -> list[str]:
        """Every file below the output root, by relative name (as S3 lists keys)."""
        if not os.path.isdir(self.root):
            return []
        names = []
        for directory, subdirs, files in os.walk(self.root):
            relative = os.path.relpath(directory, self.root)
            names += [name if relative == "." else f"{relative}/{name}".replace(os.sep, "/") for name in files]
        return sorted(names)

    def output_sizes(self) -> dict[str, int]:
        """Every file below the output root and its size in bytes (one listing, not one call per file)."""
        sizes = {}
        for name in self.list_outputs():
            try:
                sizes[name] = os.path.getsize(self.uri(name))
            except FileNotFoundError:  # removed since the listing
                pass
        return sizes

    def remove_temporaries(self) -> int:
        """Delete temporary shards left by writers that died (call when no
        writer of this job can still be running: at the end of the job)."""
        removed = 0
        for name in self.list_outputs():
            base = name.rsplit("/", 1)[-1]
            if base.startswith(".") and base.endswith(".tmp"):
                try:
                    os.unlink(self.uri(name))
                    removed += 1
                except FileNotFoundError:
                    pass
        return removed


def _fsync_directory(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --------------------------------------------------------------------------
# S3
# --------------------------------------------------------------------------

@dataclass
class RetryPolicy:
    """Backoff for whole operations, on top of botocore's own retries, so a
    store that is down for tens of seconds does not fail a task."""

    attempts: int = 8
    first_delay: float = 0.5
    max_delay: float = 8.0

    def run(self, what: str, operation: Callable, permanent: tuple = ()):
        delay = self.first_delay
        for attempt in range(1, self.attempts + 1):
            try:
                return operation()
            except permanent:
                raise
            except Exception as error:  # noqa: BLE001 - any transport error is retried
                if attempt == self.attempts:
                    raise StorageError(f"{what}: {error}") from error
                log.warning("%s failed (%s), retrying in %.1fs", what, error, delay)
                time.sleep(delay)
                delay = min(delay * 2, self.max_delay)


class S3Storage:
    def __init__(self, uri: str, endpoint_url: str | None = None, retry: RetryPolicy | None = None):
        import boto3
        from botocore.config import Config

        self.bucket, self.prefix = split_s3_uri(uri)
        self.retry = retry or RetryPolicy()
        self.unlisted: dict[str, str] = {}  # a listing is all or nothing on S3
        # botocore retries quickly and silently; RetryPolicy waits longer and logs.
        config = Config(retries={"total_max_attempts": 2, "mode": "standard"}, connect_timeout=10, read_timeout=60)
        self.client = boto3.client("s3", endpoint_url=endpoint_url or None, config=config)

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
        found = [InputFile(name, obj["Size"], obj["ETag"]) for name, obj in self._objects("list")
                 if name and not name.endswith("/") and not _ignored(name)]
        found.sort(key=lambda f: f.path)  # S3 lists in UTF-8 byte order, which is code point order: no work
        return found

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
                    raise VersionChanged(f"{self.uri(relative)}: object changed since it was listed (ETag {version})") from error
                if code in ("InvalidRange", "416"):
                    return b""
                if code in ("NoSuchKey", "404"):
                    raise StorageError(f"{self.uri(relative)}: no such object") from error
                raise

        return self.retry.run(f"GET {self.uri(relative)} {byte_range or ''}", get,
                              permanent=(VersionChanged, StorageError))

    def open_reader(self, relative: str, version: str) -> "RangeReader":
        return RangeReader(lambda offset, length: self._get(
            relative, version, f"bytes={offset}-{offset + length - 1}") if length > 0 else b"")

    def read_all(self, relative: str, version: str) -> bytes:
        return self._get(relative, version, None)

    # Outputs ----------------------------------------------------------------
    def open_atomic(self, name: str) -> "AtomicWriter":
        from boto3.s3.transfer import TransferConfig

        handle = tempfile.NamedTemporaryFile(prefix=f"{_SPOOL_PREFIX}{os.getpid()}-", suffix=".tmp", delete=False)
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


#: Shards bound for S3 are spooled to local files named after the writer's pid.
_SPOOL_PREFIX = "mlm-shard-"


def remove_stale_spool_files() -> int:
    """Spool files of worker processes that no longer exist (killed mid-task)."""
    removed = 0
    directory = tempfile.gettempdir()
    for name in os.listdir(directory):
        if not (name.startswith(_SPOOL_PREFIX) and name.endswith(".tmp")):
            continue
        pid = name[len(_SPOOL_PREFIX):].split("-", 1)[0]
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            try:
                os.unlink(os.path.join(directory, name))
                removed += 1
            except OSError:
                pass
    return removed


# --------------------------------------------------------------------------
# Shared helpers
# --------------------------------------------------------------------------

class RangeReader:
    """``read_at(offset, length)`` over a file or object, plus close()."""

    def __init__(self, read_at: Callable[[int, int], bytes], close: Callable[[], None] = lambda: None):
        self.read_at = read_at
        self._close = close

    def close(self) -> None:
        self._close()

    def __enter__(self) -> "RangeReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class AtomicWriter:
    """A file to write a shard into; visible under its name only after commit()."""

    def __init__(self, file: BinaryIO, commit: Callable[[], str], temp_path: str):
        self.file = file
        self._commit = commit
        self._temp_path = temp_path
        self._done = False

    def commit(self) -> str:
        uri = self._commit()
        self._done = True
        return uri

    def abort(self) -> None:
        if self._done:
            return
        self._done = True
        try:
            self.file.close()
        finally:
            try:
                os.unlink(self._temp_path)
            except FileNotFoundError:
                pass

    def __enter__(self) -> "AtomicWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if not self._done:
            self.abort()


def open_storage(uri: str, endpoint_url: str | None = None) -> Storage:
    """LocalStorage for a path, S3Storage for ``s3://bucket/prefix``."""
    if is_s3(uri):
        return S3Storage(uri, endpoint_url)
    return LocalStorage(uri)
