"""A flag that does nothing is refused in one line, for every objective x masking mode.

The oracle is the objective's own output: over real documents, each parameter is changed from its default
(one at a time, in each mode); where the records do not change, the parameter does nothing in that mode, and
giving it must be refused naming it; where they change, it must be accepted."""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import pytest

from common.objectives import objective_named
from common.readers import ParseReport, reader_named
from common.steps.segment import Segment
from common.steps.tokenize import Tokenize
from tests.common.steps.conftest import a_run
from tests.support.helpers import VOCAB, WIKI, need_shared

#: Every objective with each of its masking modes (the parameters that choose it).
MODES = [("bert", {}), ("albert", {}), ("albert", {"ngram": 1}), ("electra", {}), ("roberta", {"masking": "none"}),
         ("roberta", {"masking": "static"}), ("tokens", {})]
OTHER_CHOICE = {"pack": "doc-sentences", "masking": "static"}


def changed(field: dataclasses.Field):
    if field.type in (bool, "bool"):
        return not field.default
    if field.type in (int, "int"):
        if field.name == "max_seq_length" and field.default == 0:  # tokens: whole documents -> chunks
            return 64
        return field.default + 1
    if field.type in (float, "float"):
        return field.default * 2
    return OTHER_CHOICE[field.name]


@pytest.fixture(scope="module")
def vocabulary():
    from common.tokenization import Vocabulary, load_tokenizer

    need_shared()
    return Vocabulary.from_tokenizer(load_tokenizer(vocab_file=str(VOCAB)))


@pytest.fixture(scope="module")
def documents(vocabulary):
    from common.steps import JobContext

    reader = reader_named("wikiextractor")()
    docs = list(reader.parse((WIKI / "AA" / "wiki_00").read_bytes(), 0, ParseReport()))[:10]
    docs = [dataclasses.replace(doc, lines=doc.lines[:5]) for doc in docs]  # small: 40 passes stay quick
    context = JobContext(None, vocabulary, None)
    run = a_run(docs)
    Segment(Segment.make_params({"segmenter": "blingfire"}), context).run(run)
    Tokenize(Tokenize.Params(), context).run(run)
    return run.parts[0].tokenized


def records(objective, documents) -> frozenset[str]:
    """What the objective writes, pass by pass (a pass that repeats another adds nothing)."""
    passes = set()
    for pass_index in range(objective.passes):
        hashed = hashlib.sha256(repr(objective.features).encode())
        for batch in objective.batches(documents, "task", pass_index):
            for key in sorted(batch.columns):
                column = batch.columns[key]
                for array in ((column.values, column.lengths) if hasattr(column, "lengths") else (column,)):
                    hashed.update(key.encode() + np.ascontiguousarray(array).tobytes())
        passes.add(hashed.hexdigest())
    return frozenset(passes)


@pytest.mark.parametrize("name,mode", MODES, ids=[f"{n}-{'-'.join(map(str, m.values())) or 'default'}"
                                                  for n, m in MODES])
def test_a_flag_is_refused_exactly_where_it_changes_nothing(name, mode, documents, vocabulary):
    objective_class = objective_named(name)
    special = vocabulary.special
    params = objective_class.make_params(mode)
    base = records(objective_class(params, special), documents)
    idle = []
    for field in dataclasses.fields(objective_class.Params):
        if field.name in mode:
            continue
        value, flag = changed(field), "--" + field.name.replace("_", "-")
        # What the value does, the objective built without the door's checks.
        acts = records(objective_class(dataclasses.replace(params, **{field.name: value}), special), documents) != base
        try:
            objective_class.make_params({**mode, field.name: value})
        except ValueError as error:
            assert not acts, f"{flag} {value} changes the records with {mode}, yet is refused: {error}"
            assert flag in str(error) and "\n" not in str(error)
            idle.append(field.name)
            continue
        assert acts, f"{flag} {value} changes nothing with {mode}, yet is accepted"
    if mode.get("masking") == "none":
        assert {"masked_lm_prob", "max_predictions_per_seq", "do_whole_word_mask", "dupe_factor"} <= set(idle)
    if name != "tokens":
        assert len(idle) < len(dataclasses.fields(objective_class.Params)) - len(mode)  # some flags matter


@pytest.fixture(scope="module")
def chinese(tmp_path_factory):
    """Chinese documents tokenized without and with jieba's words (the words step)."""
    from bench.chinese_bench import chinese_paragraphs, chinese_vocabulary
    from common.readers import Document
    from common.steps import JobContext
    from common.steps.words import Words

    need_shared()
    vocabulary = chinese_vocabulary(str(VOCAB), tmp_path_factory.mktemp("zh"))
    paragraphs = chinese_paragraphs()
    docs = [Document(i, paragraphs[i::12][:6]) for i in range(12)]
    context = JobContext(None, vocabulary, None)
    tokenized = []
    for with_words in (False, True):
        run = a_run(docs)
        Segment(Segment.make_params({"segmenter": "blingfire"}), context).run(run)
        if with_words:
            Words(Words.make_params({"word_segmenter": "jieba"}), context).run(run)
        Tokenize(Tokenize.Params(), context).run(run)
        tokenized.append(run.parts[0].tokenized)
    return vocabulary, *tokenized


@pytest.mark.parametrize("name,mode", MODES, ids=[f"{n}-{'-'.join(map(str, m.values())) or 'default'}"
                                                  for n, m in MODES])
def test_a_word_segmenter_is_refused_exactly_where_its_words_change_nothing(name, mode, chinese):
    vocabulary, plain, with_words = chinese
    objective_class = objective_named(name)
    objective = objective_class(objective_class.make_params(mode), vocabulary.special)
    assert objective.uses_word_starts == (records(objective, plain) != records(objective, with_words))


def test_the_ventilator_refuses_a_word_segmenter_that_does_nothing(tmp_path):
    from tests.support.run_configs import run_config
    from ventilator.job import JobError, validate

    need_shared()
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "wiki_00").write_text('<doc id="1" url="" title="t">\nt\n他来了。\n</doc>\n',
                                             encoding="utf-8")
    options = dict(data=str(tmp_path / "in"), output=str(tmp_path / "out"), vocab_file=str(VOCAB),
                   word_segmenter="jieba")
    with pytest.raises(JobError, match="--word-segmenter jieba does nothing here"):
        validate(run_config(**options, objective="roberta", params={"masking": "static"}))
    validate(run_config(**options, objective="roberta", params={"masking": "static", "do_whole_word_mask": True}))
