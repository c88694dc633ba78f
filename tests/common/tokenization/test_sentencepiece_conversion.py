"""A SentencePiece .model converted to tokenizers JSON gives sentencepiece's ids.

The model is trained here with the ``sentencepiece`` package on the shared
corpus, ALBERT-style (tests/support/tokenizer_families.py).  Exact on every segment
and line of the corpus.  Known normalisation differences, pinned below: HF's
``Precompiled`` normalizer looks up whole grapheme clusters where
sentencepiece matches code point prefixes, so a base character followed by
combining marks or a zero-width joiner (``e`` + four accents, a space +
U+0308, U+00A0 + U+200D) can normalise differently.
"""

from __future__ import annotations

import random
import unicodedata

import numpy as np
import pytest

from common.readers import ParseReport, reader_named
from common.segmenters.sentences import Segmenter, split_segments
from common.tokenization import TokenizerError, load_tokenizer, load_vocabulary
from common.tokenization.sentencepiece_conversion import (
    CONTROL,
    NORMAL,
    UNKNOWN,
    USER_DEFINED,
    ConversionError,
    convert,
    parse_model,
)
from tests.common.tokenization.test_fast_wordpiece import ADVERSARIAL
from tests.support.helpers import WIKI, need_shared
from tests.support.tokenizer_families import corpus_lines, tokenizer_path, train_sentencepiece

spm = pytest.importorskip("sentencepiece", reason="the conversion is checked against the sentencepiece package")

#: Adversarial strings (tests/common/tokenization/test_fast_wordpiece.py) known to differ, and why.
KNOWN = {"e\u0301\u0302\u0303\u0304": "stacked combining marks: sentencepiece composes e+U+0301, HF keeps e"}


@pytest.fixture(scope="module")
def model():
    need_shared()
    path = tokenizer_path("sentencepiece")
    return path, spm.SentencePieceProcessor(model_file=path), load_vocabulary(tokenizer_file=path, do_lower_case=False)


def rows(vocabulary, texts):
    ids, lengths = vocabulary.encode_many(texts)
    return [row.tolist() for row in np.split(ids, np.cumsum(lengths)[:-1])] if len(texts) else []


def differing(model, texts):
    _, processor, vocabulary = model
    return [t for t, a, b in zip(texts, processor.encode(list(texts)), rows(vocabulary, texts)) if a != b]


def test_same_ids_as_sentencepiece_on_the_corpus(model):
    reader = reader_named("wikiextractor")()
    sentences, lines = [], []
    for path in sorted(WIKI.rglob("wiki_*")):
        for document in reader.parse(path.read_bytes(), 0, ParseReport()):
            sentences.extend(split_segments(document.lines, Segmenter.BLINGFIRE))
            lines.extend(split_segments(document.lines, Segmenter.LINE))
    assert len(sentences) > 10000
    assert differing(model, sentences) == []
    assert differing(model, lines) == []


def test_adversarial_strings_differ_only_where_known(model):
    texts = ADVERSARIAL + ["[MASK] [CLS] <pad> <unk>", "a[MASK]b", "  two  spaces  ", "\t\ttabs\t", "((x))-y."]
    assert set(differing(model, texts)) == set(KNOWN)


def test_random_unicode_differs_only_on_grapheme_clusters(model):
    rng = random.Random(7)
    alphabet = " \t\n\u00a0\u3000\u200b\u200d\ufeff\u0301\u0308\u0345Σİ()-."
    texts = ["".join(rng.choice(alphabet) if rng.random() < 0.4 else chr(rng.randint(0x20, 0x2FFFF))
                     for _ in range(rng.randint(0, 40))) for _ in range(5000)]
    texts = [t.encode("utf-8", "ignore").decode("utf-8", "ignore") for t in texts if not any(
        0xD800 <= ord(c) <= 0xDFFF for c in t)]
    bad = differing(model, texts)
    assert len(bad) < len(texts) // 20
    assert all(any(unicodedata.combining(c) or c == "\u200d" for c in t) for t in bad), bad[:3]


def test_the_protobuf_is_read_as_sentencepiece_reads_it(model):
    path, processor, _ = model
    with open(path, "rb") as handle:
        parsed = parse_model(handle.read())
    assert len(parsed["pieces"]) == processor.get_piece_size()
    for index, (piece, score, kind) in enumerate(parsed["pieces"]):
        assert piece == processor.id_to_piece(index)
        assert kind == (CONTROL if processor.is_control(index) else UNKNOWN if processor.is_unknown(index)
                        else USER_DEFINED if piece in "()-." else NORMAL)
        if kind == NORMAL:
            assert score == pytest.approx(processor.get_score(index))
    assert parsed["trainer"]["unk_id"] == processor.unk_id() == 1


def test_roles_from_the_model(model):
    _, processor, vocabulary = model
    assert {role: processor.id_to_piece(i) for role, i in vocabulary.roles.items()} == {
        "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]", "pad": "<pad>", "unk": "<unk>"}


def test_a_model_directory_applies_albert_preprocessing(tmp_path, model):
    path, processor, _ = model
    directory = tmp_path / "albert"
    directory.mkdir()
    (directory / "spiece.model").write_bytes(open(path, "rb").read())
    (directory / "tokenizer_config.json").write_text('{"do_lower_case": true, "keep_accents": false}')
    vocabulary = load_vocabulary(tokenizer_file=str(directory))
    assert rows(vocabulary, ["The Café"]) == [processor.encode("the cafe")]


def test_what_is_not_converted_is_refused(tmp_path):
    need_shared()
    bpe = tmp_path / "bpe.model"
    bpe.write_bytes(train_sentencepiece(corpus_lines()[:300], vocab_size=500, model_type="bpe"))
    with pytest.raises(TokenizerError, match="only Unigram"):
        load_tokenizer(tokenizer_file=str(bpe))
    garbage = tmp_path / "x.model"
    garbage.write_bytes(b"\x0a\xff\xff\xff")
    with pytest.raises(TokenizerError, match="x.model"):
        load_tokenizer(tokenizer_file=str(garbage))
    with pytest.raises(ConversionError, match="no pieces"):
        convert(b"")


def test_a_user_defined_mask_piece_written_in_text_stays_text(tmp_path):
    """sentencepiece itself turns a user-defined piece written in text into its
    id (control pieces it never does).  When that piece is the mask token, the
    project does not: a document's "[MASK]" must not become a masked position
    (docs/tokenizers.md)."""
    need_shared()
    lines = [line for line in corpus_lines()[:1000]]
    path = tmp_path / "user-mask.model"
    import io

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=model, vocab_size=1500,
                                   pad_id=0, unk_id=1, bos_id=-1, eos_id=-1, control_symbols="[CLS],[SEP]",
                                   user_defined_symbols="[MASK]", minloglevel=2, num_threads=1)
    path.write_bytes(model.getvalue())
    processor = spm.SentencePieceProcessor(model_file=str(path))
    mask = processor.piece_to_id("[MASK]")
    assert mask in processor.encode("the [MASK] of it")  # sentencepiece: the id
    vocabulary = load_vocabulary(tokenizer_file=str(path), do_lower_case=False)
    assert vocabulary.special.mask == mask
    ids = rows(vocabulary, ["the [MASK] of it"])[0]
    assert mask not in ids and len(ids) > 3  # here: text
    assert rows(vocabulary, ["the mask of it"]) == [processor.encode("the mask of it")]
