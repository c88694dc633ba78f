"""Every tokenizer family through the worker's tokenize step and the BERT
objective: roles found from the tokenizer's own configuration, special
tokens in text kept as text, and whole-word masking taking whole words by
the tokenizer's own boundaries (tests/support/tokenizer_families.py builds them)."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from common.job.config import JobConfig
from common.job.params import Component
from common.job.tasks import plan_tasks
from common.objectives.base import derive_seed
from common.objectives.bert import BertObjective, BertParams, build_batch, lay_out_pairs, plan_instances
from common.readers import ParseReport
from common.segmenters.sentences import Segmenter, segment_pieces
from common.storage import LocalStorage
from common.tokenization import TokenizerError, Vocabulary, load_tokenizer, load_vocabulary
from tests.support.helpers import WIKI, need_shared
from tests.support.run_configs import run_config, steps_of
from tests.support.tokenizer_families import FAMILIES, ROLE_TOKENS, tokenizer_path, vocabulary_of
from ventilator.job import JobError, prepare_job
from worker.pipeline import TaskProcessor, TaskStats

ALL_SPECIAL_TEXT = ("x [CLS] [SEP] [MASK] [PAD] [UNK] <s> </s> <mask> <pad> <unk> y a[MASK]b a<mask>b "
                    "[MASK]<mask></s>")


@pytest.fixture(scope="module", params=FAMILIES)
def family(request):
    need_shared()
    return request.param, vocabulary_of(request.param)


def test_roles_come_from_the_tokenizer(family):
    name, vocabulary = family
    assert {role: vocabulary.tokenizer.id_to_token(i) for role, i in vocabulary.roles.items()} == ROLE_TOKENS[name]
    special = vocabulary.special
    assert special.mask == vocabulary.tokenizer.token_to_id(ROLE_TOKENS[name]["mask"])
    assert len(special.starts_word) == special.vocab_size == vocabulary.size


def test_special_tokens_in_text_stay_text(family):
    name, vocabulary = family
    roles = {role: i for role, i in vocabulary.roles.items() if role != "unk"}
    texts = [ALL_SPECIAL_TEXT, ALL_SPECIAL_TEXT.upper(), ALL_SPECIAL_TEXT.lower(), "<mask>", "[MASK]"]
    for ids in (vocabulary.encode_many(texts)[0], vocabulary._encode_hf(texts, with_words=False)[0]):
        assert not set(roles.values()) & set(ids.tolist())
    if name != "wordpiece":  # HF on its own splits the declared special tokens out of the text
        plain = vocabulary.tokenizer.encode(ALL_SPECIAL_TEXT, add_special_tokens=False).ids
        assert vocabulary.mask_id in plain


def oracle_word_starts(name: str, vocabulary: Vocabulary, texts: list[str]) -> np.ndarray:
    """Word starts over the flat tokens, from token strings (or HF's word ids),
    computed here apart from common/tokenization/word_boundaries.py."""
    starts = []
    for text in texts:
        encoding = vocabulary.tokenizer.encode(text, add_special_tokens=False)
        tokens, word_ids = encoding.tokens, encoding.word_ids
        for i, token in enumerate(tokens):
            if name == "wordpiece":
                starts.append(not token.startswith("##"))
            elif name == "bpe":
                starts.append(i == 0 or token.startswith("\u0120"))
            elif name in ("unigram", "sentencepiece"):
                starts.append(i == 0 or token.startswith("\u2581"))
            else:
                starts.append(i == 0 or word_ids[i] != word_ids[i - 1])
    return np.asarray(starts, dtype=bool)


def test_whole_word_masking_takes_whole_words(family):
    name, vocabulary = family
    config = JobConfig(data_uri=str(WIKI), output_uri="", reader=Component("wikiextractor"), steps=steps_of("blingfire"),
                       tokenizer_json="", objective=Component("bert", {}), writer=Component("tfrecord"))
    processor = TaskProcessor(config, vocabulary, output_storage=None)
    corpus = LocalStorage(str(WIKI))
    task = next(iter(plan_tasks(corpus.list_inputs(), 256 * 1024)))
    payload = processor.reader.read(corpus, task)
    documents = processor.tokenize(task, payload, TaskStats())
    texts = [piece for document in processor.reader.documents(task, payload, ParseReport())
             for segment in segment_pieces(document.lines, Segmenter.BLINGFIRE) for piece in segment]
    oracle = oracle_word_starts(name, vocabulary, texts)
    assert len(oracle) == len(documents.tokens)
    if name == "wordpiece":
        assert documents.word_starts is None  # the per-id table, as before (byte-identical shards)
    else:
        assert np.array_equal(documents.word_starts, oracle)
    word_of = np.cumsum(oracle) - 1

    # The objective's own batches; its plan is rebuilt from the same seeds to map positions back to tokens.
    params = BertParams(max_seq_length=64, max_predictions_per_seq=30, masked_lm_prob=0.3, do_whole_word_mask=True,
                        dupe_factor=1)
    objective = BertObjective(params, vocabulary.special)
    (batch,) = list(objective.batches(documents, task.key, 0))
    plan = plan_instances(documents, params, random.Random(derive_seed(params.random_seed, task.key, 0, "plan")))
    mask_rng = np.random.default_rng(derive_seed(params.random_seed, task.key, 0, "mask"))
    plan = plan.take(mask_rng.permutation(len(plan)))
    # The objective groups pieces by the documents' word starts (not only the per-id table) ...
    expected = build_batch(documents.tokens, plan, params, vocabulary.special, mask_rng, documents.word_starts)
    assert all(np.array_equal(batch.columns[k], expected.columns[k]) for k in expected.columns)
    # ... which are exactly the oracle's words, cut at the instance's edges.
    layout = lay_out_pairs(documents.tokens, plan, params.max_seq_length, vocabulary.special, documents.word_starts)
    if layout.word_start is not None:
        for r in range(len(plan)):
            a, a_len, b, b_len = (int(x[r]) for x in (plan.a_start, plan.a_length, plan.b_start, plan.b_length))
            want = np.concatenate([[True], oracle[a + 1:a + a_len], [True], oracle[b + 1:b + b_len]])
            got = layout.word_start[r][layout.candidates[r]]
            assert np.array_equal(got, want), f"row {r}: word starts differ from the tokenizer's words"
    multi_piece = 0
    for r in range(len(plan)):
        a, a_len, b, b_len = (int(x[r]) for x in (plan.a_start, plan.a_length, plan.b_start, plan.b_length))
        count = int(batch.columns["masked_lm_weights"][r].sum())
        positions = batch.columns["masked_lm_positions"][r][:count]
        masked = {a + p - 1 if p <= a_len else b + p - (a_len + 2) for p in positions.tolist()}
        for start, length in ((a, a_len), (b, b_len)):
            span = np.arange(start, start + length)
            for word in np.unique(word_of[span]):
                pieces = set(span[word_of[span] == word].tolist())
                inside = pieces & masked
                assert not inside or inside == pieces, f"row {r}: word {word} partly masked"
                multi_piece += bool(inside) and len(pieces) > 1
    assert multi_piece > 20  # words of several pieces were masked, each whole


def job_options(tmp_path, **kwargs):
    return run_config(data=str(WIKI / "AA"), output=str(tmp_path / "out"), **kwargs)


def test_a_tokenizer_without_a_mask_token_is_refused_before_any_work(tmp_path):
    need_shared()
    spec = json.loads(load_tokenizer(tokenizer_file=tokenizer_path("bpe")).to_str())
    spec["added_tokens"] = [t for t in spec["added_tokens"] if t["content"] != "<mask>"]
    spec["model"]["vocab"]["<masque>"] = spec["model"]["vocab"].pop("<mask>")
    path = tmp_path / "no-mask.json"
    path.write_text(json.dumps(spec))
    assert load_vocabulary(tokenizer_file=str(path)).mask_id is None  # loading is fine: the objective decides
    with pytest.raises(JobError, match=r"needs the tokenizer's mask token.*--mask-token") as error:
        prepare_job(job_options(tmp_path, tokenizer=str(path)))
    assert "\n" not in str(error.value)
    assert not (tmp_path / "out" / "manifest.jsonl").exists()
    job = prepare_job(job_options(tmp_path, tokenizer=str(path), special_tokens={"mask": "<masque>"}))
    shipped = Vocabulary.from_json(job.config.tokenizer_json)  # what workers rebuild
    assert shipped.mask_id == spec["model"]["vocab"]["<masque>"] and shipped.given_roles == {"mask": "<masque>"}
    with pytest.raises(JobError, match="'<nope>' is not in the tokenizer's vocabulary"):
        prepare_job(job_options(tmp_path, tokenizer=str(path), special_tokens={"mask": "<nope>"}))


def test_model_directory_roles_and_unsupported_models(tmp_path):
    need_shared()
    directory = tmp_path / "roberta-like"
    directory.mkdir()
    spec = json.loads(load_tokenizer(tokenizer_file=tokenizer_path("bpe")).to_str())
    spec["post_processor"] = None
    (directory / "tokenizer.json").write_text(json.dumps(spec))
    (directory / "tokenizer_config.json").write_text(json.dumps(
        {"cls_token": "</s>", "mask_token": {"content": "<unk>", "lstrip": True}}))
    vocabulary = load_vocabulary(tokenizer_file=str(directory))
    token = vocabulary.tokenizer.id_to_token
    assert (token(vocabulary.cls_id), token(vocabulary.mask_id), token(vocabulary.sep_id)) == ("</s>", "<unk>", "</s>")
    word_level = tmp_path / "word-level.json"
    spec = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
            "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None, "decoder": None,
            "model": {"type": "WordLevel", "vocab": {"[UNK]": 0, "a": 1}, "unk_token": "[UNK]"}}
    word_level.write_text(json.dumps(spec))
    with pytest.raises(TokenizerError, match="WordLevel model is not supported"):
        load_tokenizer(tokenizer_file=str(word_level))
    with pytest.raises(TokenizerError, match="no such file"):
        load_tokenizer(tokenizer_file=str(tmp_path / "absent.json"))


@pytest.mark.parametrize("model,roles,first_ids", [
    ("bpe", {"cls": "<s>", "sep": "</s>", "mask": "<mask>", "pad": "<pad>", "unk": "<unk>"},
     ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]),
    ("unigram", {"cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]", "pad": "<pad>", "unk": "<unk>"},
     ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"]),
])
def test_train_vocab_writes_a_tokenizer_per_family(tmp_path, model, roles, first_ids):
    from click.testing import CliRunner

    from common.tokenization.training import main
    from tests.support.tokenizer_families import corpus_lines

    need_shared()
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(corpus_lines()[:300]) + "\n", encoding="utf-8")
    output = tmp_path / "tokenizer.json"
    result = CliRunner().invoke(main, ["--data", str(corpus), "--output", str(output), "--model", model,
                                       "--vocab-size", "500", "--format", "text"])
    assert result.exit_code == 0, result.output
    vocabulary = load_vocabulary(tokenizer_file=str(output))
    assert {role: vocabulary.tokenizer.id_to_token(i) for role, i in vocabulary.roles.items()} == roles
    assert [vocabulary.tokenizer.id_to_token(i) for i in range(5)] == first_ids
    assert vocabulary.boundaries.kind == "start-marker"
