"""The objective interface: a task's tokenized documents in, records out.

An objective (BERT's MLM + NSP, ALBERT's SOP, ELECTRA's packed examples,
MLM-only blocks, token sequences for trainers that build samples
themselves) turns one task's :class:`TokenizedDocuments` into batches of
records, ``passes`` times (BERT's dupe_factor), and declares the features it
writes.  Its random draws come only from :func:`derive_seed` of (seed, task,
pass), so its output does not depend on the fleet.  Writers see only the
features and the batches; the roles see neither.
"""

from __future__ import annotations

import abc
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from common.job.params import Configurable
from common.objectives.documents import TokenizedDocuments
from common.tokenization.loading import ReferenceCasing
from common.tokenization.vocabulary import SpecialIds

#: The longest instance of an objective that pads every instance to --max-seq-length (bert, albert, electra,
#: roberta): the longest position table of the encoders they train (ModernBERT's 8,192; BERT's, ALBERT's,
#: ELECTRA's and RoBERTa's have 512).  A worker process holds a batch of up to 4,096 such instances, ~40 bytes a
#: position across its arrays and the writer's: ~1.3 GB at 8,192; ~11 GB at 65,536, which no worker survives.
MAX_PADDED_LENGTH = 8192
#: The longest record of an objective that writes each record at its own length (tokens): every format keeps a
#: record's length in an int32.
MAX_RECORD_LENGTH = 2**31 - 1
#: The shared --max-seq-length help's bound, as the padded objectives say it.
LENGTH_HELP = (f"At most {MAX_PADDED_LENGTH:,}: each instance is padded to it (--objective tokens: at most "
               f"{MAX_RECORD_LENGTH:,}; docs/objectives.md, \"Sequence length\").")


def check_length(max_seq_length: int, most: int = MAX_PADDED_LENGTH) -> None:
    """ValueError, one line, for a --max-seq-length past what the objective's records can hold
    (:data:`MAX_PADDED_LENGTH` or :data:`MAX_RECORD_LENGTH`), before any work: past it every task fails."""
    if max_seq_length > most:
        raise ValueError(f"--max-seq-length {max_seq_length} is too long: at most {most:,} for this objective "
                         f"(docs/objectives.md, \"Sequence length\")")


@dataclass(frozen=True)
class Feature:
    """One feature of every record: the dtype its values have in a batch
    (writers may widen it, as TFRecord does to int64) and its length per
    record (None: variable, carried as :class:`Ragged`)."""

    name: str
    dtype: str  # a numpy dtype name: int32, int8, float32, int64
    length: int | None
    bound: int | None = None  # values are below it (token ids: the vocabulary's size), when known


@dataclass
class Ragged:
    """Variable-length values of many records: one flat array plus each record's length."""

    values: np.ndarray
    lengths: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.lengths)

    def rows(self) -> Iterator[np.ndarray]:
        offsets = np.concatenate([[0], np.cumsum(self.lengths)])
        for start, end in zip(offsets[:-1].tolist(), offsets[1:].tolist()):
            yield self.values[start:end]


@dataclass
class Batch:
    """Records as columns, in the order of the objective's features: a 2-D
    array per fixed-length feature, a :class:`Ragged` per variable one."""

    columns: dict[str, np.ndarray | Ragged]

    def __len__(self) -> int:
        return len(next(iter(self.columns.values()))) if self.columns else 0

    def tokens_without_padding(self) -> int:
        """Token positions that hold a token: ``input_mask``'s ones for fixed-length records, every value of
        variable-length ones (they are not padded)."""
        ids = self.columns.get("input_ids")
        if ids is None:
            return 0
        if isinstance(ids, Ragged):
            return int(np.sum(ids.lengths))
        mask = self.columns.get("input_mask")
        if mask is not None and not isinstance(mask, Ragged):
            return int(np.count_nonzero(mask))
        return int(np.asarray(ids).size)


def derive_seed(random_seed: int, task_key: str, pass_index: int, purpose: str) -> int:
    """A 64-bit seed from (seed, task, pass, purpose) only."""
    text = f"{random_seed}\x00{task_key}\x00{pass_index}\x00{purpose}".encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "little")


class Objective(Configurable, abc.ABC):
    """What one training recipe builds from a task's documents."""

    #: Special tokens the objective writes: a tokenizer without one of them is refused before any work.
    needs: ClassVar[tuple[str, ...]] = ()
    #: A sentence-level segmentation is needed (NSP, SOP); otherwise documents may be cut anyhow.
    uses_segments: ClassVar[bool] = True
    #: The unit the reference script adds, when it fixes one ("line": ELECTRA packs its input's lines): what
    #: ``--segmenter auto`` means for this objective (:meth:`unit`).  None: the reader's default.
    segment_unit: ClassVar[str | None] = None
    #: Its records are cut from each document's own encoding (token sequences, MLM blocks, ELECTRA's examples):
    #: the tokenize step encodes each document's text whole, so the whitespace between sentences and paragraphs
    #: is encoded as the tokenizer encodes it.  False: each sentence as its reference script encodes it
    #: (BERT's and ALBERT's scripts tokenize line by line).
    encodes_documents: ClassVar[bool] = False
    #: What the reference script does to text before a bare SentencePiece .model, unless --[no-]do-lower-case
    #: says: BERT's and ELECTRA's do_lower_case=True; ALBERT's also drops accents; fairseq's RoBERTa neither.
    reference_casing: ClassVar[ReferenceCasing] = ReferenceCasing()

    def __init__(self, params, special: SpecialIds):
        self.params = params
        self.special = special

    @classmethod
    def unit(cls, params) -> str | None:
        """What ``--segmenter auto`` means for this objective with these parameters (a segmenter's name), or None
        for the reader's default: :attr:`segment_unit` unless an objective's parameters decide (``tokens``
        keeps no sentence in its chunks)."""
        return cls.segment_unit

    @classmethod
    def check_vocabulary(cls, special: SpecialIds) -> None:
        """ValueError with a one-line reason when the tokenizer lacks a token the objective writes."""
        missing = [role for role in cls.needs if getattr(special, role) is None]
        if missing:
            raise ValueError(f"the {cls.name} objective needs the tokenizer's {', '.join(missing)} token(s); this "
                             f"tokenizer has none (name them with --{missing[0]}-token)")

    @property
    @abc.abstractmethod
    def features(self) -> list[Feature]:
        """The features of every record, in the order batches hold them."""

    @property
    def passes(self) -> int:
        """How many times each task's documents are made into records."""
        return 1

    @property
    def uses_word_starts(self) -> bool:
        """Whether its records depend on where words begin (whole-word masking, a ``word_starts`` feature): a
        --word-segmenter does nothing otherwise, and is refused.  True unless an objective says: one that does
        not (a plugin's) is not second-guessed."""
        return True

    @abc.abstractmethod
    def batches(self, documents: TokenizedDocuments, task_key: str, pass_index: int) -> Iterator[Batch]:
        """The records of one pass over a task's documents, in batches."""
