import json

import pytest

from common.tokenization import TokenizerError, Vocabulary, bert_tokenizer_from_vocab, load_tokenizer

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def write_vocab(path, tokens):
    path.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    return str(path)


def test_missing_special_tokens_are_named(tmp_path):
    """Loading does not decide: the objective refuses a tokenizer lacking a token it writes."""
    from common.objectives.bert import BertObjective

    vocab = write_vocab(tmp_path / "vocab.txt", ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "hello", "##s"])
    vocabulary = Vocabulary.from_tokenizer(load_tokenizer(vocab_file=vocab))
    assert vocabulary.mask_id is None and vocabulary.cls_id == 2
    with pytest.raises(ValueError, match=r"needs the tokenizer's mask token.*--mask-token"):
        BertObjective.check_vocabulary(vocabulary.special)
    named = Vocabulary.from_tokenizer(load_tokenizer(vocab_file=vocab), {"mask": "##s"})
    BertObjective.check_vocabulary(named.special)
    assert named.mask_id == 5 and Vocabulary.from_json(named.to_json()).mask_id == 5


def test_missing_vocab_file_is_a_clear_error(tmp_path):
    with pytest.raises(TokenizerError, match="no such file"):
        load_tokenizer(vocab_file=str(tmp_path / "nope.txt"))


def test_wordpiece_like_bert(tmp_path):
    vocab = write_vocab(tmp_path / "vocab.txt", SPECIALS + ["the", "cafe", "un", "##aff", "##able", ",", "東"])
    v = Vocabulary.from_tokenizer(load_tokenizer(vocab_file=vocab))
    ids, lengths = v.encode_many(["The Café, unaffable 東", "", "[MASK]"])
    tokens = [v.tokenizer.id_to_token(i) for i in ids.tolist()]
    assert tokens[:7] == ["the", "cafe", ",", "un", "##aff", "##able", "東"]
    assert lengths.tolist()[:2] == [7, 0]
    # "[MASK]" in the text is text, not the special token (as in BERT).
    assert v.mask_id not in ids.tolist()
    assert v.is_continuation[v.tokenizer.token_to_id("##aff")] and not v.is_continuation[v.tokenizer.token_to_id("un")]


def test_words_longer_than_200_chars_are_unknown_as_in_bert(tmp_path):
    vocab = write_vocab(tmp_path / "vocab.txt", SPECIALS + ["a", "##a"])
    v = Vocabulary.from_tokenizer(load_tokenizer(vocab_file=vocab))
    ids, _ = v.encode_many(["a" * 150, "a" * 201])
    assert ids.tolist()[:150] == [v.tokenizer.token_to_id("a")] + [v.tokenizer.token_to_id("##a")] * 149
    assert ids.tolist()[150:] == [v.unk_id]


def test_tokenizer_json_and_model_directory(tmp_path):
    vocab = write_vocab(tmp_path / "vocab.txt", SPECIALS + ["hello", "world"])
    tokenizer = bert_tokenizer_from_vocab(vocab, do_lower_case=True)
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    from_json = Vocabulary.from_tokenizer(load_tokenizer(tokenizer_file=str(tmp_path / "tokenizer.json")))
    assert from_json.encode_many(["Hello world"])[0].tolist() == [5, 6]
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    write_vocab(model_dir / "vocab.txt", SPECIALS + ["hello", "world"])
    (model_dir / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False}))
    cased = Vocabulary.from_tokenizer(load_tokenizer(tokenizer_file=str(model_dir)))
    assert cased.encode_many(["Hello world"])[0].tolist() == [cased.unk_id, 6]
    # Shipped to workers as JSON: same ids on the other side.
    assert Vocabulary.from_json(from_json.to_json()).encode_many(["hello"])[0].tolist() == [5]


def test_bpe_is_accepted_with_its_roles_by_name():
    from tokenizers import Tokenizer, models
    tokenizer = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(SPECIALS + ["a"])}, merges=[]))
    vocabulary = Vocabulary.from_tokenizer(tokenizer)
    assert (vocabulary.pad_id, vocabulary.unk_id, vocabulary.cls_id, vocabulary.sep_id, vocabulary.mask_id) == (0, 1, 2, 3, 4)
    assert vocabulary.boundaries.kind == "word-ids"  # no pre-tokenizer marker: words from HF's word ids


def test_a_vocabulary_that_only_describes_builds_its_text_tokenizer_at_first_use(tmp_path):
    """The sink only describes the tokenizer (issue #33, a job's fixed cost): ``for_text=False`` leaves the text
    tokenizer unbuilt at load; built at first use, it is the one an eager load builds."""
    vocab = write_vocab(tmp_path / "vocab.txt", SPECIALS + ["hello", "world"])
    eager = Vocabulary.from_tokenizer(load_tokenizer(vocab_file=vocab))
    lazy = Vocabulary.from_json(eager.to_json(), for_text=False)
    assert lazy._text_tokenizer is None
    assert (lazy.roles, lazy.size, lazy.starts_word.tolist()) == (eager.roles, eager.size, eager.starts_word.tolist())
    assert lazy.text_tokenizer.to_str() == eager.text_tokenizer.to_str()
    assert lazy.encode_many(["Hello [MASK] world"])[0].tolist() == eager.encode_many(["Hello [MASK] world"])[0].tolist()


@pytest.mark.parametrize("model", ["wordpiece", "unigram"])
def test_the_text_safe_spec_leaves_the_tokenizers_spec_as_it_was(model):
    """text_safe_spec copies only what it renames (no deep copy of the vocabulary: issue #33)."""
    from tokenizers import Tokenizer, models

    from common.tokenization.vocabulary import text_safe_spec

    if model == "wordpiece":
        tokenizer = Tokenizer(models.WordPiece({t: i for i, t in enumerate(SPECIALS + ["a"])}, unk_token="[UNK]"))
    else:
        tokenizer = Tokenizer(models.Unigram([(t, -1.0) for t in SPECIALS + ["a"]], unk_id=1))
    spec = json.loads(tokenizer.to_str())
    before = json.dumps(spec, sort_keys=True)
    safe = text_safe_spec(spec, {"[MASK]": 4, "[CLS]": 2, "[UNK]": 1})
    assert json.dumps(spec, sort_keys=True) == before
    pieces = safe["model"]["vocab"] if model == "wordpiece" else [piece for piece, _ in safe["model"]["vocab"]]
    assert {" [MASK] ", " [CLS] ", " [UNK] ", "a"} <= set(pieces) and "[MASK]" not in pieces
