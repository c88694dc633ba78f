"""JSON Lines with any text field (Megatron-LM's and Dolma's input, exported
datasets): one object per line, the text in ``--text-field``, the name in
``--id-field``.

The same byte ranges as WikiExtractor's ``--json`` (every line start is a
boundary; ``.gz``/``.zst``/``.bz2`` files are one task each), but chosen only
by ``--format jsonl`` or a ``.jsonl``/``.ndjson`` name: a WikiExtractor
``--json`` file, which has no such name, is still read as WikiExtractor's.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from common.job.params import param
from common.job.tasks import COMPRESSED_SUFFIXES
from common.readers.base import Document, ParseReport
from common.readers.wikiextractor_json import WikiExtractorJsonReader, encodable, json_objects

SUFFIXES = (".jsonl", ".ndjson")


@dataclass(frozen=True)
class JsonlParams:
    text_field: str = param("text", "JSON Lines: the field holding each document's text.")
    id_field: str = param("id", "JSON Lines: the field naming each document (a string or an integer); "
                                "without it --holdout-fraction hashes the text.")


class JsonlReader(WikiExtractorJsonReader):
    """Boundaries as WikiExtractor's --json (every line); fields by name."""

    name = "jsonl"
    Params = JsonlParams
    detect_priority = 5

    @classmethod
    def sniff(cls, head: bytes) -> bool:
        return False  # its content looks like WikiExtractor's --json: found by name only

    @classmethod
    def claims_name(cls, path: str) -> bool:
        for suffix in COMPRESSED_SUFFIXES:
            path = path.removesuffix(suffix)
        return path.endswith(SUFFIXES)

    def parse(self, data: bytes, base_offset: int, report: ParseReport) -> Iterator[Document]:
        text_field, id_field = self.params.text_field, self.params.id_field
        for line_offset, obj in json_objects(data, report):
            if not isinstance(obj, dict):
                report.skip("not_an_object")
                continue
            body = obj.get(text_field)
            if body is None:
                report.skip("missing_text")
                continue
            if not isinstance(body, str):
                report.skip("non_string_text")
                continue
            if not body or body.isspace():
                report.skip("empty_text")
                continue
            if not encodable(body, report):
                continue
            identity = obj.get(id_field)
            yield Document(base_offset + line_offset, body.split("\n"),
                           str(identity) if isinstance(identity, (str, int)) and not isinstance(identity, bool)
                           else "")
