"""Token ids of each part's segments (TokenizedDocuments), by the job's tokenizer (stage time "tokenize").

Pieces are encoded as the paragraphs they come from encode (common/segmenters/sentences.py); a segment's tokens are
its pieces' tokens end to end.  For a tokenizer that treats a text's start apart, the pieces of one
paragraph are encoded as the paragraph and its tokens shared out (``Vocabulary.encode_with_word_starts``),
so a sentence after a tab, an NBSP or no space at all gets the tokens it has in its paragraph.  An objective
cut from each document's encoding (``Objective.encodes_documents``: tokens, roberta, electra) with a tokenizer
that encodes paragraph breaks gets each document's text (``Document.text``) encoded whole instead, its tokens
shared out among its segments (:func:`document_cuts`, ``Vocabulary.encode_documents``).  Documents
left without a usable segment are counted as skipped.  The training side's documents and tokens are the
task's; another side's are counted under its split's name.

Each side's documents are also counted by their tokens, in powers of two (counters ``tokens_per_document``,
and ``holdout_tokens_per_document`` for the held-out side): the sink sums them over the job, so the report's
histogram of tokens per document is exact for every format, instance formats included, without reading a
shard.
"""

from __future__ import annotations

import functools
from itertools import chain

import numpy as np

from common.objectives import TokenizedDocuments
from common.output.files import TRAIN
from common.steps.base import Segmented, Step, TaskRun, Tokenized, Worded

#: The counters of documents by tokens: bin "up_to_N" holds documents of more than N/2 and at most N tokens.
TOKENS_PER_DOCUMENT = "tokens_per_document"


def tokens_per_document_name(split: str) -> str:
    return TOKENS_PER_DOCUMENT if split == TRAIN else f"{split}_{TOKENS_PER_DOCUMENT}"


def document_token_bins(tokens_per_document: np.ndarray) -> dict[str, int]:
    """Documents by their tokens, in power-of-two bins ("up_to_1", "up_to_2", "up_to_4", ...)."""
    if not len(tokens_per_document):
        return {}
    exponents = np.ceil(np.log2(np.maximum(tokens_per_document, 1))).astype(np.int64)
    values, counts = np.unique(exponents, return_counts=True)
    return {f"up_to_{1 << int(k)}": int(n) for k, n in zip(values, counts)}


class Tokenize(Step[Segmented, Tokenized]):
    name = "tokenize"
    runs = "tokenizer"
    makes = "tokenized"
    after = "words"

    @classmethod
    def enabled(cls, params) -> bool:
        return True


    @functools.cached_property
    def whole_documents(self) -> bool:
        """Each document is encoded whole (:func:`document_cuts`): its objective cuts its records from that
        encoding, and the tokenizer encodes what lies between paragraphs (without, its pieces' tokens end to
        end already are the document's, as they always were)."""
        return self.job.vocabulary.paragraph_sensitive and self.job.objective.encodes_documents

    def apply(self, parts: list[Segmented], run: TaskRun) -> list[Tokenized]:
        for part in parts:  # what a run(run) step placed after this one still reads as part.documents
            run.drop(part, "documents", "segments", *(("words",) if isinstance(part, Worded) else ()))
        return [self._tokenize(part, run) for part in parts]

    def _tokenize(self, part: Segmented, run: TaskRun) -> Tokenized:
        stats, vocabulary = run.stats, self.job.vocabulary
        segmented = part.segments
        words = part.words if isinstance(part, Worded) else None
        with stats.timed("tokenize"):
            if words is None and self.whole_documents:
                texts, cuts, parts_per_segment, unplaced = document_cuts(part.documents, segmented)
                if unplaced:
                    run.report.skip("pieces_not_in_document_text", unplaced)  # kept, each piece encoded alone
                ids, part_lengths, word_starts = vocabulary.encode_documents(texts, cuts)
                lengths = _per_segment(part_lengths, parts_per_segment)
            else:
                if words is None:
                    pieces = list(chain.from_iterable(chain.from_iterable(segmented)))
                    continues = continuing_pieces(part.documents, segmented) if vocabulary.start_sensitive else None
                    ids, piece_lengths, word_starts = vocabulary.encode_with_word_starts(pieces, continues)
                else:
                    ids, piece_lengths, word_starts, unmapped = words.encode(vocabulary)
                    if unmapped:
                        run.report.skip("han_text_not_one_token_per_character", unmapped)  # kept, tokenizer's words
                lengths = _per_segment(piece_lengths, list(map(len, chain.from_iterable(segmented))))
            tokenized, unusable = TokenizedDocuments.from_segments(
                ids, lengths, np.fromiter(map(len, segmented), dtype=np.int64, count=len(segmented)), word_starts)
        if unusable:
            run.report.skip("no_usable_sentence", unusable)
        stats.segments += tokenized.num_segments
        segment_offsets = np.asarray(tokenized.segment_offsets, dtype=np.int64)
        per_document = np.diff(segment_offsets[np.asarray(tokenized.document_offsets, dtype=np.int64)])
        for bin_name, documents in document_token_bins(per_document).items():
            stats.count(tokens_per_document_name(part.split), bin_name, documents)
        if part.split == TRAIN:
            stats.documents += tokenized.num_documents
            stats.tokens += len(ids)
        else:
            stats.count(part.split, "documents", tokenized.num_documents)
            stats.count(part.split, "tokens", len(ids))
        return Tokenized(part.split, part.key, part.stem, tokenized, len(ids))

    @classmethod
    def identity(cls, params) -> dict:
        return {}  # the tokenizer is part of the identity as the job's own field

    @classmethod
    def versions(cls, params, config) -> dict[str, int]:
        """2 for a tokenizer that treats a text's start apart: its sentences are encoded within their
        paragraph since (``Vocabulary.encode_with_word_starts``); the others' tokens never changed.  And 2 for
        an objective cut from each document's encoding with a tokenizer that encodes paragraph breaks: each
        document is encoded whole since (``Vocabulary.encode_documents``)."""
        from common.job.params import PluginError
        from common.objectives import objective_named
        from common.tokenization.vocabulary import paragraph_sensitive_json, start_sensitive_json

        versions = super().versions(params, config)
        if start_sensitive_json(config.tokenizer_json):
            versions["tokenize:start-sensitive"] = 2
        try:
            whole = objective_named(config.objective.name).encodes_documents
        except (ValueError, PluginError):
            whole = False
        if whole and paragraph_sensitive_json(config.tokenizer_json):
            versions["tokenize:whole-documents"] = 2
        return versions


def document_cuts(documents: list, segmented: list[list[list[str]]]
                  ) -> tuple[list[str], list[list[int]], list[int], int]:
    """What :meth:`Vocabulary.encode_documents` encodes: each document's text (``Document.text``) and where its
    segments after the first start in it (a segment takes the whitespace before it), and per segment how many of
    the parts so cut it has.  A text is cut only where a segment starts, never between the pieces of one: the
    tokens of a segment are all that is kept of its pieces, and a cut the tokenizer may not be cut at sends the
    text through HF's offsets (a one-segment document is encoded alone, on the fast encoder).  A document whose
    pieces are not its text's in order (a plugin segmenter's own) has each piece a text of its own, one part
    each; how many such pieces is the fourth value."""
    texts: list[str] = []
    cuts: list[list[int]] = []
    parts: list[int] = []
    unplaced = 0
    for document, segments in zip(documents, segmented):
        if not any(segments):
            continue
        text = document.text
        at: list[int] = []
        end = 0
        placed = True
        for segment in segments:
            for index, piece in enumerate(segment):
                start = text.find(piece, end)
                if start < 0:
                    placed = False
                    break
                if end and not index:
                    at.append(end)
                end = start + len(piece)
            if not placed:
                break
        if placed:
            texts.append(text)
            cuts.append(at)
            parts += [1] * len(segments)
            continue
        pieces = [piece for segment in segments for piece in segment]
        texts += pieces
        cuts += [[] for _ in pieces]
        parts += map(len, segments)
        unplaced += len(pieces)
    return texts, cuts, parts, unplaced


def continuing_pieces(documents: list, segmented: list[list[list[str]]]) -> list[bool]:
    """Per piece: it goes on from the piece before it in one paragraph (a segmenter's pieces are its
    document's stripped paragraphs cut end to end), so the tokenizer sees them as the paragraph they make.
    A document whose pieces are not so (a plugin segmenter's own) has each piece a text of its own."""
    flags: list[bool] = []
    for document, segments in zip(documents, segmented):
        paragraphs = [paragraph for paragraph in (line.strip() for line in document.lines) if paragraph]
        pieces = [piece for segment in segments for piece in segment]
        flags += _continuing(paragraphs, pieces)
    return flags


def _continuing(paragraphs: list[str], pieces: list[str]) -> list[bool]:
    flags, paragraph, used = [], 0, 0
    for piece in pieces:
        if not piece or paragraph >= len(paragraphs) or not paragraphs[paragraph].startswith(piece, used):
            return [False] * len(pieces)
        flags.append(used > 0)
        used += len(piece)
        if used == len(paragraphs[paragraph]):
            paragraph, used = paragraph + 1, 0
    return flags


def _per_segment(piece_lengths: np.ndarray, pieces_per_segment: list[int]) -> np.ndarray:
    """Tokens per segment from tokens per piece (most segments are one piece): per-piece counts are used for
    nothing else."""
    counts = np.asarray(pieces_per_segment, dtype=np.int64)
    if len(counts) == len(piece_lengths):
        return piece_lengths
    if not len(counts):
        return np.zeros(0, dtype=np.int64)
    return np.add.reduceat(piece_lengths, np.concatenate(([0], np.cumsum(counts)[:-1])))
