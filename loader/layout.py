"""One record as one row of bytes: every feature side by side.

The server keeps decoded shards and builds batches as (records, row_bytes)
byte matrices, so a batch is one gather per shard (not one per feature) and
one frame on the wire; both sides see the features as views into it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Field:
    name: str
    dtype: str  # numpy's name, little-endian on the wire
    width: int  # values per record


@dataclass(frozen=True)
class RecordLayout:
    fields: tuple[Field, ...]

    @classmethod
    def of(cls, columns: dict[str, np.ndarray]) -> RecordLayout:
        return cls(tuple(Field(name, array.dtype.newbyteorder("<").name if array.dtype.byteorder == ">" else
                               array.dtype.name, int(np.prod(array.shape[1:])))
                         for name, array in columns.items()))

    @property
    def row_bytes(self) -> int:
        return sum(np.dtype(f.dtype).itemsize * f.width for f in self.fields)

    def pack(self, columns: dict[str, np.ndarray]) -> np.ndarray:
        """The columns as one (records, row_bytes) uint8 matrix."""
        rows = len(next(iter(columns.values()))) if columns else 0
        matrix = np.empty((rows, self.row_bytes), dtype=np.uint8)
        for field_, view in zip(self.fields, self.views(matrix).values()):
            view[...] = columns[field_.name].reshape(rows, field_.width)
        return matrix

    def views(self, matrix: np.ndarray) -> dict[str, np.ndarray]:
        """Each feature as a (records, width) array viewing ``matrix`` (no copy)."""
        out, offset = {}, 0
        for f in self.fields:
            size = np.dtype(f.dtype).itemsize * f.width
            out[f.name] = matrix[:, offset:offset + size].view(np.dtype(f.dtype).newbyteorder("<"))
            offset += size
        return out
