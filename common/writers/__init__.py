"""The writer axis: output formats.  Each is one module of this package
(see :mod:`.base`); the job names it (``--output-format``) and
:func:`writers` finds it, so adding one touches no other file."""

from __future__ import annotations

import functools

from common.writers.base import ShardFile, TaskOutput, Writer

DEFAULT = "tfrecord"


@functools.cache
def writers() -> dict[str, type[Writer]]:
    from common.params import discover

    return discover(__name__, Writer)


def writer_named(name: str) -> type[Writer]:
    try:
        return writers()[name]
    except KeyError:
        raise ValueError(f"unknown output format {name!r} (known: {', '.join(sorted(writers()))})") from None


def writer_for_file(name: str) -> type[Writer]:
    """The writer that writes files named like ``name`` (longest suffix first)."""
    matches = [(len(suffix), writer) for writer in writers().values() for suffix in writer.suffixes
               if name.endswith(suffix)]
    if not matches:
        raise ValueError(f"{name}: no output format writes such files")
    return max(matches, key=lambda match: match[0])[1]


__all__ = ["DEFAULT", "ShardFile", "TaskOutput", "Writer", "writer_for_file", "writer_named", "writers"]
