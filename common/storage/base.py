"""What every storage backend shares: the interface the roles use, the errors they catch, the retry policy,
and the reader/writer handles.  A backend is one module of this package (or a plugin's, by entry point in
the group ``mlm_pipeline.storage``) holding a :class:`Backend` subclass whose ``name`` is its URI scheme."""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any, BinaryIO, ClassVar, Protocol

import click

from common.job.cli_settings import option
from common.job.tasks import InputFile

log = logging.getLogger("common.storage")

_IGNORED_PREFIXES = (".", "_")


class Storage(Protocol):
    """What the roles need of a place holding a corpus or an output: one :class:`Backend` per URI scheme
    (a local directory, ``s3://``, ``gs://``)."""

    unlisted: dict[str, str]  # inputs that could not even be listed, with why

    def uri(self, name: str) -> str: ...
    def list_inputs(self) -> list[InputFile]: ...
    def open_reader(self, relative: str, version: str) -> RangeReader: ...
    def read_all(self, relative: str, version: str) -> bytes: ...
    def open_atomic(self, name: str) -> AtomicWriter: ...
    def put_bytes(self, name: str, data: bytes) -> str: ...
    def create_if_absent(self, name: str, data: bytes) -> bool: ...
    def remove(self, name: str) -> None: ...
    def get_bytes(self, name: str, limit: int | None = None) -> bytes | None: ...
    def list_outputs(self) -> list[str]: ...
    def output_sizes(self) -> dict[str, int]: ...
    def remove_temporaries(self) -> int: ...


class Backend:
    """A storage backend: ``name`` is the URI scheme it serves (``s3`` for ``s3://``; ``file`` for plain
    paths).  ``remote``: workers read the input themselves by byte range (nothing is shipped to them)."""

    name: ClassVar[str]
    remote: ClassVar[bool] = True

    @classmethod
    def open(cls, uri: str, endpoint_url: str | None = None) -> Storage:
        """The storage at ``uri``; ``endpoint_url`` is the job's ``--s3-endpoint-url`` (a backend with its
        own way to find an endpoint ignores it)."""
        raise NotImplementedError

    @classmethod
    def busy(cls, error: BaseException) -> str | None:
        """Why ``error`` (one of this backend's client's) means "the store wants us to slow down", or None:
        the worker then waits and retries the task without counting an attempt (worker/backoff.py)."""
        return None


def _umask() -> int:
    """The process's umask (read by setting it, so set it straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


class StorageError(Exception):
    """A storage operation failed after its retries."""


class VersionChanged(StorageError):
    """The object changed since it was listed: reading on would mix versions."""


def split_bucket_uri(uri: str, scheme: str) -> tuple[str, str]:
    """(bucket, prefix) of ``scheme://bucket/prefix``: ValueError for anything else."""
    rest = uri[len(f"{scheme}://"):] if uri.startswith(f"{scheme}://") else ""
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise ValueError(f"not a {scheme}:// URI: {uri!r} (expected {scheme}://bucket/prefix)")
    return bucket, prefix.strip("/")


def ignored(relative_path: str) -> bool:
    """Hidden and underscore files (``_SUCCESS``, ``.crc``) are not input."""
    return any(part.startswith(_IGNORED_PREFIXES) for part in relative_path.split("/"))


#: How long a storage operation may wait on the store, over all its attempts, unless told otherwise (seconds).
DEFAULT_TIMEOUT = 120.0
#: The longest a single request waits for an answer (a read stalled this long is retried).
REQUEST_TIMEOUT = 60.0


@dataclass(frozen=True)
class StorageSettings:
    """The storage axis's options, declared once: every command that opens a store takes them as a group of
    its settings (the ventilator, the sink, the worker, mlm-verify); a process that was not given them (the
    loader, mlm-report) uses the defaults (:func:`settings`)."""

    section: ClassVar[str] = "Storage"  # its heading in --help
    storage_timeout: float = option(
        "--storage-timeout", type=click.FloatRange(min=0, min_open=True, max=86400), default=DEFAULT_TIMEOUT,
        show_envvar=True,
        help="Seconds a storage operation (a read, an upload, a listing page) may wait on an object store over "
             "all its retries before it fails; a store that accepts connections and never answers is given up "
             "on then (docs/reliability.md).")


_configured: StorageSettings | None = None


def configure(given: StorageSettings) -> None:
    """This process's storage settings, as its command line gave them.  The processes a role starts get them
    on their command lines or as arguments (the ventilator's sink and workers, a worker's processes), never
    through MLM_ variables, whose names are each command's own (``MLM_VENTILATOR_STORAGE_TIMEOUT``)."""
    global _configured
    _configured = given


def settings() -> StorageSettings:
    """The storage settings of this process: those configured, else the defaults (the loader and mlm-report
    take no storage option: they wait at most the default bound)."""
    return _configured if _configured is not None else StorageSettings()


@dataclass
class RetryPolicy:
    """Backoff for whole operations, on top of the clients' own (short) retries, so a store that is down
    for tens of seconds does not fail a task; bounded by ``timeout`` seconds over all attempts (the
    ``--storage-timeout``, if not given), so a store that never answers fails the operation then."""

    attempts: int = 8
    first_delay: float = 0.5
    max_delay: float = 8.0
    timeout: float | None = None  # None: settings().storage_timeout

    def bound(self) -> float:
        """The total wait of one operation, in seconds."""
        return self.timeout if self.timeout is not None else settings().storage_timeout

    def run(self, what: str, operation: Callable[..., Any], permanent: tuple = (), timed: bool = False) -> Any:
        """``operation()`` until it succeeds, retried with backoff while the bound allows.  ``timed``: it takes
        the seconds a request may wait (``operation(timeout)``: the time left, at most REQUEST_TIMEOUT)."""
        bound = self.bound()
        deadline = time.monotonic() + bound
        delay = self.first_delay
        for attempt in range(1, self.attempts + 1):
            try:
                if timed:
                    return operation(max(min(REQUEST_TIMEOUT, deadline - time.monotonic()), 0.001))
                return operation()
            except permanent:
                raise
            except Exception as error:  # any transport error is retried
                code = _error_code(error)
                if code in PERMANENT_CODES:  # waiting will not make the bucket exist
                    raise StorageError(f"{what}: {PERMANENT_CODES[code]} ({code})") from error
                if attempt == self.attempts:
                    raise StorageError(f"{what}: {error}") from error
                if time.monotonic() + delay >= deadline:
                    raise StorageError(f"{what}: {error} (gave up after {attempt} attempt(s): --storage-timeout "
                                       f"{bound:g}s)") from error
                log.warning("%s failed (%s), retrying in %.1fs", what, error, delay)
                time.sleep(delay)
                delay = min(delay * 2, self.max_delay)
        raise AssertionError("unreachable")


#: S3 error codes no retry can change, and what they mean: said at once, not after the retries' half minute.
PERMANENT_CODES = {"NoSuchBucket": "no such bucket", "InvalidBucketName": "not a valid bucket name"}


def _error_code(error: BaseException | None) -> str:
    """A botocore ClientError's S3 error code, or that of the error it was raised from (boto3's transfers wrap
    it: S3UploadFailedError); "" for any other error."""
    for _ in range(4):
        if error is None:
            return ""
        response = getattr(error, "response", None)
        if isinstance(response, dict):
            return str(response.get("Error", {}).get("Code", ""))
        error = error.__cause__ or error.__context__
    return ""


#: Shards bound for an object store are spooled to local files named after the writer's pid.
SPOOL_PREFIX = "mlm-shard-"


def spool_file() -> IO[bytes]:
    """A local file to write a shard into before it is uploaded whole."""
    return tempfile.NamedTemporaryFile(prefix=f"{SPOOL_PREFIX}{os.getpid()}-", suffix=".tmp", delete=False)


def remove_stale_spool_files() -> int:
    """Spool files of worker processes that no longer exist (killed mid-task)."""
    removed = 0
    directory = tempfile.gettempdir()
    for name in os.listdir(directory):
        if not (name.startswith(SPOOL_PREFIX) and name.endswith(".tmp")):
            continue
        pid = name[len(SPOOL_PREFIX):].split("-", 1)[0]
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            try:
                os.unlink(os.path.join(directory, name))
                removed += 1
            except OSError:
                pass
    return removed


class RangeReader:
    """``read_at(offset, length)`` over a file or object, plus close()."""

    def __init__(self, read_at: Callable[[int, int], bytes], close: Callable[[], None] = lambda: None):
        self.read_at = read_at
        self._close = close

    def close(self) -> None:
        self._close()

    def __enter__(self) -> RangeReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class AtomicWriter:
    """A file to write a shard into; visible under its name only after commit()."""

    def __init__(self, file: BinaryIO | IO[bytes], commit: Callable[[], str], temp_path: str):
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

    def __enter__(self) -> AtomicWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if not self._done:
            self.abort()
