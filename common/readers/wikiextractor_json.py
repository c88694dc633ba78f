"""WikiExtractor's ``--json`` output: one object per line with ``text``
(and ``id``); every line starts a document."""

from __future__ import annotations

import json
from collections.abc import Iterator

from common.readers.base import UTF8_BOM, ByteRangeReader, Document, ParseReport, decode_utf8, disagreement, head_lines
from common.readers.scanning import ReadAt, first_line_start_at_or_after


class WikiExtractorJsonReader(ByteRangeReader):
    name = "json"
    detect_priority = 10

    @classmethod
    def sniff(cls, head: bytes) -> bool:
        """Its first lines are JSON objects with ``text``; some of them and some not is refused."""
        lines = head_lines(head.removeprefix(UTF8_BOM))
        matches = [_is_json_document(line) for _, line in lines]
        if any(matches) and not all(matches):
            raise ValueError(disagreement(lines, matches, 'JSON objects with "text"', cls.name))
        return bool(matches) and all(matches)

    def boundary_at_or_after(self, read_at: ReadAt, pos: int, size: int) -> int:
        """Every line start is a boundary."""
        if pos <= 0:
            return 0
        if pos >= size:
            return size
        line_start = first_line_start_at_or_after(read_at, pos)
        return size if line_start is None or line_start >= size else line_start

    def parse(self, data: bytes, base_offset: int, report: ParseReport) -> Iterator[Document]:
        for line_offset, obj in json_objects(data, report):
            if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
                report.skip("json_without_text")
                continue
            body = obj["text"]
            if not encodable(body, report):
                continue
            identity = obj.get("id")
            yield Document(base_offset + line_offset, body.split("\n"),
                           str(identity) if isinstance(identity, (str, int)) else "")


def _is_json_document(line: bytes) -> bool:
    if not line.lstrip().startswith(b"{"):
        return False
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):
        return False
    return isinstance(obj, dict) and "text" in obj


def json_objects(data: bytes, report: ParseReport) -> Iterator[tuple[int, object]]:
    """(offset, decoded value) of each non-blank line; lines that are not
    UTF-8 or not JSON are counted and left out, and so is a line nested too
    deeply for the decoder (``[[[[...``), without losing the others."""
    offset = 0
    for raw in data.split(b"\n"):
        line_offset = offset
        offset += len(raw) + 1
        if line_offset == 0:
            raw = raw.removeprefix(UTF8_BOM)
        if not raw.strip():
            continue
        line = decode_utf8(raw, report)
        if line is None:
            continue
        try:
            yield line_offset, json.loads(line)
        except ValueError:
            report.skip("malformed_json")
        except RecursionError:
            report.skip("json_nested_too_deeply")


def encodable(body: str, report: ParseReport) -> bool:
    """False (counted) for text with a lone surrogate escape such as "\\ud800", which no encoder takes."""
    try:
        body.encode("utf-8")
    except UnicodeEncodeError:
        report.skip("invalid_unicode")
        return False
    return True
