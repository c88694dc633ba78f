"""The files dedup stages exchange: named numpy arrays and a JSON header,
each checked by SHA-256 when read.

A stage never trusts what an earlier task left in the output store: a file
that is missing, truncated or altered raises :class:`CorruptFile`, naming the
task that wrote it, and that task is done again (see docs/dedup.md).

Layout: ``MLMDEDUP1\\n``, the header's length (8 bytes, little endian), the
SHA-256 of header and body, the header (JSON: meta, and each array's name,
dtype, shape and offset in the body), the body.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np

from common.job.tasks import EarlierTaskFileError

MAGIC = b"MLMDEDUP1\n"


class CorruptFile(EarlierTaskFileError):
    """A stage file is missing or does not match its checksum."""

    def __init__(self, name: str, writer_task: str, reason: str):
        super().__init__(f"{name}: {reason}")
        self.name = name
        self.writer_task = writer_task


def encode(meta: dict, arrays: dict[str, np.ndarray]) -> bytes:
    specs, parts, offset = [], [], 0
    for name, array in arrays.items():
        data = np.ascontiguousarray(array).tobytes()
        specs.append({"name": name, "dtype": array.dtype.str, "shape": list(array.shape), "offset": offset})
        parts.append(data)
        offset += len(data)
    header = json.dumps({"meta": meta, "arrays": specs}, sort_keys=True).encode()
    body = b"".join(parts)
    digest = hashlib.sha256(header + body).digest()
    return MAGIC + len(header).to_bytes(8, "little") + digest + header + body


def decode(data: bytes | None, name: str, writer_task: str) -> tuple[dict, dict[str, np.ndarray]]:
    if data is None:
        raise CorruptFile(name, writer_task, "missing")
    fixed = len(MAGIC) + 8 + 32
    if len(data) < fixed or not data.startswith(MAGIC):
        raise CorruptFile(name, writer_task, "not a dedup file")
    length = int.from_bytes(data[len(MAGIC):len(MAGIC) + 8], "little")
    digest = data[len(MAGIC) + 8:fixed]
    if hashlib.sha256(data[fixed:]).digest() != digest or length > len(data) - fixed:
        raise CorruptFile(name, writer_task, "checksum mismatch")
    header = json.loads(data[fixed:fixed + length])
    body = memoryview(data)[fixed + length:]
    arrays = {}
    for spec in header["arrays"]:
        dtype = np.dtype(spec["dtype"])
        count = int(np.prod(spec["shape"], dtype=np.int64))
        arrays[spec["name"]] = np.frombuffer(body, dtype=dtype, count=count,
                                             offset=spec["offset"]).reshape(spec["shape"])
    return header["meta"], arrays
