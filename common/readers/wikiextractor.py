"""WikiExtractor's output: ``<doc id=… url=… title=…>`` blocks, one
paragraph per line, the title repeated as the body's first line."""

from __future__ import annotations

import re
from collections.abc import Iterator

from common.readers.base import (
    ByteRangeReader,
    Document,
    ParseReport,
    decode_utf8,
    disagreement,
    head_lines,
    without_bom,
)
from common.readers.scanning import SCAN_CHUNK, ReadAt, first_line_start_at_or_after

_DOC_END = "</doc>"
_ID = re.compile(r'\bid="([^"]*)"')


def _is_doc_header(line: bytes) -> bool:
    return line.startswith(b"<doc") and line[4:5] in (b" ", b">", b"\t")


def _next_doc_header(read_at: ReadAt, line_start: int, size: int) -> int:
    """The first ``<doc`` header line at or after a line start, by
    searching for ``\\n<doc`` in chunks (not line by line: documents are
    thousands of lines)."""
    head = read_at(line_start, 5)
    if _is_doc_header(head):
        return line_start
    position = line_start  # the byte before position is a newline (or position is 0)
    overlap = b""
    while position < size:
        chunk = read_at(position, SCAN_CHUNK)
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


def _split_blocks(data: bytes) -> Iterator[tuple[int, bytes]]:
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


class WikiExtractorReader(ByteRangeReader):
    name = "wikiextractor"
    detect_priority = 20

    @classmethod
    def sniff(cls, head: bytes) -> bool:
        """A ``<doc`` header first; a header after other lines (stray text, a cut first document) is a
        disagreement, refused."""
        lines = head_lines(head)
        matches = [_is_doc_header(line.lstrip()) or line.strip() == _DOC_END.encode() for _, line in lines]
        if matches and matches[0]:
            return True
        if any(matches):
            raise ValueError(disagreement(lines, matches, "<doc> header or end lines", cls.name))
        return False

    def boundary_at_or_after(self, read_at: ReadAt, pos: int, size: int) -> int:
        """A boundary is a ``<doc`` header line."""
        if pos <= 0:
            return 0
        if pos >= size:
            return size
        line_start = first_line_start_at_or_after(read_at, pos)
        if line_start is None or line_start >= size:
            return size
        return _next_doc_header(read_at, line_start, size)

    def parse(self, data: bytes, base_offset: int, report: ParseReport) -> Iterator[Document]:
        data, base_offset = without_bom(data, base_offset)
        for offset, block in _split_blocks(data):
            if not _is_doc_header(block):
                if block.strip():
                    report.skip("text_outside_doc")
                continue
            text = decode_utf8(block, report)
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
            found = _ID.search(header)
            yield Document(base_offset + offset, body, found.group(1) if found else "")
