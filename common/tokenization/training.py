"""``mlm-train-vocab``: a BERT WordPiece vocabulary from a corpus, no download.

Real pretraining uses the model's own vocabulary (bert-base-uncased's
vocab.txt); this is for trying the pipeline on a machine with nothing
downloaded, and for corpora in languages BERT's vocabulary does not cover.
"""

from __future__ import annotations

import os
from typing import Iterator

import click

from common.readers import ParseReport, detect, reader_named
from common.storage import LocalStorage
from common.tokenization.vocabulary import REQUIRED_SPECIAL_TOKENS


def corpus_lines(data: str, corpus_format: str = "auto") -> Iterator[str]:
    storage = LocalStorage(data)
    for f in storage.list_inputs():
        content = storage.read_all(f.path, f.version)
        reader = (detect(content[:65536]) if corpus_format == "auto" else reader_named(corpus_format))()
        for document in reader.parse(content, 0, ParseReport()):
            yield from (line for line in document.lines if line.strip())


def train_vocabulary(lines, vocab_size: int, do_lower_case: bool = True) -> list[str]:
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=do_lower_case, strip_accents=do_lower_case)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    # BERT's layout: [PAD] first (id 0 pads), then [UNK] [CLS] [SEP] [MASK].
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert set(special) == set(REQUIRED_SPECIAL_TOKENS)
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=special,
                                        continuing_subword_prefix="##", show_progress=False)
    tokenizer.train_from_iterator(lines, trainer=trainer)
    vocab = tokenizer.get_vocab()
    return [token for token, _ in sorted(vocab.items(), key=lambda item: item[1])]


@click.command(context_settings={"auto_envvar_prefix": "MLM_VOCAB", "show_default": True,
                                 "help_option_names": ["-h", "--help"]})
@click.option("--data", show_envvar=True, required=True, type=click.Path(exists=True), help="Corpus directory or file (any supported format).")
@click.option("--output", show_envvar=True, required=True, type=click.Path(dir_okay=False), help="vocab.txt to write (one token per line).")
@click.option("--vocab-size", show_envvar=True, type=click.IntRange(min=10), default=8000)
@click.option("--do-lower-case/--no-do-lower-case", show_envvar=True, default=True)
@click.option("--format", "corpus_format", show_envvar=True, type=click.Choice(["auto", "wikiextractor", "json", "text"]), default="auto",
              envvar="MLM_VOCAB_FORMAT")
def main(data: str, output: str, vocab_size: int, do_lower_case: bool, corpus_format: str) -> None:
    """Train a BERT WordPiece vocabulary (vocab.txt) on a corpus."""
    tokens = train_vocabulary(corpus_lines(data, corpus_format), vocab_size, do_lower_case)
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    with open(output, "w", encoding="utf-8") as handle:
        handle.write("\n".join(tokens) + "\n")
    click.echo(f"wrote {len(tokens)} tokens to {output}", err=True)


if __name__ == "__main__":
    main()
