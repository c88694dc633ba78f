"""Corpus formats: where documents begin in a byte stream, and how to parse them.

A task is a byte range ``[start, end)`` of one file or object.  The range is
widened to *document boundaries*: the task owns the bytes
``[boundary_at_or_after(start), boundary_at_or_after(end))``.  Because the
boundaries of consecutive ranges coincide, every byte (and so every document)
of a file belongs to exactly one task, whatever the split size, and no reader
ever needs to see more than its own range plus the bytes up to the next
boundary.  This is Hadoop's input-split rule, made format-aware.

A boundary is only ever placed where a document may begin, and a document
never spans one, so parsing the pieces gives exactly the documents that
parsing the whole file would.
"""

from __future__ import annotations

import enum
import json
import re
from dataclasses import dataclass, field
from typing import Callable, Iterator

#: Reads ``length`` bytes at ``offset``; returns fewer only at end of file.
ReadAt = Callable[[int, int], bytes]

_ASCII_SPACE = b" \t\r\f\v"
_SCAN_CHUNK = 64 * 1024


class CorpusFormat(str, enum.Enum):
    WIKIEXTRACTOR = "wikiextractor"
    WIKIEXTRACTOR_JSON = "json"
    BERT_TEXT = "text"

    @classmethod
    def detect(cls, head: bytes) -> "CorpusFormat":
        """Guess the format from the first bytes of a file."""
        stripped = head.lstrip()
        if stripped.startswith(b"<doc"):
            return cls.WIKIEXTRACTOR
        if stripped.startswith(b"{"):
            first_line = stripped.split(b"\n", 1)[0]
            try:
                obj = json.loads(first_line)
            except ValueError:
                obj = None
            if isinstance(obj, dict) and "text" in obj:
                return cls.WIKIEXTRACTOR_JSON
        return cls.BERT_TEXT


@dataclass
class Document:
    """One parsed document: its paragraphs (lines) and where it started."""

    offset: int
    lines: list[str]


@dataclass
class ParseReport:
    """Documents that could not be used, by reason, plus stray bytes."""

    skipped: dict[str, int] = field(default_factory=dict)

    def skip(self, reason: str, count: int = 1) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + count


# --------------------------------------------------------------------------
# Boundaries
# --------------------------------------------------------------------------

def _first_line_start_at_or_after(read_at: ReadAt, pos: int) -> int | None:
    """The offset of the first line start >= pos, or None at end of file."""
    if pos == 0:
        return 0
    offset = pos - 1
    while True:
        chunk = read_at(offset, _SCAN_CHUNK)
        if not chunk:
            return None
        newline = chunk.find(b"\n")
        if newline >= 0:
            return offset + newline + 1
        offset += len(chunk)


def _iter_lines_from(read_at: ReadAt, line_start: int) -> Iterator[tuple[int, bytes]]:
    """(offset, line without newline) for each line from a line start on."""
    offset = line_start
    buffer = b""
    buffer_offset = offset
    while True:
        newline = buffer.find(b"\n")
        if newline >= 0:
            yield buffer_offset, buffer[:newline]
            buffer = buffer[newline + 1:]
            buffer_offset += newline + 1
            continue
        chunk = read_at(buffer_offset + len(buffer), _SCAN_CHUNK)
        if not chunk:
            if buffer:
                yield buffer_offset, buffer
            return
        buffer += chunk


def _previous_line_is_blank(read_at: ReadAt, line_start: int) -> bool:
    """Whether the line ending just before ``line_start`` holds only spaces.

    Scans backwards over whitespace only, so the cost is the length of the
    whitespace run, not of the line.
    """
    if line_start == 0:
        return False
    pos = line_start - 1  # the newline ending the previous line
    while pos > 0:
        start = max(0, pos - _SCAN_CHUNK)
        chunk = read_at(start, pos - start)
        for i in range(len(chunk) - 1, -1, -1):
            byte = chunk[i:i + 1]
            if byte == b"\n":
                return True
            if byte not in _ASCII_SPACE:
                return False
        pos = start
    return True  # only whitespace back to the start of the file


def _is_doc_header(line: bytes) -> bool:
    return line.startswith(b"<doc") and line[4:5] in (b" ", b">", b"\t")


def _next_doc_header(read_at: ReadAt, line_start: int, size: int) -> int:
    """The first ``<doc`` header line at or after a line start, by
    searching for ``\n<doc`` in chunks (not line by line: documents are
    thousands of lines)."""
    head = read_at(line_start, 5)
    if _is_doc_header(head):
        return line_start
    position = line_start  # the byte before position is a newline (or position is 0)
    overlap = b""
    while position < size:
        chunk = read_at(position, _SCAN_CHUNK)
        if not chunk:
            break
        text = overlap + chunk
        base = position - len(overlap)
        start = 0
        while True:
            found = text.find(b"\n<doc", start)
            if found < 0 or found + 6 > len(text):
                break
            if text[found + 5:found + 6] in (b" ", b">", b"\t"):
                return base + found + 1
            start = found + 1
        overlap = text[-6:]
        position += len(chunk)
    return size


def boundary_at_or_after(fmt: CorpusFormat, read_at: ReadAt, pos: int, size: int) -> int:
    """The first document boundary at or after ``pos`` (``size`` if none).

    Offset 0 is always a boundary.  Other boundaries are line starts where
    a document may begin: a ``<doc`` header line (WikiExtractor), any line
    (JSON lines), or a line that follows a blank line (BERT's text format).
    """
    if pos <= 0:
        return 0
    if pos >= size:
        return size
    line_start = _first_line_start_at_or_after(read_at, pos)
    if line_start is None or line_start >= size:
        return size
    if fmt is CorpusFormat.WIKIEXTRACTOR_JSON:
        return line_start
    if fmt is CorpusFormat.WIKIEXTRACTOR:
        return _next_doc_header(read_at, line_start, size)
    # BERT text: a boundary is a line start right after a blank line.
    previous_blank = _previous_line_is_blank(read_at, line_start)
    for offset, line in _iter_lines_from(read_at, line_start):
        if previous_blank:
            return offset
        previous_blank = not line.strip(_ASCII_SPACE)
    return size


# --------------------------------------------------------------------------
# Parsing a task's bytes into documents
# --------------------------------------------------------------------------

_DOC_END = "</doc>"


def _decode(raw: bytes, report: ParseReport) -> str | None:
    if b"\x00" in raw:
        report.skip("binary")
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        report.skip("invalid_utf8")
        return None


def _split_wikiextractor(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(offset, raw block) pieces, each starting at a ``<doc`` header line
    (the first piece may be stray text before any header)."""
    starts = [0] if data else []
    for match in re.finditer(rb"\n(?=<doc[ \t>])", data):
        starts.append(match.end())
    if len(starts) > 1 and starts[1] == 0:
        starts.pop(1)
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else len(data)
        yield start, data[start:end]


def parse_wikiextractor(data: bytes, base_offset: int, report: ParseReport) -> Iterator[Document]:
    for offset, block in _split_wikiextractor(data):
        if not _is_doc_header(block):
            if block.strip():
                report.skip("text_outside_doc")
            continue
        text = _decode(block, report)
        if text is None:
            continue
        lines = text.split("\n")
        header = lines[0]
        if not header.rstrip().endswith(">"):
            report.skip("malformed_doc_header")
            continue
        body = lines[1:]
        try:
            end = next(i for i, line in enumerate(body) if line.strip() == _DOC_END)
        except StopIteration:
            report.skip("unclosed_doc")
            continue
        trailing = body[end + 1:]
        if any(line.strip() for line in trailing):
            report.skip("text_outside_doc")
        body = body[:end]
        # WikiExtractor repeats the title as the first line of the body.
        if body and body[0].strip():
            body = body[1:]
        yield Document(base_offset + offset, body)


def parse_json_lines(data: bytes, base_offset: int, report: ParseReport) -> Iterator[Document]:
    offset = 0
    for raw in data.split(b"\n"):
        line_offset = offset
        offset += len(raw) + 1
        if not raw.strip():
            continue
        text = _decode(raw, report)
        if text is None:
            continue
        try:
            obj = json.loads(text)
        except ValueError:
            report.skip("malformed_json")
            continue
        body = obj.get("text") if isinstance(obj, dict) else None
        if not isinstance(body, str):
            report.skip("json_without_text")
            continue
        try:
            body.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate escape such as "\ud800"
            report.skip("invalid_unicode")
            continue
        yield Document(base_offset + line_offset, body.split("\n"))


def parse_bert_text(data: bytes, base_offset: int, report: ParseReport) -> Iterator[Document]:
    """One sentence per line, documents separated by blank lines (BERT's
    own input format): here lines are already segments."""
    offset = 0
    current: list[bytes] = []
    current_offset = 0
    for raw in data.split(b"\n"):
        line_offset = offset
        offset += len(raw) + 1
        if raw.strip(_ASCII_SPACE):
            if not current:
                current_offset = line_offset
            current.append(raw)
            continue
        if current:
            yield from _bert_documents(current, base_offset + current_offset, report)
            current = []
    if current:
        yield from _bert_documents(current, base_offset + current_offset, report)


def _bert_documents(raw_lines: list[bytes], offset: int, report: ParseReport) -> Iterator[Document]:
    text = _decode(b"\n".join(raw_lines), report)
    if text is None:
        return
    # BERT's reader strips with str.strip(), so a line of Unicode spaces
    # (U+00A0, U+3000, ...) also ends a document; boundaries only use ASCII
    # spaces, which is safe because they are a subset of the separators.
    lines: list[str] = []
    for line in text.split("\n"):
        if line.strip():
            lines.append(line)
        elif lines:
            yield Document(offset, lines)
            lines = []
    if lines:
        yield Document(offset, lines)


PARSERS = {
    CorpusFormat.WIKIEXTRACTOR: parse_wikiextractor,
    CorpusFormat.WIKIEXTRACTOR_JSON: parse_json_lines,
    CorpusFormat.BERT_TEXT: parse_bert_text,
}


def parse_documents(fmt: CorpusFormat, data: bytes, base_offset: int, report: ParseReport) -> Iterator[Document]:
    """Documents of a task's bytes (which start at a boundary)."""
    return PARSERS[fmt](data, base_offset, report)
