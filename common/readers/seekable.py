"""A read-only, seekable file object over ``read_at(offset, length)``.

pyarrow reads Parquet through any Python file object: over a local file's
``pread`` or an S3 object's ranged GETs (:meth:`common.storage.Storage.open_reader`)
it then reads only the footer and the column chunks it is asked for, one
range per read, with nothing buffered in between but what :meth:`ReadAtFile.prefetch`
was asked to read ahead.
"""

from __future__ import annotations

import io
from collections.abc import Iterable

from common.readers.scanning import ReadAt

#: Ranges closer than this are read ahead in one request (pyarrow's own pre-buffering merges holes this small too).
COALESCE_GAP = 8192


class ReadAtFile(io.RawIOBase):
    """``read``/``seek``/``tell`` over ``read_at``; ``size`` is the file's length."""

    def __init__(self, read_at: ReadAt, size: int):
        super().__init__()
        self._read_at = read_at
        self._size = size
        self._position = 0
        self._ahead: list[tuple[int, bytes]] = []  # (offset, bytes) read ahead by prefetch()

    def prefetch(self, ranges: Iterable[tuple[int, int]], gap: int = COALESCE_GAP) -> None:
        """Read these ``(offset, length)`` ranges now, those less than ``gap`` bytes apart in one request, and
        serve reads inside them from memory until the next prefetch (which drops them).  What pyarrow's
        ``pre_buffer`` does, without the thread pool it starts for it: a pool once started can abort a process
        at its exit (apache/arrow#34314)."""
        spans = sorted((max(0, offset), min(self._size, offset + length)) for offset, length in ranges)
        merged: list[list[int]] = []
        for low, high in spans:
            if low >= high:
                continue
            if merged and low <= merged[-1][1] + gap:
                merged[-1][1] = max(merged[-1][1], high)
            else:
                merged.append([low, high])
        self._ahead = []  # the previous ranges go before the next are read
        self._ahead = [(low, self._read_at(low, high - low)) for low, high in merged]

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def size(self) -> int:
        return self._size

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}[whence]
        self._position = max(0, base + offset)
        return self._position

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            size = self._size - self._position
        size = max(0, min(size, self._size - self._position))
        data = self._read_ahead(size) if size else b""
        self._position += len(data)
        return data

    def _read_ahead(self, size: int) -> bytes:
        start = self._position
        for offset, data in self._ahead:
            if offset <= start and start + size <= offset + len(data):
                return data[start - offset:start - offset + size]
        return self._read_at(start, size)

    def readall(self) -> bytes:
        return self.read(-1)

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)
