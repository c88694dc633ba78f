"""Tokens must not depend on sentence splitting: over the shared corpus as
one-paragraph JSONL documents, with --objective tokens and Bling Fire cutting
the paragraphs into sentences, each document's ids end to end are exactly
the tokenizer's encoding of its text, for every family (the tokenizer's own
answer on the whole paragraph is the oracle)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from common.readers import ParseReport, reader_named
from common.segmenters.sentences import MAX_SEGMENT_CHARS, Segmenter, segment_pieces
from tests.support.helpers import REPO, VOCAB, WIKI, need_shared

DATA = REPO / "tests" / "data" / "matrix"


def paragraphs() -> list[str]:
    reader = reader_named("wikiextractor")()
    found = []
    for path in sorted(WIKI.rglob("wiki_*")):
        for document in reader.parse(path.read_bytes(), 0, ParseReport()):
            found += [line.strip() for line in document.lines if line.strip()]
    return found


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    need_shared()
    texts = paragraphs()
    root = tmp_path_factory.mktemp("paragraphs")
    (root / "corpus").mkdir()
    with open(root / "corpus" / "paragraphs.jsonl", "w", encoding="utf-8") as handle:
        for index, text in enumerate(texts):
            handle.write(json.dumps({"id": str(index), "text": text}, ensure_ascii=False) + "\n")
    return root, texts


def byte_level_with_prefix_space(tmp_path: Path) -> str:
    spec = json.loads((DATA / "bpe.json").read_text(encoding="utf-8"))
    spec["pre_tokenizer"]["add_prefix_space"] = True
    path = tmp_path / "bpe-prefix-space.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    return str(path)


FAMILIES = {
    "wordpiece": lambda tmp: {"vocab_file": str(VOCAB)},
    "byte-level-bpe": lambda tmp: {"tokenizer": str(DATA / "bpe.json")},  # RoBERTa's add_prefix_space=False
    "byte-level-bpe-prefix-space": lambda tmp: {"tokenizer": byte_level_with_prefix_space(tmp)},
    "unigram-metaspace": lambda tmp: {"tokenizer": str(DATA / "unigram.json")},
}


@pytest.mark.parametrize("family", FAMILIES)
def test_each_documents_tokens_are_the_tokenizers_encoding_of_its_text(corpus, tmp_path, family):
    from common.storage import LocalStorage
    from common.tokenization import Vocabulary
    from tests.support.run_configs import run_config
    from ventilator.job import prepare_job
    from worker.pipeline import TaskProcessor

    root, texts = corpus
    output = tmp_path / "out"
    job = prepare_job(run_config(data=str(root / "corpus"), output=str(output), **FAMILIES[family](tmp_path),
                                 objective="tokens", output_format="parquet", segmenter="blingfire",
                                 task_size=1 << 30))
    vocabulary = Vocabulary.from_json(job.config.tokenizer_json)
    processor = TaskProcessor(job.config, vocabulary, LocalStorage(str(output)))
    rows = []
    for task in job.tasks:
        for written in processor.process(task, job.reader.read(job.input_storage, task)).files:
            rows += pq.read_table(output / written.name).to_pylist()
    assert len(rows) == len(texts) > 4_000
    # The oracle: the tokenizer the workers use, on each whole paragraph.
    expected = vocabulary.text_tokenizer.encode_batch(texts, add_special_tokens=False)
    differing = [i for i, (row, encoding) in enumerate(zip(rows, expected)) if row["input_ids"] != encoding.ids]
    assert not differing, (f"{len(differing)} of {len(texts)} documents differ, e.g. {texts[differing[0]][:200]!r}")
    # Bling Fire did cut them: most documents hold several sentences.
    assert np.mean([len(row["sentence_lengths"]) > 1 for row in rows]) > 0.5


def test_a_segment_over_the_character_bound_is_cut_before_a_space():
    words = ["word"] * (MAX_SEGMENT_CHARS // 5 + 10)
    text = " ".join(words)
    segments = segment_pieces([text], Segmenter.LINE)
    assert len(segments) == 2 and "".join(piece for segment in segments for piece in segment) == text
    assert not segments[0][0].endswith(" ") and segments[1][0].startswith(" ")


def test_pieces_concatenate_to_each_paragraph():
    lines = ["Hello there.  While he said   so. These are.", "  Next para. Yes.  ", "", "following:",
             "During the war it rained."]
    segments = segment_pieces(lines, Segmenter.BLINGFIRE)
    pieces = [piece for segment in segments for piece in segment]
    assert "".join(pieces) == "".join(line.strip() for line in lines)
    assert segments[:3] == [["Hello there."], ["  While he said   so."], [" These are."]]
