"""Token sequences, no objective applied: for trainers that build their
samples themselves (Megatron-LM's BERT, T5 and GPT datasets) and for loaders
that mask at train time.

One record per document: its token ids (``input_ids``, variable length) and
the length of each of its sentences (``sentence_lengths``), so a writer can
keep sentence boundaries (Megatron's sentence-level datasets, what its BERT
dataset needs) or drop them.  No special token is added and nothing is
random: the same documents give the same records, whatever the pass.
"""

from __future__ import annotations

from common.tokenization.loading import ReferenceCasing

from typing import Iterator

import numpy as np

from common.objectives.base import Batch, Feature, Objective, Ragged
from common.objectives.documents import TokenizedDocuments
from common.params import NoParams

#: Documents per batch.
BATCH_DOCUMENTS = 4096


class TokensObjective(Objective):
    name = "tokens"
    reference_casing = ReferenceCasing(lower_case=False)  # no reference: the text as it is
    Params = NoParams
    needs = ()

    @property
    def uses_word_starts(self) -> bool:
        return False

    @property
    def features(self) -> list[Feature]:
        return [Feature("input_ids", "int32", None, bound=self.special.vocab_size),
                Feature("sentence_lengths", "int32", None)]

    def batches(self, documents: TokenizedDocuments, task_key: str, pass_index: int) -> Iterator[Batch]:
        segment_offsets = np.asarray(documents.segment_offsets, dtype=np.int64)
        document_offsets = np.asarray(documents.document_offsets, dtype=np.int64)
        sentence_lengths = np.diff(segment_offsets)
        for first in range(0, documents.num_documents, BATCH_DOCUMENTS):
            last = min(first + BATCH_DOCUMENTS, documents.num_documents)
            first_segment, end_segment = document_offsets[first], document_offsets[last]
            tokens = documents.tokens[segment_offsets[first_segment]:segment_offsets[end_segment]]
            segments_per_document = np.diff(document_offsets[first:last + 1])
            token_lengths = np.add.reduceat(sentence_lengths[first_segment:end_segment],
                                            np.concatenate([[0], np.cumsum(segments_per_document)[:-1]]))
            yield Batch({"input_ids": Ragged(tokens, token_lengths.astype(np.int64)),
                         "sentence_lengths": Ragged(sentence_lengths[first_segment:end_segment].astype(np.int32),
                                                    segments_per_document.astype(np.int64))})
