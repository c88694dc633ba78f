"""Benchmark inputs: the shared Wikipedia sample replicated to any size.

Each copy of a WikiExtractor file gets its own document ids (``<doc
id="12"`` becomes ``<doc id="r3-12"``), so the replicated corpus looks like
a larger dump rather than one dump repeated.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

_DOC_ID = re.compile(rb'<doc id="([^"]*)"')
_DOC_END = b"</doc>\n"


@dataclass
class Corpus:
    root: Path
    files: int
    bytes: int


def source_files(source: Path) -> list[Path]:
    return sorted(p for p in Path(source).rglob("*")
                  if p.is_file() and not any(part.startswith((".", "_")) for part in p.relative_to(source).parts))


def with_unique_ids(data: bytes, copy: int) -> bytes:
    return _DOC_ID.sub(lambda m: b'<doc id="r%d-%s"' % (copy, m.group(1)), data)


def truncated(data: bytes, limit: int) -> bytes:
    """The documents of ``data`` that end within its first ``limit`` bytes (at least one)."""
    if len(data) <= limit:
        return data
    end = data.rfind(_DOC_END, 0, limit)
    if end < 0:
        end = data.find(_DOC_END)
        if end < 0:
            return data
    return data[:end + len(_DOC_END)]


def load_sources(source: Path, limit_per_file: int | None = None) -> list[tuple[str, bytes]]:
    """(relative path, bytes) of every source file, optionally cut to its
    first ``limit_per_file`` bytes of whole documents (the quick mode's tiny input)."""
    out = []
    for path in source_files(source):
        data = path.read_bytes()
        if limit_per_file:
            data = truncated(data, limit_per_file)
        out.append((str(path.relative_to(source)), data))
    return out


def replicate(sources: list[tuple[str, bytes]], target: Path, copies: int, per_file: int = 1) -> Corpus:
    """``copies`` copies of every source file under ``target``, each copy in
    its own subdirectory; with ``per_file`` > 1, that many consecutive
    copies are concatenated into one file (bigger files, so tasks can be
    the default 8 MiB)."""
    target = Path(target)
    total = files = 0
    for group, first in enumerate(range(0, copies, per_file)):
        for relative, data in sources:
            path = target / f"r{group:05d}" / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "wb") as handle:
                for copy in range(first, min(first + per_file, copies)):
                    piece = with_unique_ids(data, copy)
                    handle.write(piece)
                    total += len(piece)
            files += 1
    return Corpus(target, files, total)


def replicated_bytes(sources: list[tuple[str, bytes]], copies: int) -> bytes:
    """One task's worth of input in memory: ``copies`` copies of every source file."""
    return b"".join(with_unique_ids(data, copy) for copy in range(copies) for _, data in sources)


def tree_bytes(root: Path) -> int:
    return sum(os.path.getsize(p) for p in source_files(root))
