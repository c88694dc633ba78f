"""The reader interface: an input format's tasks and documents.

A reader plans a corpus's files into tasks, reads a task's payload (what the
ventilator ships, or what a worker reads itself: the same bytes either way),
and parses a payload into documents, skipping and counting what it cannot
use.  :class:`ByteRangeReader` is the shape of every line-oriented format:
a task is a byte range of a file, widened to document boundaries (see
:meth:`ByteRangeReader.boundary_at_or_after`), so every document belongs to
exactly one task whatever the split size.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import ClassVar

from common.job.params import Configurable, NoParams
from common.job.tasks import InputFile, Task, plan_tasks
from common.readers.content import read_task_bytes, task_content
from common.readers.scanning import ReadAt


@dataclass
class Document:
    """One parsed document: its paragraphs (lines), where it started, and
    its id when the input names one."""

    offset: int
    lines: list[str]
    id: str = ""

    @property
    def text(self) -> str:
        """The text a tokenizer encodes whole (objectives whose records are cut from each document's encoding:
        docs/objectives.md, "A document's text"): its lines joined by newlines, without the blank lines at its
        two ends (WikiExtractor's blank line after the title; a JSON text's final newline)."""
        lines = self.lines
        first, last = 0, len(lines)
        while first < last and not lines[first].strip():
            first += 1
        while last > first and not lines[last - 1].strip():
            last -= 1
        return "\n".join(lines[first:last])


@dataclass
class ParseReport:
    """Documents that could not be used, by reason."""

    skipped: dict[str, int] = field(default_factory=dict)

    def skip(self, reason: str, count: int = 1) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + count


#: A byte-order mark some editors and exporters put at a UTF-8 file's start: not part of the first document.
UTF8_BOM = b"\xef\xbb\xbf"
#: Lines --format auto reads of a file's start (complete, non-blank) before it names a format.
SNIFF_LINES = 20


def without_bom(data: bytes, base_offset: int) -> tuple[bytes, int]:
    """``data`` without a leading UTF-8 BOM, and where what is left starts."""
    if data.startswith(UTF8_BOM):
        return data[len(UTF8_BOM):], base_offset + len(UTF8_BOM)
    return data, base_offset


def head_lines(head: bytes, limit: int = SNIFF_LINES) -> list[tuple[int, bytes]]:
    """(line number from 1, line) of the first ``limit`` non-blank lines of a file's first bytes; the last
    line counts only when it is the only one (it may be cut where ``head`` ends)."""
    lines = head.split(b"\n")
    if len(lines) > 1:
        lines = lines[:-1]
    found = [(number, line) for number, line in enumerate(lines, 1) if line.strip()]
    return found[:limit]


def disagreement(lines: list[tuple[int, bytes]], matches: list[bool], what: str, name: str) -> str | None:
    """The one-line reason a file's first lines name no one format (some are ``what``, some not), or None."""
    if all(matches) or not any(matches):
        return None
    first_other = next(number for (number, _), match in zip(lines, matches) if match != matches[0])
    return (f"its first {len(lines)} lines disagree on the format: {sum(matches)} are {what} and "
            f"{len(lines) - sum(matches)} are not (line {lines[0][0]} {'is' if matches[0] else 'is not'}, "
            f"line {first_other} {'is not' if matches[0] else 'is'}): pass --format {name} (the other lines "
            "are skipped and counted) or --format text")


def decode_utf8(raw: bytes, report: ParseReport) -> str | None:
    """A document's text, or None (counted) when it holds NUL bytes or invalid UTF-8."""
    if b"\x00" in raw:
        report.skip("binary")
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        report.skip("invalid_utf8")
        return None


class Reader(Configurable, abc.ABC):
    """An input format."""

    Params: ClassVar[type] = NoParams
    #: The segmenter ``--segmenter auto`` picks: "line" when lines already are sentences.
    default_segmenter: ClassVar[str] = "blingfire"
    #: Detection order for ``--format auto``: higher is tried first.
    detect_priority: ClassVar[int] = 0

    def __init__(self, params=None):
        self.params = params if params is not None else self.Params()

    @classmethod
    def sniff(cls, head: bytes) -> bool:
        """Whether a file starting with ``head`` (a UTF-8 BOM removed) looks like this format; ValueError
        (one line) when its first lines disagree, some of this format and some not."""
        return False

    @classmethod
    def claims_name(cls, path: str) -> bool:
        """Whether a file named ``path`` is this format by its name alone
        (``.jsonl``, ``.parquet``): ``--format auto`` asks this before sniffing,
        so a format whose content looks like another's is still found."""
        return False

    def check_inputs(self, storage, files: list[InputFile]) -> None:
        """ValueError with a one-line reason when the inputs cannot be read as
        this format with these parameters (checked before any work)."""

    @abc.abstractmethod
    def plan(self, files: Iterable[InputFile], task_size: int, storage) -> Iterator[Task]:
        """The corpus's tasks, from file sizes (or metadata) only."""

    @abc.abstractmethod
    def read(self, storage, task: Task) -> bytes:
        """What a task needs from storage (shipped as is to workers that cannot read it)."""

    @abc.abstractmethod
    def documents(self, task: Task, payload: bytes, report: ParseReport) -> Iterator[Document]:
        """The task's documents from its payload."""


class ByteRangeReader(Reader):
    """A line-oriented format: tasks are byte ranges widened to document boundaries."""

    def plan(self, files: Iterable[InputFile], task_size: int, storage) -> Iterator[Task]:
        return plan_tasks(files, task_size)

    def read(self, storage, task: Task) -> bytes:
        return read_task_bytes(storage, task, self.boundary_at_or_after)

    def documents(self, task: Task, payload: bytes, report: ParseReport) -> Iterator[Document]:
        return self.parse(task_content(task, payload), 0, report)

    @abc.abstractmethod
    def boundary_at_or_after(self, read_at: ReadAt, pos: int, size: int) -> int:
        """The first document boundary at or after ``pos`` (``size`` if none);
        0 always is one.  A document never spans a boundary."""

    @abc.abstractmethod
    def parse(self, data: bytes, base_offset: int, report: ParseReport) -> Iterator[Document]:
        """Documents of bytes that start at a boundary."""
