"""One storage layer for local directories and object stores: an axis whose variants are found by URI scheme.

Each backend is one module of this package (``local``: plain paths; ``s3``: ``s3://``; ``gcs``: ``gs://``)
or a plugin's class named by an entry point in the group ``mlm_pipeline.storage``, as for the other axes
(common/job/params.py): Azure or the Hugging Face Hub are one file.  Inputs are listed and read by byte range,
each read pinned to the version listed at planning; outputs are written atomically: a shard is visible under
its final name only once complete.  Credentials come from each store's standard chain, never from the job.
"""

from __future__ import annotations

import functools
import re

from common.storage.base import SPOOL_PREFIX as _SPOOL_PREFIX  # noqa: F401 (tests and older callers)
from common.storage.base import (
    AtomicWriter,
    Backend,
    RangeReader,
    RetryPolicy,
    Storage,
    StorageError,
    StorageSettings,
    VersionChanged,
    configure,
    ignored,
    remove_stale_spool_files,
    settings,
    split_bucket_uri,
)
from common.storage.base import ignored as _ignored  # noqa: F401
from common.storage.gcs import GCSStorage
from common.storage.local import LocalStorage, _fsync_directory  # noqa: F401
from common.storage.s3 import S3Storage

__all__ = ["AtomicWriter", "Backend", "GCSStorage", "LocalStorage", "RangeReader", "RetryPolicy", "S3Storage",
           "Storage", "StorageError", "StorageSettings", "VersionChanged", "backend_for", "backends", "busy_reason",
           "configure", "ignored", "is_remote", "is_s3", "open_storage", "remove_stale_spool_files", "scheme_of",
           "settings", "split_bucket_uri", "split_s3_uri"]

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


@functools.lru_cache(maxsize=1)
def backends() -> dict[str, type[Backend]]:
    """Every backend by URI scheme: this package's modules and the plugins' entry points."""
    from common.job.params import discover

    return discover(__name__, Backend)


def scheme_of(uri: str) -> str:
    """``s3`` for ``s3://b/p``, ``file`` for a plain path."""
    match = _SCHEME.match(uri)
    return match.group(1).lower() if match else LocalStorage.name


def backend_for(uri: str) -> type[Backend]:
    """The backend serving ``uri``'s scheme: ValueError naming the installed ones if there is none."""
    scheme = scheme_of(uri)
    found = backends().get(scheme)
    if found is None:
        raise ValueError(f"{uri}: no storage backend for {scheme}:// (installed: "
                         f"{', '.join(f'{name}://' for name in sorted(backends()))})")
    return found


def is_remote(uri: str) -> bool:
    """Workers read it themselves, by byte range (an object store), rather than being sent its content."""
    return backend_for(uri).remote


def is_s3(uri: str) -> bool:
    return scheme_of(uri) == S3Storage.name


def split_s3_uri(uri: str) -> tuple[str, str]:
    return split_bucket_uri(uri, S3Storage.name)


def busy_reason(error: BaseException) -> str | None:
    """Why ``error`` means the store asks us to slow down (any backend's own words), or None."""
    for backend in backends().values():
        reason = backend.busy(error)
        if reason:
            return reason
    return None


def open_storage(uri: str, endpoint_url: str | None = None) -> Storage:
    """The storage at ``uri``, by its scheme (a plain path is a local directory or file).  A URI no backend
    serves, or a malformed one, is a StorageError (one line)."""
    try:
        return backend_for(uri).open(uri, endpoint_url)
    except ValueError as error:  # no backend for the scheme; no bucket in the URI
        raise StorageError(str(error)) from None
