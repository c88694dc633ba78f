"""An objective: one record per document, its token ids and its number of segments, ``demo_copies`` times."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlm_pipeline.plugin import Batch, Feature, Objective, Ragged, param


@dataclass(frozen=True)
class DocumentIdsParams:
    demo_copies: int = param(1, "Passes over each task's documents.")

    def validate(self) -> None:
        if self.demo_copies < 1:
            raise ValueError("--demo-copies must be at least 1")


class DocumentIds(Objective):
    name = "demo-ids"
    Params = DocumentIdsParams
    uses_segments = False

    @property
    def features(self):
        return [Feature("input_ids", "int32", None, bound=self.special.vocab_size),
                Feature("segments", "int32", None)]

    @property
    def passes(self):
        return self.params.demo_copies

    def batches(self, documents, task_key, pass_index):
        if not documents.num_documents:
            return
        segment_offsets = np.asarray(documents.segment_offsets, dtype=np.int64)
        document_offsets = np.asarray(documents.document_offsets, dtype=np.int64)
        starts = segment_offsets[document_offsets[:-1]]
        ends = segment_offsets[document_offsets[1:]]
        segments = np.diff(document_offsets).astype(np.int32)  # per document: how many segments it has
        yield Batch({"input_ids": Ragged(documents.tokens[starts[0]:ends[-1]].astype(np.int32), ends - starts),
                     "segments": Ragged(segments, np.ones(len(segments), dtype=np.int64))})
