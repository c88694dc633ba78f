"""--do-lower-case for every tokenizer family, each objective's reference
default for a bare SentencePiece model, and the casing stated at start.

The ALBERT case is the one users hit: ALBERT's create_pretraining_data.py
runs every line through preprocess_text (NFKD, combining marks dropped,
lower-cased under its default do_lower_case=True) before sentencepiece, so
an uncased spiece.model fed cased text is not the reference's input."""

from __future__ import annotations

import unicodedata

import pytest

from common.objectives import objective_named
from common.tokenization import TokenizerError, Vocabulary, load_tokenizer
from common.tokenization.loading import lowercases
from tests.support.helpers import need_shared
from tests.support.tokenizer_families import corpus_lines, tokenizer_path, train_sentencepiece

spm = pytest.importorskip("sentencepiece", reason="the reference's casing is checked with the sentencepiece package")

TEXT = "The Quick BROWN Fox met Ms. Smith in Paris"


def albert_preprocess_text(line: str, lower: bool) -> str:
    """What ALBERT's reference does to a line before sentencepiece (re-stated from its tokenization.py)."""
    text = " ".join(line.strip().split())
    text = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
    return text.lower() if lower else text


def load(family: str, flag: bool | None, objective: str = "bert"):
    path = tokenizer_path(family)
    reference = objective_named(objective).reference_casing
    if family == "wordpiece":
        return load_tokenizer(vocab_file=path, do_lower_case=flag, reference=reference)
    return load_tokenizer(tokenizer_file=path, do_lower_case=flag, reference=reference)


@pytest.mark.parametrize("family", ["wordpiece", "bpe", "unigram", "sentencepiece"])
def test_do_lower_case_applies_to_every_family(family):
    need_shared()
    tokenizer = load(family, True)
    assert lowercases(tokenizer)
    assert tokenizer.encode(TEXT).ids == tokenizer.encode(TEXT.lower()).ids


@pytest.mark.parametrize("family", ["wordpiece", "bpe", "sentencepiece"])
def test_no_do_lower_case_keeps_case(family):
    need_shared()
    tokenizer = load(family, False)
    assert not lowercases(tokenizer)
    assert tokenizer.encode(TEXT).ids != tokenizer.encode(TEXT.lower()).ids


def test_no_do_lower_case_cannot_undo_a_normalizer_that_lower_cases():
    need_shared()  # the test Unigram tokenizer is trained uncased: its normalizer lower-cases
    assert lowercases(load("unigram", None))
    with pytest.raises(TokenizerError, match="--no-do-lower-case.*lower-cases in its own normalizer"):
        load("unigram", False)


def test_a_tokenizers_json_does_as_it_says_when_no_flag_is_given():
    need_shared()
    assert not lowercases(load("bpe", None))  # trained cased, for RoBERTa


@pytest.fixture(scope="module")
def uncased_model(tmp_path_factory):
    """An uncased SentencePiece model, as albert-base-v2's spiece.model is: trained on lower-cased text."""
    need_shared()
    lines = corpus_lines()[:1500]
    path = tmp_path_factory.mktemp("spm") / "spiece.model"
    path.write_bytes(train_sentencepiece([albert_preprocess_text(line, lower=True) for line in lines]))
    return str(path), spm.SentencePieceProcessor(model_file=str(path))


def test_albert_with_a_bare_model_tokenizes_as_its_reference(uncased_model):
    """The README's ALBERT example (--tokenizer spiece.model --objective albert): every line's ids are the
    reference's, sentencepiece on preprocess_text(line, lower=True)."""
    path, processor = uncased_model
    tokenizer = load_tokenizer(tokenizer_file=path, reference=objective_named("albert").reference_casing)
    lines = [line for line in corpus_lines()[2000:4000] if line.strip()]
    assert len(lines) > 1500
    expected = processor.encode([albert_preprocess_text(line, lower=True) for line in lines])
    got = [encoding.ids for encoding in tokenizer.encode_batch(lines, add_special_tokens=False)]
    differing = sum(1 for a, b in zip(expected, got) if a != b)
    assert differing == 0, f"{differing} of {len(lines)} lines differ from the reference"
    # Kept cased, as before: most lines differ and the unknown piece is far more frequent.
    cased = load_tokenizer(tokenizer_file=path, do_lower_case=False,
                           reference=objective_named("albert").reference_casing)
    cased_ids = [encoding.ids for encoding in cased.encode_batch(lines, add_special_tokens=False)]
    assert sum(1 for a, b in zip(expected, cased_ids) if a != b) > len(lines) // 2
    unk = processor.unk_id()
    assert sum(ids.count(unk) for ids in cased_ids) > 10 * max(1, sum(ids.count(unk) for ids in got))


def test_roberta_and_tokens_keep_case_with_a_bare_model(uncased_model):
    path, processor = uncased_model
    for objective in ("roberta", "tokens"):
        tokenizer = load_tokenizer(tokenizer_file=path, reference=objective_named(objective).reference_casing)
        assert tokenizer.encode(TEXT, add_special_tokens=False).ids == processor.encode(TEXT)


def test_the_casing_is_stated_and_an_uncased_model_kept_cased_is_warned_about(uncased_model):
    path, _ = uncased_model
    lowered = Vocabulary.from_tokenizer(load_tokenizer(tokenizer_file=path, do_lower_case=True))
    kept = Vocabulary.from_tokenizer(load_tokenizer(tokenizer_file=path, do_lower_case=False))
    assert "lower-cases its input" in lowered.describe() and lowered.casing_warning() is None
    assert "keeps case" in kept.describe()
    assert "--do-lower-case" in kept.casing_warning()
    cased = Vocabulary.from_tokenizer(load("bpe", None))  # a cased model kept cased: nothing to say
    assert "keeps case" in cased.describe() and cased.casing_warning() is None
