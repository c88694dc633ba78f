"""BERT's own input format: one sentence per line, documents separated by
blank lines (so lines already are segments)."""

from __future__ import annotations

from collections.abc import Iterator

from common.readers.base import ByteRangeReader, Document, ParseReport, decode_utf8, without_bom
from common.readers.scanning import (
    ASCII_SPACE,
    ReadAt,
    first_line_start_at_or_after,
    iter_lines_from,
    previous_line_is_blank,
)


class BertTextReader(ByteRangeReader):
    name = "text"
    default_segmenter = "line"
    detect_priority = -100  # what is neither of the others

    @classmethod
    def sniff(cls, head: bytes) -> bool:
        return True

    def boundary_at_or_after(self, read_at: ReadAt, pos: int, size: int) -> int:
        """A boundary is a line start right after a blank line."""
        if pos <= 0:
            return 0
        if pos >= size:
            return size
        line_start = first_line_start_at_or_after(read_at, pos)
        if line_start is None or line_start >= size:
            return size
        previous_blank = previous_line_is_blank(read_at, line_start)
        for offset, line in iter_lines_from(read_at, line_start):
            if previous_blank:
                return offset
            previous_blank = not line.strip(ASCII_SPACE)
        return size

    def parse(self, data: bytes, base_offset: int, report: ParseReport) -> Iterator[Document]:
        data, base_offset = without_bom(data, base_offset)
        offset = 0
        current: list[bytes] = []
        current_offset = 0
        for raw in data.split(b"\n"):
            line_offset = offset
            offset += len(raw) + 1
            if raw.strip(ASCII_SPACE):
                if not current:
                    current_offset = line_offset
                current.append(raw)
                continue
            if current:
                yield from _documents(current, base_offset + current_offset, report)
                current = []
        if current:
            yield from _documents(current, base_offset + current_offset, report)


def _documents(raw_lines: list[bytes], offset: int, report: ParseReport) -> Iterator[Document]:
    text = decode_utf8(b"\n".join(raw_lines), report)
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
