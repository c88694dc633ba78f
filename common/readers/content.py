"""A task's bytes: its byte range widened to document boundaries.

Used by workers that read the corpus themselves (S3, or ``--shared-fs``)
and by the ventilator when it ships content to workers that cannot see the
corpus; both get the same bytes, so the output is the same either way.
Compressed inputs are decompressed by the worker in both cases.
"""

from __future__ import annotations

import bz2
import gzip
import io
import zlib
from collections.abc import Callable, Iterator
from typing import BinaryIO

import zstandard

from common.job.tasks import Task
from common.readers.scanning import ReadAt
from common.storage import VersionChanged

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


#: A compressed input is one task, decompressed whole in memory: past this
#: size it is refused (split it, or decompress it so that it splits into
#: byte ranges) rather than risk the host's memory.
MAX_DECOMPRESSED_BYTES = 1 << 30


class UnreadableInput(Exception):
    """The task's input can never be read as it is (corrupt or oversized
    compressed data): another attempt, on any worker, would fail the same way."""


def is_permanent(error: Exception) -> bool:
    """Failures that quarantine a task at once instead of after --max-attempts."""
    return isinstance(error, (UnreadableInput, VersionChanged))


def _read_all(reader: BinaryIO | gzip.GzipFile | bz2.BZ2File) -> Iterator[bytes]:
    with reader:
        while chunk := reader.read(1 << 20):
            yield chunk


#: zstd input fed per call: its output stays under ~32 MiB even for data
#: made to expand (an all-zero block of 128 KiB takes a few bytes).
_ZSTD_PIECE = 1024


def _zstd_frames(data: bytes) -> Iterator[bytes]:
    """Every frame, fed in small pieces so that each output stays small; a
    stream reader would end quietly at a truncated frame, this does not."""
    context = zstandard.ZstdDecompressor()
    frame = context.decompressobj()
    in_frame = False
    for start in range(0, len(data), _ZSTD_PIECE):
        piece = data[start:start + _ZSTD_PIECE]
        while piece:
            yield frame.decompress(piece)
            in_frame = not frame.eof
            piece = b""
            if frame.eof:  # the next frame starts in what is left
                piece, frame = frame.unused_data, context.decompressobj()
    if in_frame:
        raise EOFError("the last frame is truncated")


def _chunks(data: bytes, compression: str) -> Iterator[bytes]:
    if compression == "gzip":
        return _read_all(gzip.GzipFile(fileobj=io.BytesIO(data)))  # every member, like gzip -d
    if compression == "bz2":
        return _read_all(bz2.BZ2File(io.BytesIO(data)))  # every stream
    if compression == "zstd":
        return _zstd_frames(data)
    raise ValueError(f"unknown compression {compression!r}")


def decompress(data: bytes, compression: str, limit: int = MAX_DECOMPRESSED_BYTES) -> bytes:
    """All of a compressed object, up to ``limit`` bytes."""
    out = []
    size = 0
    try:
        for chunk in _chunks(data, compression):
            size += len(chunk)
            if size > limit:
                raise UnreadableInput(f"{compression} data expands past {limit:,} bytes, more than one task may "
                                      "hold: split the file, or decompress it so it splits into byte ranges")
            out.append(chunk)
    except (OSError, EOFError, zlib.error, zstandard.ZstdError) as error:
        raise UnreadableInput(f"corrupt {compression} data: {error}") from None
    return b"".join(out)


#: A format's boundary rule: (read_at, pos, size) -> the first boundary at or after pos.
Boundary = Callable[[ReadAt, int, int], int]


def read_task_bytes(storage, task: Task, boundary: Boundary) -> bytes:
    """What a task needs from storage: a compressed object whole, else the
    bytes of every document that begins in ``[task.start, task.end)``.

    This is what the ventilator ships: compressed data stays compressed on
    the wire, and its decompression costs the worker, not the ventilator's
    event loop.
    """
    if task.compression:
        return storage.read_all(task.path, task.version)
    with storage.open_reader(task.path, task.version) as reader:
        window_start = max(0, task.start - 1)
        window_end = min(task.size, task.end + _READ_AHEAD)
        window = reader.read_at(window_start, window_end - window_start)
        read_at = _WindowReader(reader.read_at, window_start, window, window_end == task.size)
        first = boundary(read_at, task.start, task.size)
        last = boundary(read_at, task.end, task.size)
        if last <= first:
            return b""
        return read_at(first, last - first)


def task_content(task: Task, data: bytes) -> bytes:
    """The task's documents from :func:`read_task_bytes`' result."""
    return decompress(data, task.compression) if task.compression else data
