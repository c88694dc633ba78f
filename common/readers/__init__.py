"""The reader axis: input formats.  Each is one module of this package
(see :mod:`.base`); the job names it (``--format``, or detected from the
first lines of the first file) and :func:`readers` finds it, so adding one touches no other file."""

from __future__ import annotations

from common.job.params import Registry
from common.readers.base import UTF8_BOM, ByteRangeReader, Document, ParseReport, Reader

_REGISTRY: Registry[Reader] = Registry(__name__, Reader, "input format")
readers = _REGISTRY.variants
reader_named = _REGISTRY.named


def claimed_by_name(path: str) -> type[Reader] | None:
    """The format a file's name says it is (``.jsonl``, ``.parquet``), if any."""
    for reader in sorted(readers().values(), key=lambda r: -r.detect_priority):
        if reader.claims_name(path):
            return reader
    return None


def detect(head: bytes, path: str = "") -> type[Reader]:
    """The format a file named ``path`` starting with ``head`` is: by its name
    when a format claims it, else by the first format that recognises ``head``
    (its first lines, not only the first).  ValueError (one line) when they disagree."""
    claimed = claimed_by_name(path) if path else None
    if claimed is not None:
        return claimed
    head = head.removeprefix(UTF8_BOM)
    for reader in sorted(readers().values(), key=lambda r: -r.detect_priority):
        if reader.sniff(head):
            return reader
    return reader_named("text")


__all__ = ["ByteRangeReader", "Document", "ParseReport", "Reader", "claimed_by_name", "detect", "reader_named",
           "readers"]
