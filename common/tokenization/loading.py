"""Where a tokenizer comes from: a BERT vocab.txt, a tokenizers JSON, a
SentencePiece ``.model``, or a local Hugging Face model directory holding
one of them.  Everything becomes a ``tokenizers.Tokenizer`` here, once, in
the ventilator; workers get its JSON."""

from __future__ import annotations

import glob
import json
import os
from dataclasses import dataclass

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # one core per worker process

from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

#: google-research/bert's WordpieceTokenizer gives up on words longer than
#: this (HF's own default is 100): we follow BERT.
BERT_MAX_INPUT_CHARS_PER_WORD = 200

SUPPORTED_MODELS = ("WordPiece", "BPE", "Unigram")

#: SentencePiece file names in model directories (ALBERT/T5/XLNet, XLM-R/CamemBERT).
SENTENCEPIECE_NAMES = ("spiece.model", "sentencepiece.bpe.model", "sentencepiece.model", "tokenizer.model")


class TokenizerError(ValueError):
    """The tokenizer cannot be used (reason in the message)."""


@dataclass(frozen=True)
class ReferenceCasing:
    """What an objective's reference script does to text before a bare
    SentencePiece model, when no flag says otherwise.  ALBERT's
    create_pretraining_data.py runs every line through preprocess_text:
    NFKD with combining marks dropped, always, and lower-casing under
    do_lower_case (True by default)."""

    lower_case: bool = True
    sentencepiece_strips_accents: bool = False


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
        raise TokenizerError(f"{vocab_file}: vocabulary lacks [UNK] (WordPiece needs an unknown token)")
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]",
                                           max_input_chars_per_word=BERT_MAX_INPUT_CHARS_PER_WORD))
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=do_lower_case, lowercase=do_lower_case)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return tokenizer


def _read_config(model_dir: str) -> dict:
    path = os.path.join(model_dir, "tokenizer_config.json")
    if not os.path.exists(path):
        return {}
    try:
        with open(path, encoding="utf-8") as handle:
            config = json.load(handle)
    except (OSError, ValueError) as error:
        raise TokenizerError(f"{path}: unreadable ({error})") from None
    return config if isinstance(config, dict) else {}


def sentencepiece_tokenizer(path: str, lowercase: bool = False, keep_accents: bool = True,
                            replace_quotes: bool = True) -> Tokenizer:
    """A SentencePiece .model converted to tokenizers (same ids)."""
    from common.tokenization.sentencepiece_conversion import ConversionError, convert

    try:
        with open(path, "rb") as handle:
            data = handle.read()
        return Tokenizer.from_str(convert(data, lowercase=lowercase, keep_accents=keep_accents,
                                          replace_quotes=replace_quotes))
    except OSError as error:
        raise TokenizerError(f"{path}: unreadable ({error})") from None
    except ConversionError as error:
        raise TokenizerError(f"{path}: {error}") from None


def _from_model_directory(path: str, do_lower_case: bool | None) -> Tokenizer:
    """A model directory says how it cases (tokenizer.json's normalizer,
    tokenizer_config.json's do_lower_case); an explicit flag overrides it."""
    config = _read_config(path)
    if os.path.exists(os.path.join(path, "tokenizer.json")):
        return apply_lower_case(_from_json_file(os.path.join(path, "tokenizer.json")), do_lower_case, path)
    vocab = os.path.join(path, "vocab.txt")
    if os.path.exists(vocab):
        lower = do_lower_case if do_lower_case is not None else bool(config.get("do_lower_case", True))
        return bert_tokenizer_from_vocab(vocab, lower)
    found = [os.path.join(path, name) for name in SENTENCEPIECE_NAMES if os.path.exists(os.path.join(path, name))]
    found = found or sorted(glob.glob(os.path.join(path, "*.model")))
    if found:
        # ALBERT/XLNet's Python tokenizers lower-case and strip accents before sentencepiece when their config says so.
        lower = do_lower_case if do_lower_case is not None else bool(config.get("do_lower_case", False))
        return sentencepiece_tokenizer(found[0], lowercase=lower, keep_accents=bool(config.get("keep_accents", True)))
    raise TokenizerError(f"{path}: a model directory needs tokenizer.json, vocab.txt or a SentencePiece .model")


def lowercases(tokenizer: Tokenizer) -> bool:
    """Whether the tokenizer's normalizer lower-cases its input (Lowercase, or
    BertNormalizer's lowercase, at any depth of a Sequence)."""
    def walk(spec) -> bool:
        if not isinstance(spec, dict):
            return False
        kind = spec.get("type")
        if kind == "Lowercase":
            return True
        if kind == "BertNormalizer":
            return bool(spec.get("lowercase"))
        return kind == "Sequence" and any(walk(step) for step in spec.get("normalizers") or [])
    return walk(json.loads(tokenizer.to_str()).get("normalizer"))


def apply_lower_case(tokenizer: Tokenizer, do_lower_case: bool | None, where: str) -> Tokenizer:
    """A tokenizers JSON cases as its normalizer says; ``--do-lower-case`` puts
    Lowercase in front of it (as ALBERT's reference lower-cases before
    sentencepiece), and ``--no-do-lower-case`` cannot undo a normalizer
    that lower-cases (TokenizerError)."""
    if do_lower_case is None:
        return tokenizer
    if do_lower_case and not lowercases(tokenizer):
        current = tokenizer.normalizer
        steps = [normalizers.Lowercase()] + ([current] if current is not None else [])
        tokenizer.normalizer = normalizers.Sequence(steps)
    elif not do_lower_case and lowercases(tokenizer):
        raise TokenizerError(f"{where}: --no-do-lower-case, but this tokenizer lower-cases in its own normalizer "
                             "(an uncased model): drop the flag")
    return tokenizer


def _from_json_file(path: str) -> Tokenizer:
    try:
        tokenizer = Tokenizer.from_file(path)
    except Exception as error:  # tokenizers raises a bare Exception
        raise TokenizerError(f"{path}: not a tokenizers JSON file ({error})") from error
    check_model(tokenizer, path)
    return tokenizer


def check_model(tokenizer: Tokenizer, where: str = "the tokenizer") -> None:
    kind = type(tokenizer.model).__name__
    if kind not in SUPPORTED_MODELS:
        raise TokenizerError(f"{where}: a {kind} model is not supported (supported: {', '.join(SUPPORTED_MODELS)})")


def load_tokenizer(vocab_file: str | None = None, tokenizer_file: str | None = None,
                   do_lower_case: bool | None = None, reference: ReferenceCasing = ReferenceCasing()) -> Tokenizer:
    """From a vocab.txt, a tokenizers JSON, a SentencePiece .model, or a local HF model directory.

    ``do_lower_case`` (None: not given) applies to every family.  When it is
    not given: a vocab.txt lower-cases (BERT's default), a bare SentencePiece
    .model does as the objective's ``reference`` script does (ALBERT's
    lower-cases every line and drops accents before sentencepiece), and a
    tokenizers JSON or model directory does as it says itself.
    """
    if tokenizer_file:
        path = tokenizer_file
        if os.path.isdir(path):
            return _from_model_directory(path, do_lower_case)
        if not os.path.exists(path):
            raise TokenizerError(f"--tokenizer {path}: no such file or directory")
        with open(path, "rb") as handle:
            head = handle.read(64).lstrip()
        if not head.startswith(b"{"):
            from common.tokenization.sentencepiece_conversion import looks_like_sentencepiece

            if path.endswith(".model") or looks_like_sentencepiece(head):
                lower = do_lower_case if do_lower_case is not None else reference.lower_case
                return sentencepiece_tokenizer(path, lowercase=lower,
                                               keep_accents=not reference.sentencepiece_strips_accents,
                                               replace_quotes=False)
            if path.endswith(".txt"):
                raise TokenizerError(f"--tokenizer {path}: not a tokenizers JSON (a BERT vocab.txt goes with "
                                     "--vocab-file)")
        return apply_lower_case(_from_json_file(path), do_lower_case, path)
    if vocab_file:
        if not os.path.exists(vocab_file):
            raise TokenizerError(f"--vocab-file {vocab_file}: no such file")
        return bert_tokenizer_from_vocab(vocab_file, True if do_lower_case is None else do_lower_case)
    raise TokenizerError("no tokenizer: pass --vocab-file (a BERT vocab.txt) or --tokenizer (tokenizer.json, a "
                         "SentencePiece .model, or a model directory)")


def configured_roles(tokenizer_file: str | None) -> dict[str, str]:
    """Roles a model directory's configuration names (empty for a file)."""
    from common.tokenization.special_tokens import model_directory_roles

    if tokenizer_file and os.path.isdir(tokenizer_file):
        return model_directory_roles(tokenizer_file)
    return {}
