"""WordPiece tokenization for BERT instances, on HF ``tokenizers``.

The tokenizer is built or loaded once by the ventilator, validated, and
shipped to workers as ``tokenizers`` JSON (:meth:`Vocabulary.to_json`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import numpy as np

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # one core per worker process

from tokenizers import Tokenizer, models, normalizers, pre_tokenizers  # noqa: E402

REQUIRED_SPECIAL_TOKENS = ("[CLS]", "[SEP]", "[MASK]", "[PAD]", "[UNK]")

#: google-research/bert's WordpieceTokenizer gives up on words longer than
#: this (HF's own default is 100): we follow BERT.
BERT_MAX_INPUT_CHARS_PER_WORD = 200

#: Texts per encode_batch call: bounds the memory of HF's Encoding objects.
_ENCODE_BATCH = 2048


class TokenizerError(ValueError):
    """The tokenizer cannot be used for BERT instances (reason in the message)."""


def bert_tokenizer_from_vocab(vocab_file: str, do_lower_case: bool = True) -> Tokenizer:
    """The tokenizer google-research/bert's FullTokenizer describes."""
    vocab: dict[str, int] = {}
    with open(vocab_file, encoding="utf-8") as handle:
        for line in handle:
            token = line.rstrip("\n").strip()
            if token and token not in vocab:
                vocab[token] = len(vocab)
    if not vocab:
        raise TokenizerError(f"{vocab_file}: empty vocabulary")
    if "[UNK]" not in vocab:
        raise TokenizerError(f"{vocab_file}: vocabulary lacks [UNK] (needs {', '.join(REQUIRED_SPECIAL_TOKENS)})")
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=BERT_MAX_INPUT_CHARS_PER_WORD))
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=do_lower_case, lowercase=do_lower_case)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return tokenizer


def load_tokenizer(vocab_file: str | None = None, tokenizer_file: str | None = None,
                   do_lower_case: bool = True) -> Tokenizer:
    """From a vocab.txt, a tokenizer.json, or a local HF model directory."""
    if tokenizer_file:
        path = tokenizer_file
        if os.path.isdir(path):
            if os.path.exists(os.path.join(path, "tokenizer.json")):
                return Tokenizer.from_file(os.path.join(path, "tokenizer.json"))
            vocab = os.path.join(path, "vocab.txt")
            if not os.path.exists(vocab):
                raise TokenizerError(f"{path}: a model directory needs tokenizer.json or vocab.txt")
            lower = _do_lower_case_of(path, do_lower_case)
            return bert_tokenizer_from_vocab(vocab, lower)
        try:
            return Tokenizer.from_file(path)
        except Exception as error:  # tokenizers raises a bare Exception
            raise TokenizerError(f"{path}: not a tokenizers JSON file ({error})") from error
    if vocab_file:
        if not os.path.exists(vocab_file):
            raise TokenizerError(f"--vocab-file {vocab_file}: no such file")
        return bert_tokenizer_from_vocab(vocab_file, do_lower_case)
    raise TokenizerError("no tokenizer: pass --vocab-file (a BERT vocab.txt) or --tokenizer (tokenizer.json or a model directory)")


def _do_lower_case_of(model_dir: str, default: bool) -> bool:
    config = os.path.join(model_dir, "tokenizer_config.json")
    if os.path.exists(config):
        with open(config, encoding="utf-8") as handle:
            return bool(json.load(handle).get("do_lower_case", default))
    return default


@dataclass
class SpecialIds:
    """What objectives need of a tokenizer: the special tokens' ids by role
    (None when the tokenizer has no such token), the vocabulary's size, and
    which ids begin a word (for whole-word and n-gram masking)."""

    cls: int | None
    sep: int | None
    mask: int | None
    pad: int | None
    unk: int | None
    vocab_size: int
    starts_word: np.ndarray  # bool per id


@dataclass
class Vocabulary:
    """What instance building needs from a tokenizer: special ids, size,
    and which ids continue a word (for whole-word masking)."""

    tokenizer: Tokenizer
    size: int
    cls_id: int
    sep_id: int
    mask_id: int
    pad_id: int
    unk_id: int
    is_continuation: np.ndarray  # bool per id: starts with the continuation prefix
    continuation_prefix: str
    #: nanotoken with exactly HF's ids (common/fast_wordpiece.py), made on
    #: first use; None when it cannot reproduce this tokenizer (HF is used).
    _fast: object = field(default=None, init=False, repr=False, compare=False)
    _fast_checked: bool = field(default=False, init=False, repr=False, compare=False)

    @classmethod
    def from_tokenizer(cls, tokenizer: Tokenizer) -> "Vocabulary":
        vocab = tokenizer.get_vocab(with_added_tokens=True)
        missing = [token for token in REQUIRED_SPECIAL_TOKENS if token not in vocab]
        if missing:
            raise TokenizerError(f"vocabulary lacks {', '.join(missing)} (BERT instances need {', '.join(REQUIRED_SPECIAL_TOKENS)})")
        prefix = getattr(tokenizer.model, "continuing_subword_prefix", None)
        if not prefix:
            raise TokenizerError("the tokenizer is not WordPiece with a continuation prefix (e.g. '##'): "
                                 "BERT instances and whole-word masking need one")
        size = max(vocab.values()) + 1
        is_continuation = np.zeros(size, dtype=bool)
        for token, index in vocab.items():
            if token.startswith(prefix):
                is_continuation[index] = True
        return cls(tokenizer, size, vocab["[CLS]"], vocab["[SEP]"], vocab["[MASK]"], vocab["[PAD]"],
                   vocab["[UNK]"], is_continuation, prefix)

    @property
    def special(self) -> SpecialIds:
        return SpecialIds(self.cls_id, self.sep_id, self.mask_id, self.pad_id, self.unk_id, self.size,
                          ~self.is_continuation)

    @classmethod
    def from_json(cls, text: str) -> "Vocabulary":
        return cls.from_tokenizer(Tokenizer.from_str(text))

    def to_json(self) -> str:
        return self.tokenizer.to_str()

    def encode_many(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Token ids of many texts as one flat int32 array plus lengths.

        nanotoken when it reproduces this tokenizer exactly (checked against
        HF when first made; MLM_FAST_WORDPIECE=0 turns it off), HF otherwise.
        """
        if not self._fast_checked:
            self._fast_checked = True
            if os.environ.get("MLM_FAST_WORDPIECE", "1") != "0":
                from common.tokenization.fast_wordpiece import make_fast_encoder

                self._fast = make_fast_encoder(self.to_json())
        if self._fast is not None:
            return self._fast(texts)
        chunks: list[np.ndarray] = []
        lengths = np.zeros(len(texts), dtype=np.int64)
        for start in range(0, len(texts), _ENCODE_BATCH):
            batch = self.tokenizer.encode_batch(texts[start:start + _ENCODE_BATCH], add_special_tokens=False)
            for i, encoding in enumerate(batch):
                ids = encoding.ids
                lengths[start + i] = len(ids)
                if ids:
                    chunks.append(np.asarray(ids, dtype=np.int32))
        flat = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int32)
        return flat, lengths
