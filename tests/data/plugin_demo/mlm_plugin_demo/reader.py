"""An input format: every non-empty line is a document of one paragraph."""

from __future__ import annotations

from dataclasses import dataclass

from mlm_pipeline.plugin import ByteRangeReader, Document, decode_utf8, first_line_start_at_or_after, param


@dataclass(frozen=True)
class LinesParams:
    demo_min_chars: int = param(1, "Lines shorter than this are skipped (counted).")


class LinesReader(ByteRangeReader):
    name = "demo-lines"
    Params = LinesParams
    default_segmenter = "line"

    def boundary_at_or_after(self, read_at, pos, size):
        start = first_line_start_at_or_after(read_at, pos)
        return size if start is None else start

    def parse(self, data, base_offset, report):
        offset = 0
        for raw in data.split(b"\n"):
            text = decode_utf8(raw, report)
            if text is not None and text.strip():
                if len(text.strip()) < self.params.demo_min_chars:
                    report.skip("demo_short_line")
                else:
                    yield Document(base_offset + offset, [text.strip()])
            offset += len(raw) + 1
