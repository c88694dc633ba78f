"""A document's tokens are the tokenizer's encoding of its paragraphs whatever separates its sentences.

The segment step cuts a paragraph into sentences and the tokenize step encodes them; a tokenizer that
treats the start of a text apart (byte-level BPE with ``add_prefix_space``, Metaspace's prepended ``▁``,
a ``Strip`` normalizer) must not see a sentence start as a text start.  Oracle: HF ``tokenizers`` itself
on each whole paragraph, for every family, over paragraphs of sentences joined by separators drawn by
hypothesis (spaces, tabs, NBSP, em-space, VT, FF, ideographic space, U+2028, NEL, runs of them, and nothing
at all).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.readers import Document
from common.steps.segment import Segment
from common.steps.tokenize import Tokenize
from common.tokenization import Vocabulary, load_tokenizer
from tests.common.steps.conftest import a_run
from tests.support.helpers import VOCAB

MATRIX = Path(__file__).parents[2] / "data" / "matrix"

SENTENCES = ["The cat sat on the mat.", "Then it slept all day.", "Was it tired?", "Yes, it was (very) tired!",
             "He said \"no\" twice.", "3.5 million people live there.", "他来了。", "她走了！", "“好的。”"]
SEPARATORS = [" ", "\t", "\u00a0", "\u2003", "\x0b", "\x0c", "\u3000", "\u2028", "\x85", "", "  ", " \t", "\t ",
              "\u00a0 "]


def _json(path: Path, **pre_tokenizer) -> str:
    spec = json.loads(path.read_text(encoding="utf-8"))
    spec["pre_tokenizer"].update(pre_tokenizer)
    return json.dumps(spec)


def _family(name: str) -> Vocabulary:
    if name == "wordpiece":
        if not VOCAB.is_file():
            pytest.skip("needs ../shared's vocabulary")
        return Vocabulary.from_tokenizer(load_tokenizer(vocab_file=str(VOCAB)))
    spec = {"byte-level-bpe": lambda: _json(MATRIX / "bpe.json"),
            "byte-level-bpe-prefix-space": lambda: _json(MATRIX / "bpe.json", add_prefix_space=True),
            "unigram-metaspace": lambda: _json(MATRIX / "unigram.json")}[name]()
    return Vocabulary.from_json(spec)


FAMILIES = ("wordpiece", "byte-level-bpe", "byte-level-bpe-prefix-space", "unigram-metaspace")
_vocabularies: dict[str, Vocabulary] = {}

paragraph = st.lists(st.tuples(st.sampled_from(SEPARATORS), st.sampled_from(SENTENCES)), min_size=1, max_size=6)


@pytest.mark.parametrize("family", FAMILIES)
def test_tokens_are_the_tokenizers_encoding_whatever_the_separators(family, job):
    if family not in _vocabularies:
        _vocabularies[family] = _family(family)
    vocabulary = _vocabularies[family]
    context = job(segmenter="blingfire")
    context.vocabulary = vocabulary
    segment, tokenize = Segment(Segment.make_params({"segmenter": "blingfire"}), context), Tokenize(Tokenize.Params(),
                                                                                                    context)
    cut = []

    @settings(max_examples=60, database=None, deadline=None, derandomize=True)
    @given(st.lists(paragraph, min_size=1, max_size=3))
    def check(drawn):
        lines = ["".join(separator + sentence for separator, sentence in sentences)[len(sentences[0][0]):]
                 for sentences in drawn]
        run = a_run([Document(0, lines)])
        segment.run(run)
        tokenize.run(run)
        tokenized = run.parts[0].tokenized
        expected = [i for encoding in vocabulary.text_tokenizer.encode_batch([line.strip() for line in lines],
                                                                              add_special_tokens=False)
                    for i in encoding.ids]
        assert tokenized.tokens.tolist() == expected, lines
        cut.append(tokenized.num_segments > len(lines))

    check()
    assert sum(cut) > 30  # the sentences were cut apart: the separators were between segments
