"""Small tokenizers of every family, trained on ../shared's corpus (nothing
downloaded), for the tokenizer tests and the end-to-end runs.

* ``wordpiece``: bert-base-uncased's vocab.txt (the shared one);
* ``bpe``: RoBERTa-style byte-level BPE (``Ġ`` word starts), mlm-train-vocab's;
* ``unigram``: ALBERT-style Unigram over Metaspace (``▁``), mlm-train-vocab's;
* ``sentencepiece``: a SentencePiece Unigram ``.model`` trained with the
  ``sentencepiece`` package as ALBERT's 30k-clean.model was (``<pad> <unk>
  [CLS] [SEP] [MASK]`` as ids 0-4, user-defined punctuation);
* ``bpe-words``: a BPE after a Whitespace pre-tokenizer with no per-piece
  marker, so words come from the pre-tokenizer's word ids.

Training is sized to take a few seconds; each is built once per session.

Also built (not in ``FAMILIES``): ``modernbert``, a byte-level BPE shaped like ModernBERT's own tokenizer.json
(OLMo's, which ModernBERT's repository names as its tokenizer: ``generate_eval_config.py`` defaults to
``bclavie/olmo_bert_template``): no normalizer, ByteLevel without a prefix space, runs of 2-24 spaces as
added (not special) tokens matched in text, ``<|padding|> <|endoftext|>`` first and ``[UNK] [CLS] [SEP] [PAD]
[MASK]`` after the vocabulary (``[MASK]`` with ``lstrip``, as its fill-mask pipeline needs), and a
``[CLS] $A [SEP]`` template post-processor.
"""

from __future__ import annotations

import atexit
import functools
import io
import shutil
import tempfile
from pathlib import Path

from tests.support.helpers import VOCAB, WIKI

FAMILIES = ("wordpiece", "bpe", "unigram", "sentencepiece", "bpe-words")

#: Each family's role tokens, as the tokenizer's own configuration gives them.
ROLE_TOKENS = {
    "wordpiece": {"cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]", "pad": "[PAD]", "unk": "[UNK]"},
    "bpe": {"cls": "<s>", "sep": "</s>", "mask": "<mask>", "pad": "<pad>", "unk": "<unk>"},
    "unigram": {"cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]", "pad": "<pad>", "unk": "<unk>"},
    "sentencepiece": {"cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]", "pad": "<pad>", "unk": "<unk>"},
    "bpe-words": {"cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]", "pad": "[PAD]", "unk": "[UNK]"},
}


@functools.lru_cache(maxsize=1)
def corpus_lines() -> tuple[str, ...]:
    from common.tokenization.training import corpus_lines as lines_of

    return tuple(lines_of(str(WIKI)))


@functools.lru_cache(maxsize=1)
def _directory() -> Path:
    """One directory per test process, removed when it exits."""
    path = Path(tempfile.mkdtemp(prefix="mlm-tokenizers-"))
    atexit.register(shutil.rmtree, path, True)
    return path


def train_sentencepiece(lines, vocab_size: int = 2000, model_type: str = "unigram") -> bytes:
    import sentencepiece as spm

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=model, vocab_size=vocab_size,
                                   model_type=model_type, pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
                                   control_symbols="[CLS],[SEP],[MASK]", user_defined_symbols="(,),-,.",
                                   minloglevel=2, num_threads=1, character_coverage=0.9995)
    return model.getvalue()


@functools.cache
def tokenizer_path(family: str) -> str:
    """A file for --vocab-file (wordpiece) or --tokenizer (the others)."""
    from common.tokenization.training import train_bpe, train_unigram

    lines = corpus_lines()
    if family == "wordpiece":
        return str(VOCAB)
    path = _directory() / f"{family}.json"
    if family == "bpe":
        train_bpe(lines, 2000, do_lower_case=False).save(str(path))
    elif family == "unigram":
        train_unigram(lines[:800], 1000, do_lower_case=True).save(str(path))
    elif family == "sentencepiece":
        path = _directory() / "albert-like.model"
        path.write_bytes(train_sentencepiece(lines[:1000]))
    elif family == "modernbert":
        modernbert_like(lines, 2000).save(str(path))
    elif family == "bpe-words":
        from tokenizers import Tokenizer, models, pre_tokenizers, trainers

        tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
        tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
        specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        tokenizer.train_from_iterator(lines, trainer=trainers.BpeTrainer(vocab_size=2000, special_tokens=specials,
                                                                         show_progress=False))
        tokenizer.save(str(path))
    else:
        raise ValueError(family)
    return str(path)


def modernbert_like(lines, vocab_size: int):
    """A byte-level BPE of ModernBERT's tokenizer.json's shape (see the module doc), trained on ``lines``."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|padding|>", "<|endoftext|>"],
                                  show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(lines, trainer=trainer)
    tokenizer.add_tokens([AddedToken(" " * n, normalized=True, special=False) for n in range(24, 1, -1)])
    tokenizer.add_special_tokens([AddedToken("[UNK]"), AddedToken("[CLS]"), AddedToken("[SEP]"), AddedToken("[PAD]"),
                                  AddedToken("[MASK]", lstrip=True)])
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:0 [SEP]:0",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    return tokenizer


def vocabulary_of(family: str):
    from common.tokenization import load_vocabulary

    path = tokenizer_path(family)
    if family == "wordpiece":
        return load_vocabulary(vocab_file=path)
    return load_vocabulary(tokenizer_file=path)


def ventilator_args(family: str) -> list[str]:
    return ["--vocab-file" if family == "wordpiece" else "--tokenizer", tokenizer_path(family)]
