"""A read-only, seekable file object over ``read_at(offset, length)``.

pyarrow reads Parquet through any Python file object: over a local file's
``pread`` or an S3 object's ranged GETs (:meth:`common.storage.Storage.open_reader`)
it then reads only the footer and the column chunks it is asked for, one
range per read, with nothing buffered in between.
"""

from __future__ import annotations

import io

from common.readers.scanning import ReadAt


class ReadAtFile(io.RawIOBase):
    """``read``/``seek``/``tell`` over ``read_at``; ``size`` is the file's length."""

    def __init__(self, read_at: ReadAt, size: int):
        super().__init__()
        self._read_at = read_at
        self._size = size
        self._position = 0

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
        data = self._read_at(self._position, size) if size else b""
        self._position += len(data)
        return data

    def readall(self) -> bytes:
        return self.read(-1)

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)
