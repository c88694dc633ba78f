"""A task's bytes: its byte range widened to document boundaries.

Used by workers that read the corpus themselves (S3, or ``--shared-fs``)
and by the ventilator when it ships content to workers that cannot see the
corpus; both get the same bytes, so the output is the same either way.
"""

from __future__ import annotations

import bz2
import gzip
import io

from common.formats import CorpusFormat, boundary_at_or_after
from common.tasks import Task

#: Read ahead past the range's end, so finding the next boundary rarely
#: needs a second request.
_READ_AHEAD = 256 * 1024


class _WindowReader:
    """read_at over one prefetched window, falling back to the storage."""

    def __init__(self, read_at, start: int, data: bytes, reaches_end: bool):
        self._read_at = read_at
        self._start = start
        self._data = data
        self._reaches_end = reaches_end  # the window holds the end of the file

    def __call__(self, offset: int, length: int) -> bytes:
        local = offset - self._start
        if 0 <= local and (local + length <= len(self._data) or self._reaches_end):
            return self._data[local:local + length]
        return self._read_at(offset, length)


def decompress(data: bytes, compression: str) -> bytes:
    if compression == "gzip":
        return gzip.decompress(data)
    if compression == "bz2":
        return bz2.decompress(data)
    if compression == "zstd":
        import zstandard

        with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)) as reader:
            return reader.read()
    raise ValueError(f"unknown compression {compression!r}")


def read_task_content(storage, task: Task, fmt: CorpusFormat) -> bytes:
    """The bytes of every document that begins in ``[task.start, task.end)``."""
    if task.compression:
        return decompress(storage.read_all(task.path, task.version), task.compression)
    with storage.open_reader(task.path, task.version) as reader:
        window_start = max(0, task.start - 1)
        window_end = min(task.size, task.end + _READ_AHEAD)
        window = reader.read_at(window_start, window_end - window_start)
        read_at = _WindowReader(reader.read_at, window_start, window, window_end == task.size)
        first = boundary_at_or_after(fmt, read_at, task.start, task.size)
        last = boundary_at_or_after(fmt, read_at, task.end, task.size)
        if last <= first:
            return b""
        return read_at(first, last - first)
