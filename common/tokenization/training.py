"""``mlm-train-vocab``: a tokenizer of each family from a corpus, no download.

Real pretraining uses the model's own tokenizer (bert-base-uncased's
vocab.txt, roberta-base's tokenizer.json, ALBERT's 30k-clean.model); this is
for trying the pipeline on a machine with nothing downloaded, and for
corpora in languages those tokenizers do not cover.

* ``--model wordpiece``: BERT's layout, a vocab.txt (``[PAD] [UNK] [CLS]
  [SEP] [MASK]`` first, ``##`` continuations), read with ``--vocab-file``.
* ``--model bpe``: RoBERTa's layout, a tokenizer.json: byte-level BPE (``Ġ``
  marks a word start, no unknown bytes), ``<s> <pad> </s> <unk> <mask>`` as
  ids 0-4 (RoBERTa puts ``<mask>`` last; first keeps the ids of every
  special token independent of the vocabulary size), RobertaProcessing.
* ``--model unigram``: ALBERT's layout, a tokenizer.json: Unigram over
  Metaspace (``▁`` marks a word start), NFKC, ``<pad> <unk> [CLS] [SEP]
  [MASK]`` as ids 0-4 as in ALBERT's 30k-clean.model, ``[CLS] $A [SEP] $B
  [SEP]`` post-processor.

* ``--model sentencepiece``: the SentencePiece library's own Unigram trainer,
  a ``.model`` with ALBERT's ids (``<pad> <unk> [CLS] [SEP] [MASK]``),
  read with ``--tokenizer``.  ``--character-coverage`` is SentencePiece's: the
  share of the corpus's characters the model must cover, the rest becoming
  ``<unk>`` (its advice: 1.0 for small alphabets, 0.9995 for Chinese and
  Japanese, whose thousands of rare characters would otherwise fill the
  vocabulary).  tokenizers' Unigram trainer has no such setting: it keeps
  every character it sees.

``--do-lower-case`` lower-cases for every family (and strips accents for
WordPiece, as BERT's uncased models); by default on for wordpiece and
unigram (BERT uncased, ALBERT), off for bpe (RoBERTa is cased, and a BPE
without a normalizer gets the fast exact encoder, common/tokenization/fast_bpe.py).  The special tokens are declared
special and named by the post-processor, so ``--tokenizer`` finds their
roles without flags.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import click

from common.job.cli_settings import SectionedCommand, command_option, command_settings
from common.job.tasks import compression_of
from common.readers import ParseReport, detect, reader_named, readers
from common.readers.content import decompress
from common.storage import LocalStorage, StorageError, open_storage, scheme_of

#: Each file is read as one task (a vocabulary is trained on a sample, not on hundreds of GB).
_WHOLE_FILE = 1 << 62


def corpus_lines(data: str, corpus_format: str = "auto") -> Iterator[str]:
    """Every non-blank paragraph line of every document, through the same readers as the pipeline.  Each
    file's format is found first (ValueError, one line, for a file whose first lines disagree)."""
    storage = open_storage(data)
    chosen = []
    for f in storage.list_inputs():
        if corpus_format == "auto":
            with storage.open_reader(f.path, f.version) as handle:
                head = handle.read_at(0, 65536)
            if compression_of(f.path):
                head = decompress(storage.read_all(f.path, f.version), compression_of(f.path))[:65536]
            try:
                reader = detect(head, f.path)()
            except ValueError as error:
                raise ValueError(f"--format auto: {f.path}: {error}") from None
        else:
            reader = reader_named(corpus_format)()
        chosen.append((f, reader))
    return _lines(storage, chosen)


def _lines(storage, chosen) -> Iterator[str]:
    for f, reader in chosen:
        for task in reader.plan([f], _WHOLE_FILE, storage):
            for document in reader.documents(task, reader.read(storage, task), ParseReport()):
                yield from (line for line in document.lines if line.strip())


def _existing_corpus(ctx, param, value: str) -> str:
    """A local path must exist (as click.Path checks); an object store's URI is checked when it is listed."""
    if scheme_of(value) == LocalStorage.name:
        return str(click.Path(exists=True).convert(value, param, ctx))
    return value


MODELS = ("wordpiece", "bpe", "unigram", "sentencepiece")
BPE_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
UNIGRAM_SPECIALS = ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"]


def train_bpe(lines, vocab_size: int, do_lower_case: bool = False):
    """A RoBERTa-style byte-level BPE tokenizer (see the module doc)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    if do_lower_case:
        tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=BPE_SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(lines, trainer=trainer)
    tokenizer.post_processor = processors.RobertaProcessing(("</s>", tokenizer.token_to_id("</s>")),
                                                            ("<s>", tokenizer.token_to_id("<s>")))
    return tokenizer


def train_unigram(lines, vocab_size: int, do_lower_case: bool = True):
    """An ALBERT-style SentencePiece-like Unigram tokenizer (see the module doc)."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.Unigram())
    steps = [normalizers.NFKC()] + ([normalizers.Lowercase()] if do_lower_case else [])
    steps += [normalizers.Strip(), normalizers.Replace(Regex(" {2,}"), " ")]
    tokenizer.normalizer = normalizers.Sequence(steps)
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=UNIGRAM_SPECIALS, unk_token="<unk>",
                                      show_progress=False)
    tokenizer.train_from_iterator(lines, trainer=trainer)
    tokenizer = _stable_unigram(tokenizer)
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    return tokenizer


#: Unigram scores are kept to this many decimals: the trainer sums in a hash map's order, which is seeded per
#: process, so the same corpus gave scores that differ in the last bit from run to run.
UNIGRAM_SCORE_DECIMALS = 6


def _stable_unigram(tokenizer):
    """The trained Unigram with its scores rounded and its pieces in a stated
    order: the special tokens first, as trained, then by descending score,
    ties by the piece's code points.  Same corpus, same file."""
    import json

    from tokenizers import Tokenizer

    spec = json.loads(tokenizer.to_str())
    pieces = spec["model"]["vocab"]
    specials = [[piece, 0.0] for piece, _ in pieces[:len(UNIGRAM_SPECIALS)]]
    assert [piece for piece, _ in specials] == UNIGRAM_SPECIALS, "the trainer put its special tokens first"
    rest = [[piece, round(score, UNIGRAM_SCORE_DECIMALS)] for piece, score in pieces[len(UNIGRAM_SPECIALS):]]
    # The trainer appends the characters no kept piece covers with scores just below the lowest piece's, one
    # 1e-4 step each, in a hash set's order: the same characters get the same scores, handed out in code point
    # order.
    singles = [item for item in rest if len(item[0]) == 1]
    lowest = min((score for piece, score in rest if len(piece) > 1), default=0.0)
    appended = [item for item in singles if item[1] <= lowest + 1e-4 * (len(singles) + 1)]
    for item, score in zip(sorted(appended, key=lambda item: item[0]),
                           sorted((item[1] for item in appended), reverse=True)):
        item[1] = score
    rest.sort(key=lambda item: (-item[1], item[0]))
    spec["model"]["vocab"] = specials + rest
    spec["model"]["unk_id"] = UNIGRAM_SPECIALS.index("<unk>")
    return Tokenizer.from_str(json.dumps(spec))


#: SentencePiece's own default, and its advice for languages of rich character sets (CJK).
DEFAULT_CHARACTER_COVERAGE = 0.9995
#: Bytes per line the SentencePiece trainer takes (its default, 4192, drops most Chinese paragraphs, which have
#: no spaces to be cut at).
SENTENCEPIECE_MAX_LINE_BYTES = 1 << 16


def train_sentencepiece(lines, vocab_size: int, do_lower_case: bool = True,
                        character_coverage: float = DEFAULT_CHARACTER_COVERAGE) -> bytes:
    """A SentencePiece Unigram .model in ALBERT's layout (see the module doc)."""
    import io

    import sentencepiece as spm

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=(line.lower() if do_lower_case else line for line in lines), model_writer=model,
        vocab_size=vocab_size, model_type="unigram", character_coverage=character_coverage,
        pad_id=0, unk_id=1, bos_id=-1, eos_id=-1, control_symbols=UNIGRAM_SPECIALS[2:],
        max_sentence_length=SENTENCEPIECE_MAX_LINE_BYTES, num_threads=1, minloglevel=2)
    return model.getvalue()


def train_vocabulary(lines, vocab_size: int, do_lower_case: bool = True) -> list[str]:
    """BERT's layout: [PAD] first (id 0 pads), then [UNK] [CLS] [SEP] [MASK]; deterministic
    (common/tokenization/wordpiece_training.py)."""
    from common.tokenization.wordpiece_training import train_wordpiece, word_counts

    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    return train_wordpiece(word_counts(lines, do_lower_case), vocab_size, special)


@click.command(cls=SectionedCommand, context_settings=command_settings("train-vocab"))
@command_option("--data", show_envvar=True, required=True, metavar="PATH", callback=_existing_corpus,
              help="Corpus directory or file (any supported format), or an object store's prefix (s3://, gs://).")
@command_option("--output", show_envvar=True, required=True, type=click.Path(dir_okay=False),
              help="File to write: vocab.txt (wordpiece, one token per line), tokenizer.json (bpe, unigram) or a "
                   ".model (sentencepiece).")
@command_option("--model", show_envvar=True, type=click.Choice(MODELS), default="wordpiece",
              help="wordpiece (BERT), bpe (RoBERTa's byte-level BPE), unigram (ALBERT's SentencePiece-like Unigram, as "
                   "tokenizer.json) or sentencepiece (the SentencePiece library's Unigram, as a .model).")
@command_option("--vocab-size", show_envvar=True, type=click.IntRange(min=10), default=8000,
              help="Tokens the vocabulary holds, its special tokens included.")
@command_option("--do-lower-case/--no-do-lower-case", show_envvar=True, default=None,
              help="Lower-case the text.",
              described="on for wordpiece and unigram, off for bpe")
@command_option("--format", "corpus_format", show_envvar=True, type=click.Choice(["auto", *sorted(readers())]),
              default="auto", help="Input format; auto detects it from the first file.")
@command_option("--character-coverage", show_envvar=True, type=click.FloatRange(0.9, 1.0), default=None,
              help="--model sentencepiece: the share of the corpus's characters the model covers (SentencePiece's "
                   "setting; 1.0 for small alphabets, 0.9995 for Chinese/Japanese).",
              described=str(DEFAULT_CHARACTER_COVERAGE))
def main(data: str, output: str, model: str, vocab_size: int, do_lower_case: bool | None,
         corpus_format: str, character_coverage: float | None) -> None:
    """Train a tokenizer on a corpus: a BERT WordPiece vocab.txt (use it with
    --vocab-file), a BPE / Unigram tokenizer.json or a SentencePiece .model
    (use them with --tokenizer)."""
    if character_coverage is not None and model != "sentencepiece":
        raise click.UsageError("--character-coverage is for --model sentencepiece")
    if do_lower_case is None:
        do_lower_case = model != "bpe"
    try:
        train(data, output, model, vocab_size, do_lower_case, corpus_format, character_coverage)
    except (StorageError, ValueError) as error:  # the corpus's store; a file whose first lines disagree
        raise click.ClickException(str(error)) from None


def train(data: str, output: str, model: str, vocab_size: int, do_lower_case: bool, corpus_format: str,
          character_coverage: float | None) -> None:
    lines = corpus_lines(data, corpus_format)
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    if model == "sentencepiece":
        try:
            data_bytes = train_sentencepiece(lines, vocab_size, do_lower_case,
                                             character_coverage or DEFAULT_CHARACTER_COVERAGE)
        except RuntimeError as error:  # the trainer's own reason (a vocabulary larger than the corpus allows...)
            raise click.ClickException(f"sentencepiece: {str(error).strip().splitlines()[-1]}") from None
        with open(output, "wb") as handle:
            handle.write(data_bytes)
        click.echo(f"wrote a sentencepiece model of {vocab_size} pieces to {output}", err=True)
        return
    if model == "wordpiece":
        tokens = train_vocabulary(lines, vocab_size, do_lower_case)
        with open(output, "w", encoding="utf-8") as handle:
            handle.write("\n".join(tokens) + "\n")
        click.echo(f"wrote {len(tokens)} tokens to {output}", err=True)
        return
    tokenizer = (train_bpe if model == "bpe" else train_unigram)(lines, vocab_size, do_lower_case)
    tokenizer.save(output)
    click.echo(f"wrote a {model} tokenizer of {tokenizer.get_vocab_size()} tokens to {output}", err=True)


if __name__ == "__main__":
    main()
