"""The whole document one segment, its paragraphs the pieces: for objectives that keep no sentence boundary
(``--objective tokens --max-seq-length N``: chunks cut from each document's encoding).  A sentence split there
costs Bling Fire's time for nothing, and cuts the document's encoding at every sentence (docs/objectives.md,
"A document's text, and its tokens")."""

from __future__ import annotations

from common.segmenters.base import Segmenter
from common.segmenters.sentences import document_pieces


class DocumentSegmenter(Segmenter):
    name = "document"

    def segments(self, lines: list[str]) -> list[list[str]]:
        return document_pieces(lines)
