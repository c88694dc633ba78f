"""Token sequences, no objective applied: for trainers that build their
samples themselves (Megatron-LM's BERT, T5 and GPT datasets) and for loaders
that mask at train time (ModernBERT, NeoBERT: MDS, LitData, the loader's
token-budget batches).

``--max-seq-length 0`` (the default): one record per document, its token ids
(``input_ids``, variable length) and the length of each of its sentences
(``sentence_lengths``), so a writer can keep sentence boundaries (Megatron's
sentence-level datasets, what its BERT dataset needs) or drop them.  No
special token is added.  ``--segmenter auto`` splits sentences for them (the reader's default).

``--max-seq-length N``: a document becomes consecutive chunks, each
``[CLS] tokens [SEP]`` (the tokenizer's roles: ``<s> ... </s>`` for
RoBERTa-family tokenizers) of at most N tokens: chunk k holds the
document's tokens [k(N-2), (k+1)(N-2)), so every token is in exactly one
chunk, in order, and no chunk is only special tokens.  Each record carries
``document_id`` (the same for every chunk of a document, a 63-bit hash of
the task and the document's place in it) and ``chunk_index`` (0, 1, ... in
the document's order), so a trainer can put a document back together.  The chunks keep no sentence, so
``--segmenter auto`` makes each document one segment (``document``): no sentence split, and the document's text
encoded whole without a cut.

Nothing is random: the same documents give the same records, whatever the pass.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from common.job.params import param
from common.objectives.base import MAX_RECORD_LENGTH, Batch, Feature, Objective, Ragged, check_length
from common.objectives.documents import TokenizedDocuments
from common.tokenization.loading import ReferenceCasing

#: Documents per batch.
BATCH_DOCUMENTS = 4096
#: Special tokens around each chunk ([CLS] and [SEP]).
CHUNK_SPECIALS = 2


@dataclass(frozen=True)
class TokensParams:
    max_seq_length: int = param(0, "Tokens per record, [CLS] and [SEP] included: a longer document becomes "
                                   "consecutive chunks of at most this many tokens, each [CLS] ... [SEP] "
                                   "(ModernBERT 1024 then 8192, NeoBERT 1024 then 4096), at most 2**31 - 1; 0: whole "
                                   "documents, no special token (Megatron).", opt_in=True, shared=True)

    def validate(self) -> None:
        if self.max_seq_length != 0 and self.max_seq_length < CHUNK_SPECIALS + 1:
            raise ValueError("--max-seq-length must be 0 (whole documents) or at least 3 ([CLS] a token [SEP])")
        check_length(self.max_seq_length, MAX_RECORD_LENGTH)


def document_ids(task_key: str, first: int, count: int) -> np.ndarray:
    """Ids of a task's documents ``first`` .. ``first + count``: splitmix64 of the task's hash plus the
    document's index, cut to 63 bits (an int64 >= 0).  Distinct within a task; across tasks two ids agree
    with probability ~n²/2⁶⁴ for n documents."""
    base = np.uint64(int.from_bytes(hashlib.sha256(task_key.encode()).digest()[:8], "little"))
    with np.errstate(over="ignore"):
        z = base + np.arange(first, first + count, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(1)).astype(np.int64)


def chunk_documents(tokens: np.ndarray, lengths: np.ndarray, text_per_chunk: int, cls: int,
                    sep: int) -> tuple[Ragged, np.ndarray, np.ndarray]:
    """Documents laid end to end in ``tokens`` (``lengths`` each, all > 0) as chunks of at most
    ``text_per_chunk`` of their tokens, each between ``cls`` and ``sep``: the chunks' ids, each chunk's
    document (index into ``lengths``) and its index within its document."""
    lengths = np.asarray(lengths, dtype=np.int64)
    per_document = (lengths + text_per_chunk - 1) // text_per_chunk
    chunks = int(per_document.sum())
    document = np.repeat(np.arange(len(lengths)), per_document)
    first_chunk = np.concatenate([[0], np.cumsum(per_document)[:-1]]).astype(np.int64)
    index = np.arange(chunks, dtype=np.int64) - first_chunk[document]
    text_lengths = np.minimum(text_per_chunk, lengths[document] - index * text_per_chunk)
    out_lengths = text_lengths + CHUNK_SPECIALS
    out_starts = np.concatenate([[0], np.cumsum(out_lengths)[:-1]]).astype(np.int64)
    values = np.empty(int(out_lengths.sum()), dtype=np.int32)
    special = np.zeros(len(values), dtype=bool)
    special[out_starts] = True
    special[out_starts + out_lengths - 1] = True
    values[out_starts] = cls
    values[out_starts + out_lengths - 1] = sep
    values[~special] = tokens  # the text tokens, in order: chunks are consecutive pieces of the documents
    return Ragged(values, out_lengths), document, index.astype(np.int32)


class TokensObjective(Objective):
    name = "tokens"
    reference_casing = ReferenceCasing(lower_case=False)  # no reference: the text as it is
    Params = TokensParams
    needs = ()
    encodes_documents = True

    def __init__(self, params, special):
        super().__init__(params, special)
        if params.max_seq_length and (special.cls is None or special.sep is None):
            raise ValueError("--max-seq-length puts each chunk between the tokenizer's cls and sep tokens; this "
                             "tokenizer lacks one (name them with --cls-token / --sep-token)")

    @classmethod
    def unit(cls, params) -> str | None:
        """Chunks keep no sentence boundary: each document one segment (``document``: no sentence split, and its
        text encoded whole); whole documents keep their sentences' lengths (``sentence_lengths``): the reader's
        default."""
        return "document" if params.max_seq_length else None

    @property
    def uses_word_starts(self) -> bool:
        return False

    @property
    def features(self) -> list[Feature]:
        ids = Feature("input_ids", "int32", None, bound=self.special.vocab_size)
        if self.params.max_seq_length:
            return [ids, Feature("document_id", "int64", 1), Feature("chunk_index", "int32", 1)]
        return [ids, Feature("sentence_lengths", "int32", None)]

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
            if self.params.max_seq_length:
                ids, document, index = chunk_documents(tokens, token_lengths,
                                                       self.params.max_seq_length - CHUNK_SPECIALS,
                                                       self.special.cls, self.special.sep)
                yield Batch({"input_ids": ids,
                             "document_id": document_ids(task_key, first, last - first)[document][:, None],
                             "chunk_index": index[:, None]})
                continue
            yield Batch({"input_ids": Ragged(tokens, token_lengths.astype(np.int64)),
                         "sentence_lengths": Ragged(sentence_lengths[first_segment:end_segment].astype(np.int32),
                                                    segments_per_document.astype(np.int64))})
