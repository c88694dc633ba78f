"""Any encoder's tokenizer (WordPiece, BPE, Unigram) as objectives need it.

The tokenizer is loaded once by the ventilator (common/tokenization/loading.py),
validated, and shipped to workers as ``tokenizers`` JSON
(:meth:`Vocabulary.to_json`).  A :class:`Vocabulary` adds what objectives
need: special ids by role (common/tokenization/special_tokens.py), where
words begin (common/tokenization/word_boundaries.py), and bulk encoding that
never turns text into a special token.

Special tokens in text: HF ``tokenizers`` splits added special tokens out of
the text (``"a <mask> b"`` gives the mask id), and a Unigram model matches
its ``[MASK]`` piece inside text; google-research/bert's vocab.txt path and
sentencepiece do neither.  So text is encoded with a copy of the tokenizer
(:func:`text_safe_spec`) whose special added tokens are dropped and whose
special pieces are renamed to strings no pre-tokenized word can hold (they
contain a space); ids and scores are unchanged, and a probe at load checks
that no special token (but the unknown one, which unknown text legitimately
gives) comes out of text.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, field

import numpy as np
from tokenizers import Tokenizer

from common.tokenization.loading import (
    BERT_MAX_INPUT_CHARS_PER_WORD,
    ReferenceCasing,
    TokenizerError,
    bert_tokenizer_from_vocab,
    check_model,
    configured_roles,
    load_tokenizer,
    lowercases,
)
from common.tokenization.special_tokens import ROLES, SpecialTokenError, find_roles, special_contents
from common.tokenization.word_boundaries import (
    BYTE_LEVEL_SPACE,
    CONTINUATION,
    START_MARKER,
    WordBoundaries,
    detect,
    first_token_of_each,
    marker_word_starts,
    starts_word_by_id,
    word_ids_starts,
)

__all__ = ["BERT_MAX_INPUT_CHARS_PER_WORD", "SpecialIds", "TokenizerError", "Vocabulary", "bert_tokenizer_from_vocab",
           "load_tokenizer", "load_vocabulary", "text_safe_spec"]

#: Texts per encode_batch call: bounds the memory of HF's Encoding objects.
_ENCODE_BATCH = 2048

#: The longest text a run of continuing texts is joined into (the segmenters' bound on one segment).
PARAGRAPH_CHARS = 100_000
#: Sentence pairs whose tokens alone and together tell whether a tokenizer treats a text's start apart.
SEAM_PROBES = tuple(("The cat sat on the mat.", separator + "Then it slept.")
                    for separator in (" ", "  ", "\t", "\u00a0", "\u2003", "\u3000", "\x0b", "\x0c", "", " \t")
                    ) + (("他来了。", "她走了。"), ("“好的。”", "他说：“走吧！”"),
                         ("x。", "他"))

#: Texts (two paragraphs) whose tokens alone and joined by each break tell whether a tokenizer encodes the whitespace
#: between paragraphs (a byte-level BPE's ``Ċ``, a Unigram's unknown newline): then an objective that cuts its
#: records from each document's encoding needs the document encoded whole (:meth:`Vocabulary.encode_documents`).
PARAGRAPH_PROBES = (("The cat sat on the mat.", "Then it slept."), ("他来了。", "她走了。"), ("x", "y"))
PARAGRAPH_BREAKS = ("\n", "\n\n", " \n", "\n ", "\r\n", "\n\n\n", "\n\t")
#: Whitespace a text may be cut before (a document at its sentences' and paragraphs' starts): a tokenizer whose
#: texts so cut encode as the whole (byte-level BPE without ``add_prefix_space``) encodes a document as its
#: pieces, on its fast encoder.
SEAM_WHITESPACE = (" ", "  ", "\t", "\n", "\n\n", " \n", "\n ", "\r\n", "\n\n\n", "\u00a0", "\u2003", "\u3000",
                   "\x0b", "\x0c", " \t", "\n\t", "\u2028")

#: The key of the JSON shipped to workers when roles were named explicitly
#: (a plain tokenizers JSON otherwise: tokenizers refuses unknown keys).
_WRAPPER_KEYS = {"tokenizer", "special_tokens"}


@dataclass
class SpecialIds:
    """What objectives need of a tokenizer: the special tokens' ids by role
    (None when the tokenizer has no such token), the vocabulary's size, and
    which ids begin a word (for whole-word and n-gram masking).  Where the
    tokenizer's words need more than a per-id table (byte-level BPE,
    SentencePiece, pre-tokenizer words), TokenizedDocuments also carries
    per-token ``word_starts``, which take precedence."""

    cls: int | None
    sep: int | None
    mask: int | None
    pad: int | None
    unk: int | None
    vocab_size: int
    starts_word: np.ndarray  # bool per id


def text_safe_spec(spec: dict, specials: dict[str, int]) -> dict:
    """The tokenizer JSON text is encoded with: no special added token, and
    special pieces of the model renamed out of reach (same ids and scores).  ``spec`` is left as it was: what
    this changes is copied (a deep copy of a 30,000-piece vocabulary cost every role ~15-90 ms, issue #33)."""
    spec = {**spec, "added_tokens": [t for t in spec.get("added_tokens") or [] if not t.get("special")]}
    model = spec["model"] = dict(spec["model"])
    vocab = model.get("vocab")
    if isinstance(vocab, dict):
        vocab = model["vocab"] = dict(vocab)
    elif vocab is not None:
        vocab = model["vocab"] = [list(entry) if entry[0] in specials else entry for entry in vocab]
    taken = set(vocab) if isinstance(vocab, dict) else {piece for piece, _ in vocab}

    def renamed(content: str) -> str:
        name = f" {content} "
        while name in taken:
            name += " "
        taken.add(name)
        return name

    if isinstance(vocab, dict):
        for content in specials:
            if content in vocab:
                new = renamed(content)
                vocab[new] = vocab.pop(content)
                if model.get("unk_token") == content:
                    model["unk_token"] = new
    else:
        for entry in vocab:
            if entry[0] in specials:
                entry[0] = renamed(entry[0])
    return spec


@dataclass
class Vocabulary:
    """A tokenizer with its special ids by role, word boundaries and bulk encoding."""

    tokenizer: Tokenizer
    size: int
    roles: dict[str, int | None]
    starts_word: np.ndarray  # bool per id
    boundaries: WordBoundaries
    #: Roles named explicitly (flags, a model directory's configuration): shipped with the JSON.
    given_roles: dict[str, str] = field(default_factory=dict)
    #: The tokenizer text is encoded with (:func:`text_safe_spec`): :attr:`text_tokenizer`.
    _text_tokenizer: Tokenizer | None = field(default=None, repr=False, compare=False)
    #: What builds it at first use when it was not built at load (``from_tokenizer(..., for_text=False)``).
    _text_safe: tuple[dict, dict[str, int]] | None = field(default=None, repr=False, compare=False)
    #: nanotoken (WordPiece), kitoken (byte-level BPE) or a pre-token cache (Unigram) with exactly HF's ids
    #: (fast_wordpiece.py, fast_bpe.py, fast_unigram.py), made on first use; None when none
    #: reproduces this tokenizer (HF is used).
    _fast: object = field(default=None, init=False, repr=False, compare=False)
    _fast_checked: bool = field(default=False, init=False, repr=False, compare=False)

    @classmethod
    def from_tokenizer(cls, tokenizer: Tokenizer, special_tokens: dict[str, str] | None = None, *,
                       for_text: bool = True) -> Vocabulary:
        """``for_text=False``: for a role that only describes the tokenizer (the sink's dataset_info.json):
        the tokenizer text is encoded with, and its check, are made at first use, not at load (~50 ms)."""
        check_model(tokenizer)
        given = {role: token for role, token in (special_tokens or {}).items() if token}
        spec = json.loads(tokenizer.to_str())
        vocab = tokenizer.get_vocab(with_added_tokens=True)
        if not vocab:
            raise TokenizerError("empty vocabulary")
        try:
            roles = find_roles(spec, vocab, given)
        except SpecialTokenError as error:
            raise TokenizerError(str(error)) from None
        size = max(vocab.values()) + 1
        specials = special_contents(spec, vocab, roles)
        boundaries = detect(spec)
        # The unknown token comes out of text, inside words too: it follows the family's rule.
        starts_word = starts_word_by_id(vocab, size, boundaries, set(specials.values()) - {roles["unk"]})
        vocabulary = cls(tokenizer, size, roles, starts_word, boundaries, given, _text_safe=(spec, specials))
        if for_text:
            vocabulary.text_tokenizer  # noqa: B018 - built and checked now: a refusal comes before any work
        return vocabulary

    @property
    def text_tokenizer(self) -> Tokenizer:
        """The tokenizer text is encoded with (:func:`text_safe_spec`), checked to keep special tokens out."""
        if self._text_tokenizer is None:
            assert self._text_safe is not None, "a Vocabulary made without from_tokenizer has no text tokenizer"
            spec, specials = self._text_safe
            text_tokenizer = Tokenizer.from_str(json.dumps(text_safe_spec(spec, specials)))
            _check_specials_stay_out_of_text(text_tokenizer, specials, self.roles.get("unk"))
            self._text_tokenizer, self._text_safe = text_tokenizer, None
        return self._text_tokenizer

    # Ids by role (None when the tokenizer has no such token).
    cls_id = property(lambda self: self.roles["cls"])
    sep_id = property(lambda self: self.roles["sep"])
    mask_id = property(lambda self: self.roles["mask"])
    pad_id = property(lambda self: self.roles["pad"])
    unk_id = property(lambda self: self.roles["unk"])

    @property
    def is_continuation(self) -> np.ndarray:
        """Bool per id: the piece continues a word (the complement of ``starts_word``)."""
        return ~self.starts_word

    @property
    def special(self) -> SpecialIds:
        return SpecialIds(self.cls_id, self.sep_id, self.mask_id, self.pad_id, self.unk_id, self.size,
                          self.starts_word)

    def describe(self) -> str:
        """One line for the log: model, size, roles, word boundaries."""
        roles = ", ".join(f"{role} {self.tokenizer.id_to_token(i)!r}" if i is not None else f"{role} none"
                          for role, i in self.roles.items())
        return (f"{type(self.tokenizer.model).__name__}, {self.size} ids; {roles}; "
                f"{'lower-cases its input' if lowercases(self.tokenizer) else 'keeps case'}; "
                f"{self.boundaries.describe()}")

    def casing_warning(self) -> str | None:
        """A tokenizer that keeps case but whose pieces have no upper-case
        letter is an uncased model fed cased text: most capitalised words
        would become rare pieces or the unknown token."""
        if lowercases(self.tokenizer):
            return None
        pieces = self.tokenizer.get_vocab()
        cased = sum(1 for piece in pieces if any(ch.isupper() for ch in piece) and piece not in self._special_tokens())
        letters = sum(1 for piece in pieces if any(ch.isalpha() for ch in piece))
        if cased == 0 and letters >= 100:
            return (f"the tokenizer keeps case, but none of its {letters} pieces with letters has an upper-case "
                    "one (an uncased model?): pass --do-lower-case")
        return None

    def _special_tokens(self) -> set[str]:
        return {self.tokenizer.id_to_token(i) for i in self.roles.values() if i is not None}

    @classmethod
    def from_json(cls, text: str, *, for_text: bool = True) -> Vocabulary:
        tokenizer, special_tokens = _parse_shipped(text)
        return cls.from_tokenizer(tokenizer, dict(special_tokens or {}), for_text=for_text)

    def to_json(self) -> str:
        """The tokenizers JSON; with the explicitly named roles when there are any."""
        if not self.given_roles:
            return self.tokenizer.to_str()
        return json.dumps({"tokenizer": json.loads(self.tokenizer.to_str()),
                           "special_tokens": {role: self.given_roles[role] for role in ROLES
                                              if role in self.given_roles}})

    def _fast_encoder(self):
        if not self._fast_checked:
            self._fast_checked = True
            kind = type(self.tokenizer.model).__name__
            if kind == "WordPiece" and os.environ.get("MLM_FAST_WORDPIECE", "1") != "0":
                from common.tokenization.fast_wordpiece import make_fast_encoder

                self._fast = make_fast_encoder(self.text_tokenizer.to_str(), hf=self.text_tokenizer)
            elif kind == "BPE" and os.environ.get("MLM_FAST_BPE", "1") != "0":
                from common.tokenization.fast_bpe import make_fast_encoder

                self._fast = make_fast_encoder(self.text_tokenizer.to_str(), hf=self.text_tokenizer)
            elif kind == "Unigram" and os.environ.get("MLM_FAST_UNIGRAM", "1") != "0":
                from common.tokenization.fast_unigram import make_fast_encoder as make_unigram

                self._fast = make_unigram(self.text_tokenizer.to_str(), hf=self.text_tokenizer)
        return self._fast

    def encode_many(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Token ids of many texts as one flat int32 array plus lengths, no
        special token added and none taken from the text.

        nanotoken / kitoken / fast_unigram when they reproduce this tokenizer exactly
        (checked against HF when first made; MLM_FAST_WORDPIECE=0 /
        MLM_FAST_BPE=0 / MLM_FAST_UNIGRAM=0 turn them off), HF otherwise.
        """
        fast = self._fast_encoder()
        if fast is not None:
            return fast(texts)
        ids, lengths, _ = self._encode_hf(texts, with_words=False)
        return ids, lengths

    def encode_with_word_starts(self, texts: list[str], continues: list[bool] | None = None
                                ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """:meth:`encode_many` plus per-token word starts (bool), or None where
        the per-id ``starts_word`` table is exact (the ``##`` family).

        ``continues[i]``: text ``i`` goes on from text ``i - 1`` in one
        paragraph (a sentence after the one before it).  For a tokenizer that
        treats a text's start apart (:attr:`start_sensitive`), such texts are
        encoded as the paragraph they make, and its tokens shared out by
        their offsets (:meth:`_encode_paragraphs`): a sentence's tokens are
        then the ones it has in its paragraph, whatever separates it from the
        sentence before."""
        if continues is not None and any(continues) and self.start_sensitive:
            return self._encode_paragraphs(texts, continues)
        if self.boundaries.kind == CONTINUATION:
            ids, lengths = self.encode_many(texts)
            return ids, lengths, None
        if self.boundaries.kind == START_MARKER:
            ids, lengths = self.encode_many(texts)
            return ids, lengths, marker_word_starts(ids, lengths, self.starts_word)
        return self._encode_hf(texts, with_words=True)

    @functools.cached_property
    def start_sensitive(self) -> bool:
        """Whether a sentence encoded alone can get other tokens than it has after the sentence before it in
        their paragraph (byte-level BPE's ``add_prefix_space`` adds a ``Ġ`` before a tab or NBSP, Metaspace a
        ``▁`` before a tab, a ``Strip`` normalizer drops a leading tab, a Unigram piece spans ``。他``):
        found by encoding probe pairs alone and together."""
        return _start_sensitive(self.text_tokenizer)

    @functools.cached_property
    def paragraph_sensitive(self) -> bool:
        """Whether two paragraphs encoded alone can get other tokens than their document, joined by a line break,
        has (the break is a token, or changes one): probed as :attr:`start_sensitive` is."""
        return _paragraph_sensitive(self.text_tokenizer)

    @functools.cached_property
    def safe_seams(self) -> frozenset[str]:
        """The whitespace runs a text may be cut right before and encode as its two parts end to end (every one
        of them for byte-level BPE without ``add_prefix_space``; a single space for Metaspace or a prefix space):
        probed with sentence pairs, as :attr:`start_sensitive` is."""
        texts = []
        pairs = [*SEAM_PROBES, *PARAGRAPH_PROBES]
        for space in SEAM_WHITESPACE:
            for first, second in pairs:
                texts += [first.rstrip(), space + second.lstrip(), first.rstrip() + space + second.lstrip()]
        encodings = iter(self.text_tokenizer.encode_batch(texts, add_special_tokens=False))
        safe = set()
        for space in SEAM_WHITESPACE:
            triples = [(next(encodings), next(encodings), next(encodings)) for _ in pairs]
            if all(a.ids + b.ids == whole.ids for a, b, whole in triples):
                safe.add(space)
        return frozenset(safe)

    @functools.cached_property
    def whitespace_ids(self) -> np.ndarray:
        """Bool per id: the piece is whitespace only (``Ċ``, ``ĠĠ``, ``▁``): the token after it begins a word."""
        table = np.zeros(self.size, dtype=bool)
        if self.boundaries.kind != START_MARKER:
            return table
        byte_level = self.boundaries.marker == BYTE_LEVEL_SPACE
        for token, index in self.tokenizer.get_vocab(with_added_tokens=True).items():
            if index in self._special_ids():
                continue
            text = _byte_level_text(token) if byte_level else token.replace(self.boundaries.marker or "", " ")
            table[index] = bool(text) and text.isspace()
        return table

    def _special_ids(self) -> set[int]:
        return {index for index in self.roles.values() if index is not None}

    def encode_documents(self, texts: list[str], cuts: list[list[int]]
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Each text (a document) encoded as the tokenizer encodes it whole, its tokens shared out among its
        pieces: piece ``k`` of text ``t`` is ``t[cuts[k - 1]:cuts[k]]`` (the first from 0, the last to the end),
        and a token belongs to the piece where it starts.  Returns the flat ids, tokens per piece (every text's
        pieces in order) and per-token word starts (None for the ``##`` family).

        A text is cut where a piece starts with whitespace the tokenizer may be cut before (:attr:`safe_seams`:
        the parts encode as the whole); each part of one piece is encoded alone (:meth:`encode_many`: the fast
        encoder where there is one), a part of several pieces by HF, its tokens shared out by their offsets.  So
        a text without cuts (a one-segment document: the tokenize step cuts only where a segment starts) is
        encoded alone."""
        safe = self.safe_seams
        parts: list[str] = []
        inner: list[list[int]] = []
        pieces_per_text: list[int] = []
        for text, at in zip(texts, cuts):
            start, within = 0, list[int]()
            for cut in at:
                end = cut
                while end < len(text) and text[end].isspace():
                    end += 1
                if end > cut and text[cut:end] in safe:
                    parts.append(text[start:cut])
                    inner.append([c - start for c in within])
                    start, within = cut, list[int]()
                else:
                    within.append(cut)
            parts.append(text[start:])
            inner.append([c - start for c in within])
            pieces_per_text.append(len(at) + 1)
        alone = [not within for within in inner]
        singles = [part for part, one in zip(parts, alone) if one]
        if self.boundaries.kind in (CONTINUATION, START_MARKER):
            single_ids, single_lengths = self.encode_many(singles)
            single_words = None
        else:
            single_ids, single_lengths, single_words = self._encode_hf(singles, with_words=True)
        if all(alone):
            ids, lengths, words = single_ids, single_lengths, single_words
        else:
            joined = [(part, within) for part, within, one in zip(parts, inner, alone) if not one]
            hf_ids, hf_lengths, hf_words = self._encode_with_offsets(joined)
            ids, lengths, words = _interleave(alone, [len(within) + 1 for within in inner],
                                              (single_ids, single_lengths, single_words),
                                              (hf_ids, hf_lengths, hf_words))
        document_starts = np.cumsum([0] + pieces_per_text[:-1], dtype=np.int64)
        piece_offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        first_tokens = piece_offsets[document_starts] if pieces_per_text else np.zeros(0, dtype=np.int64)
        first_tokens = first_tokens[first_tokens < len(ids)]
        if self.boundaries.kind == CONTINUATION:
            return ids, lengths, None
        if self.boundaries.kind == START_MARKER:
            starts = self.starts_word[ids] if len(ids) else np.zeros(0, dtype=bool)
            if len(ids) > 1:
                starts[1:] |= self.whitespace_ids[ids[:-1]]  # a word after a line break or a run of spaces
        else:
            starts = np.asarray(words, dtype=bool)
        starts[first_tokens] = True  # a document begins a word
        return ids, lengths, starts

    def _encode_with_offsets(self, texts: list[tuple[str, list[int]]]):
        """HF's encoding of each whole text, its tokens shared out among its pieces by their offsets (as
        :meth:`encode_documents`); word starts from the pre-tokenizer's words where the family needs them."""
        chunks: list[np.ndarray] = []
        words: list[bool] = []
        lengths: list[np.ndarray] = []
        with_words = self.boundaries.kind not in (CONTINUATION, START_MARKER)
        for batch_start in range(0, len(texts), _ENCODE_BATCH):
            batch = texts[batch_start:batch_start + _ENCODE_BATCH]
            encodings = self.text_tokenizer.encode_batch([text for text, _ in batch], add_special_tokens=False)
            for (_, at), encoding in zip(batch, encodings):
                ids = encoding.ids
                token_starts = np.fromiter((start for start, _ in encoding.offsets), dtype=np.int64, count=len(ids))
                owner = np.maximum.accumulate(np.searchsorted(np.asarray(at, dtype=np.int64), token_starts, "right"))
                lengths.append(np.bincount(owner, minlength=len(at) + 1).astype(np.int64))
                if ids:
                    chunks.append(np.asarray(ids, dtype=np.int32))
                    if with_words:
                        words.extend(word_ids_starts(encoding.word_ids))
        flat = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int32)
        per_piece = np.concatenate(lengths) if lengths else np.zeros(0, dtype=np.int64)
        return flat, per_piece, (np.asarray(words, dtype=bool) if with_words else None)

    def _encode_paragraphs(self, texts: list[str], continues: list[bool]):
        """Each run of continuing texts encoded as the one text it makes (a paragraph, at most
        PARAGRAPH_CHARS long: a longer one is cut at a text's start), its tokens given to the text where each
        begins (HF's offsets).  Each text's first token begins a word, as when texts are encoded alone."""
        runs: list[list[int]] = []  # [first, end) of each run
        chars = 0
        for index, text in enumerate(texts):
            if index and continues[index] and chars + len(text) <= PARAGRAPH_CHARS:
                runs[-1][1], chars = index + 1, chars + len(text)
            else:
                runs.append([index, index + 1])
                chars = len(text)
        chunks: list[np.ndarray] = []
        words: list[bool] = []
        lengths = np.zeros(len(texts), dtype=np.int64)
        with_words = self.boundaries.kind not in (CONTINUATION, START_MARKER)
        for batch_start in range(0, len(runs), _ENCODE_BATCH):
            batch = runs[batch_start:batch_start + _ENCODE_BATCH]
            encodings = self.text_tokenizer.encode_batch(["".join(texts[a:b]) for a, b in batch],
                                                         add_special_tokens=False)
            for (a, b), encoding in zip(batch, encodings):
                ids = encoding.ids
                if not ids:
                    continue
                chunks.append(np.asarray(ids, dtype=np.int32))
                piece_starts = np.cumsum([0] + [len(text) for text in texts[a:b - 1]])
                token_starts = np.fromiter((start for start, _ in encoding.offsets), dtype=np.int64, count=len(ids))
                owner = np.maximum.accumulate(np.maximum(np.searchsorted(piece_starts, token_starts, "right") - 1, 0))
                lengths[a:b] = np.bincount(owner, minlength=b - a)
                if with_words:
                    words.extend(word_ids_starts(encoding.word_ids))
        flat = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int32)
        if self.boundaries.kind == CONTINUATION:
            return flat, lengths, None
        if self.boundaries.kind == START_MARKER:
            return flat, lengths, marker_word_starts(flat, lengths, self.starts_word)
        starts = np.asarray(words, dtype=bool)
        starts[first_token_of_each(lengths)] = True
        return flat, lengths, starts

    def _encode_hf(self, texts: list[str], with_words: bool):
        chunks: list[np.ndarray] = []
        starts: list[bool] = []
        lengths = np.zeros(len(texts), dtype=np.int64)
        for start in range(0, len(texts), _ENCODE_BATCH):
            batch = self.text_tokenizer.encode_batch(texts[start:start + _ENCODE_BATCH], add_special_tokens=False)
            for i, encoding in enumerate(batch):
                ids = encoding.ids
                lengths[start + i] = len(ids)
                if ids:
                    chunks.append(np.asarray(ids, dtype=np.int32))
                    if with_words:
                        starts.extend(word_ids_starts(encoding.word_ids))
        flat = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int32)
        return flat, lengths, (np.asarray(starts, dtype=bool) if with_words else None)


def _start_sensitive(tokenizer: Tokenizer) -> bool:
    texts = [text for pair in SEAM_PROBES for text in (*pair, "".join(pair))]
    encodings = tokenizer.encode_batch(texts, add_special_tokens=False)
    return any(a.ids + b.ids != whole.ids for a, b, whole in zip(*(iter(encodings),) * 3))


def _paragraph_sensitive(tokenizer: Tokenizer) -> bool:
    texts = [text for first, second in PARAGRAPH_PROBES for text in (first, second)]
    texts += [first + separator + second for first, second in PARAGRAPH_PROBES for separator in PARAGRAPH_BREAKS]
    encodings = tokenizer.encode_batch(texts, add_special_tokens=False)
    alone = {text: encoding.ids for text, encoding in zip(texts, encodings)}
    return any(alone[first] + alone[second] != alone[first + separator + second]
               for first, second in PARAGRAPH_PROBES for separator in PARAGRAPH_BREAKS)


@functools.cache
def _byte_level_bytes() -> dict[str, int]:
    """ByteLevel's printable stand-in for each byte, back to the byte (GPT-2's table, as ``tokenizers`` has it)."""
    from tokenizers import pre_tokenizers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    printable = [b for b in range(256) if 33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255]
    table = {chr(b): b for b in printable}
    others = [b for b in range(256) if b not in table.values()]
    table.update({chr(256 + n): b for n, b in enumerate(others)})
    assert set(table) == set(alphabet), "ByteLevel's alphabet is not GPT-2's byte table"
    return table


def _byte_level_text(token: str) -> str:
    """A byte-level piece's text (its bytes decoded; "" when they are not whole UTF-8 characters)."""
    table = _byte_level_bytes()
    try:
        return bytes(table[ch] for ch in token).decode("utf-8")
    except (KeyError, UnicodeDecodeError):
        return ""


def _interleave(apart: list[bool], pieces: list[int], *groups):
    """Two groups' (ids, per-piece lengths, word starts) put back in their texts' order: ``groups[0]`` holds the
    texts where ``apart`` is True, ``groups[1]`` the others; ``pieces``: each text's pieces.  Each group keeps its
    order, so a piece's (and a token's) group says where it comes from: two masked assignments, no loop over
    texts (a loop of numpy slices was ~15% of a byte-level BPE worker)."""
    (ids0, lengths0, words0), (ids1, lengths1, words1) = groups
    piece_group = np.repeat(np.asarray(apart, dtype=bool), np.asarray(pieces, dtype=np.int64))
    lengths = np.empty(len(piece_group), dtype=np.int64)
    lengths[piece_group] = lengths0[:int(piece_group.sum())]
    lengths[~piece_group] = lengths1[:len(piece_group) - int(piece_group.sum())]
    token_group = np.repeat(piece_group, lengths)
    first = int(token_group.sum())
    ids = np.empty(len(token_group), dtype=np.int32)
    ids[token_group] = ids0[:first]
    ids[~token_group] = ids1[:len(token_group) - first]
    if words0 is None and words1 is None:
        return ids, lengths, None
    words = np.empty(len(token_group), dtype=bool)
    words[token_group] = words0[:first]
    words[~token_group] = words1[:len(token_group) - first]
    return ids, lengths, words


@functools.lru_cache(maxsize=1)
def described_vocabulary(tokenizer_json: str) -> Vocabulary:
    """A job's tokenizer, built once for every description of its output (dataset_info.json, the card, a
    format's features; a BERT vocabulary takes ~0.15 s to build), never encoding: its text tokenizer is not
    built (``for_text=False``)."""
    return Vocabulary.from_json(tokenizer_json, for_text=False)


@functools.lru_cache(maxsize=4)
def paragraph_sensitive_json(tokenizer_json: str) -> bool:
    """:attr:`Vocabulary.paragraph_sensitive` of a job's tokenizer JSON (for its id).  The text tokenizer's
    answer: the shipped one's added special tokens do not come out of probe text."""
    try:
        vocabulary = Vocabulary.from_json(tokenizer_json, for_text=False)
    except Exception:  # not a tokenizer: the job fails where it loads it, with its own one line
        return False
    return vocabulary.paragraph_sensitive


@functools.lru_cache(maxsize=1)
def _parse_shipped(text: str) -> tuple[Tokenizer, dict[str, str] | None]:
    """The tokenizer of the JSON :meth:`Vocabulary.to_json` ships, and its explicitly named roles (None when
    there are none).  A plain tokenizers JSON (the usual case) is read as it is, with no parse to look for the
    wrapper first (~10 ms for a BERT vocabulary): tokenizers refuses the wrapper's keys.  The last one is kept:
    a worker or sink reads the job's JSON for its id (:func:`start_sensitive_json`) and again for its
    Vocabulary, and nothing changes a tokenizer once loaded (~20 ms a read)."""
    try:
        return Tokenizer.from_str(text), None
    except Exception:  # a bare Rust error: perhaps the wrapper, else the parse below says why
        spec = json.loads(text)
        if isinstance(spec, dict) and set(spec) == _WRAPPER_KEYS:
            return Tokenizer.from_str(json.dumps(spec["tokenizer"])), spec["special_tokens"]
        raise


@functools.lru_cache(maxsize=4)
def start_sensitive_json(tokenizer_json: str) -> bool:
    """:attr:`Vocabulary.start_sensitive` of a job's tokenizer JSON (for its id), without building a Vocabulary."""
    try:
        tokenizer, _roles = _parse_shipped(tokenizer_json)
    except Exception:  # not a tokenizer: the job fails where it loads it, with its own one line
        return False
    return _start_sensitive(tokenizer)


def _check_specials_stay_out_of_text(text_tokenizer: Tokenizer, specials: dict[str, int], unk: int | None) -> None:
    """A special token's text must not come out as its id (the unknown token
    may: unknown text gives it)."""
    guarded = {index for index in specials.values() if index != unk}
    if not guarded:
        return
    probes = [form.format(content) for content in specials for form in ("{}", "a{}b", "a {} b", " {} ")]
    for encoding, probe in zip(text_tokenizer.encode_batch(probes, add_special_tokens=False), probes):
        leaked = guarded.intersection(encoding.ids)
        if leaked:
            raise TokenizerError(f"text {probe!r} gives the special id {min(leaked)}: this tokenizer's "
                                 "pre-tokenizer does not keep special tokens apart from text")


def load_vocabulary(vocab_file: str | None = None, tokenizer_file: str | None = None,
                    do_lower_case: bool | None = None, special_tokens: dict[str, str | None] | None = None,
                    reference: ReferenceCasing = ReferenceCasing()) -> Vocabulary:  # noqa: B008 - frozen dataclass, never mutated
    """The ventilator's entry point: the tokenizer, with roles from the model
    directory's configuration overridden by explicit ones (flags).
    Casing: :func:`common.tokenization.loading.load_tokenizer`."""
    roles = configured_roles(tokenizer_file)
    roles.update({role: token for role, token in (special_tokens or {}).items() if token})
    return Vocabulary.from_tokenizer(load_tokenizer(vocab_file, tokenizer_file, do_lower_case, reference),
                                     roles)
