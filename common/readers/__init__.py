"""The reader axis: input formats.  Each is one module of this package
(see :mod:`.base`); the job names it (``--format``, or detected from the
first file) and :func:`readers` finds it, so adding one touches no other file."""

from __future__ import annotations

import functools

from common.readers.base import ByteRangeReader, Document, ParseReport, Reader


@functools.cache
def readers() -> dict[str, type[Reader]]:
    from common.params import discover

    return discover(__name__, Reader)


def reader_named(name: str) -> type[Reader]:
    try:
        return readers()[name]
    except KeyError:
        raise ValueError(f"unknown input format {name!r} (known: {', '.join(sorted(readers()))})") from None


def detect(head: bytes) -> type[Reader]:
    """The format a file starting with ``head`` looks like."""
    for reader in sorted(readers().values(), key=lambda r: -r.detect_priority):
        if reader.sniff(head):
            return reader
    return reader_named("text")


__all__ = ["ByteRangeReader", "Document", "ParseReport", "Reader", "detect", "reader_named", "readers"]
