"""A sample is the tokenizer's encoding of its document, for every tokenizer family.

The oracle is HF ``tokenizers``' own ``Tokenizer.encode`` of each whole document (no special token added), and
a document's text is taken here straight from the input files, apart from the readers (docs/objectives.md, "A
document's text"): WikiExtractor's lines between the title line and ``</doc>``, a JSON Lines ``text`` field,
each without the blank lines at its two ends.  The documents hold many paragraphs (../shared's Wikipedia
sample, the example corpus, two CJK stories, JSON texts with tabs, runs of spaces, CRLF and a final newline):
whitespace between paragraphs is a token for byte-level BPE and Unigram, so a join that drops it fails here
(WordPiece does not see it, and is held too).  Checked: ``--objective tokens`` whole documents and chunks,
RoBERTa's blocks, and the tokenize step of every objective cut from a document's encoding (ELECTRA's lines
included); and that the fast encoders (nanotoken, kitoken) give HF's ids on whole documents.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.support.helpers import REPO, VOCAB, WIKI, need_shared

MATRIX = REPO / "tests" / "data" / "matrix"
CJK = REPO / "tests" / "data" / "cjk"
EXAMPLES = REPO / "examples" / "corpus"

_DOC = re.compile(r'<doc [^\n]*>\n[^\n]*\n(.*?)\n</doc>', re.S)


def wikiextractor_texts(root: Path) -> list[str]:
    """Every document's text, in the order of the files' names: the lines after the title line, up to
    ``</doc>``, without blank lines at the two ends."""
    texts = []
    for path in sorted(p for p in root.rglob("wiki_*") if p.is_file()):
        texts += [_trim(body) for body in _DOC.findall(path.read_text(encoding="utf-8"))]
    return [text for text in texts if text.strip()]


def _trim(text: str) -> str:
    lines = text.split("\n")
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    return "\n".join(lines)


def jsonl_corpus(root: Path) -> tuple[Path, list[str]]:
    """JSON Lines documents of many paragraphs: the CJK stories whole, and ../shared's documents with their
    paragraph breaks varied (one or two newlines, CRLF, a tab or runs of spaces inside, a final newline)."""
    texts = [(CJK / name).read_text(encoding="utf-8") for name in ("kong_yiji.txt", "rashomon.txt")]
    breaks = ["\n\n", "\n", "\r\n", "\n \n", "\n\n\n"]
    for index, text in enumerate(wikiextractor_texts(WIKI)[:40]):
        paragraphs = [line for line in text.split("\n") if line.strip()]
        joined = breaks[index % len(breaks)].join(paragraphs)
        if index % 3 == 0:
            joined = joined.replace(". ", ".  ", 3).replace(", ", ",\t", 2)
        texts.append(joined + ("\n" if index % 2 else ""))
    directory = root / "jsonl"
    directory.mkdir()
    with open(directory / "docs.jsonl", "w", encoding="utf-8") as handle:
        for index, text in enumerate(texts):
            handle.write(json.dumps({"id": str(index), "text": text}, ensure_ascii=False) + "\n")
    return directory, [_trim(text) for text in texts]


def byte_level_with_prefix_space(tmp_path: Path) -> str:
    spec = json.loads((MATRIX / "bpe.json").read_text(encoding="utf-8"))
    spec["pre_tokenizer"]["add_prefix_space"] = True
    path = tmp_path / "bpe-prefix-space.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    return str(path)


def modernbert_like(tmp_path: Path) -> str:
    from tests.support.tokenizer_families import tokenizer_path

    return tokenizer_path("modernbert")


FAMILIES = {
    "wordpiece": lambda tmp: {"vocab_file": str(VOCAB)},
    "byte-level-bpe": lambda tmp: {"tokenizer": str(MATRIX / "bpe.json")},  # RoBERTa's: no prefix space
    "byte-level-bpe-prefix-space": lambda tmp: {"tokenizer": byte_level_with_prefix_space(tmp)},
    "modernbert-like": lambda tmp: {"tokenizer": modernbert_like(tmp)},
    "unigram-metaspace": lambda tmp: {"tokenizer": str(MATRIX / "unigram.json")},
}
CORPORA = ("shared-wiki", "example-corpus", "jsonl")


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    need_shared()
    root = tmp_path_factory.mktemp("documents")
    jsonl, jsonl_texts = jsonl_corpus(root)
    return {"shared-wiki": (WIKI, wikiextractor_texts(WIKI)), "example-corpus": (EXAMPLES, wikiextractor_texts(EXAMPLES)),
            "jsonl": (jsonl, jsonl_texts)}


def run_job(data: Path, output: Path, tokenizer: dict, objective: str, params: dict | None = None,
            output_format: str = "parquet", **options):
    """The job as the ventilator plans it, every task run by the worker's TaskProcessor; its rows in order.
    ``options``: the job's other options (``segmenter``)."""
    from common.storage import LocalStorage
    from common.tokenization import Vocabulary
    from tests.support.run_configs import run_config
    from ventilator.job import prepare_job
    from worker.pipeline import TaskProcessor

    job = prepare_job(run_config(data=str(data), output=str(output), **tokenizer, objective=objective,
                                 output_format=output_format, params=params or {}, task_size=1 << 30, **options))
    vocabulary = Vocabulary.from_json(job.config.tokenizer_json)
    processor = TaskProcessor(job.config, vocabulary, LocalStorage(str(output)))
    rows = []
    for task in job.tasks:
        for written in processor.process(task, job.reader.read(job.input_storage, task)).files:
            rows += pq.read_table(output / written.name).to_pylist()
    return rows, vocabulary, job, processor


#: HF's encodings by (the tokenizer's JSON, the texts): flat ids and each text's count, read-only.  Most tests hold
#: another job over the same corpus and tokenizer to the same answer: it is computed once in this module.
_ORACLES: dict[tuple[str, tuple[str, ...]], tuple[np.ndarray, np.ndarray]] = {}


@pytest.fixture(scope="module", autouse=True)
def _oracles_of_this_module():
    yield
    _ORACLES.clear()


def oracle(vocabulary, texts: list[str]) -> list[list[int]]:
    """HF tokenizers' own encoding of each whole text: the job's tokenizer as loaded, no special token added.
    Encoded once per tokenizer and texts (``_ORACLES``); each call gets lists of its own."""
    key = (hashlib.sha256(vocabulary.tokenizer.to_str().encode()).hexdigest(), tuple(texts))
    if key not in _ORACLES:
        rows = [encoding.ids for encoding in vocabulary.tokenizer.encode_batch(texts, add_special_tokens=False)]
        flat = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64)
        ends = np.cumsum([len(row) for row in rows], dtype=np.int64)
        flat.flags.writeable = ends.flags.writeable = False
        _ORACLES[key] = flat, ends
    flat, ends = _ORACLES[key]
    ids, bounds = flat.tolist(), [0, *ends.tolist()]
    return [ids[start:end] for start, end in zip(bounds[:-1], bounds[1:])]


def _differing(got: list[list[int]], expected: list[list[int]], texts: list[str]) -> str:
    bad = [i for i, (a, b) in enumerate(zip(got, expected)) if a != b]
    if not bad:
        return ""
    return f"{len(bad)} of {len(texts)} documents differ, e.g. {texts[bad[0]][:120]!r}"


@pytest.mark.parametrize("corpus", CORPORA)
@pytest.mark.parametrize("family", FAMILIES)
def test_each_tokens_sample_is_the_encoding_of_its_whole_document(corpora, tmp_path, family, corpus):
    data, texts = corpora[corpus]
    rows, vocabulary, job, _processor = run_job(data, tmp_path / "out", FAMILIES[family](tmp_path), "tokens")
    assert job.config.step("segment").params["segmenter"] == "blingfire"  # auto: sentences, for sentence_lengths
    assert len(rows) == len(texts) > 1
    expected = oracle(vocabulary, texts)
    assert not _differing([row["input_ids"] for row in rows], expected, texts)
    # The sentence lengths (Megatron's sentence-level datasets) share the document's tokens out, all of them.
    assert all(sum(row["sentence_lengths"]) == len(row["input_ids"]) for row in rows)
    assert sum(len(row["sentence_lengths"]) > 1 for row in rows) > len(rows) // 2
    if corpus == "shared-wiki" and family != "wordpiece":
        assert sum(len(ids) for ids in expected) > sum(len(text.split()) for text in texts)  # whitespace is in it


@pytest.mark.parametrize("family", FAMILIES)
def test_chunks_are_cut_from_each_documents_encoding(corpora, tmp_path, family):
    from common.tokenization.vocabulary import Vocabulary

    data, texts = corpora["shared-wiki"]
    rows, vocabulary, job, _processor = run_job(data, tmp_path / "out", FAMILIES[family](tmp_path), "tokens",
                                                {"max_seq_length": 64})
    assert job.config.step("segment").params["segmenter"] == "document"  # auto: no sentence split for chunks
    special = Vocabulary.special.fget(vocabulary)
    documents: dict[int, list[int]] = {}
    order: list[int] = []
    for row in rows:
        ids = row["input_ids"]
        assert len(ids) <= 64 and ids[0] == special.cls and ids[-1] == special.sep
        if row["document_id"] not in documents:
            order.append(row["document_id"])
            assert row["chunk_index"] == 0
        documents.setdefault(row["document_id"], []).extend(ids[1:-1])
    got = [documents[document] for document in order]
    assert not _differing(got, oracle(vocabulary, texts), texts)


def chunked(vocabulary, texts: list[str], max_seq_length: int) -> list[list[int]]:
    """HF's encoding of each whole document cut into ``[CLS] tokens [SEP]`` records of at most ``max_seq_length``."""
    special, room = vocabulary.special, max_seq_length - 2
    return [[special.cls, *ids[start:start + room], special.sep]
            for ids in oracle(vocabulary, texts) for start in range(0, len(ids), room)]


@pytest.mark.parametrize("family", ["wordpiece", "byte-level-bpe", "unigram-metaspace"])
def test_chunks_under_auto_split_no_sentence_and_an_explicit_segmenter_is_honoured(corpora, tmp_path, family):
    """--objective tokens --max-seq-length N: --segmenter auto is the document (the job's description says so), and
    each record is HF's encoding of its whole document, chunked; --segmenter blingfire, given, still splits
    sentences, with the same records."""
    from common.describe import dataset_info

    data, texts = corpora["jsonl"]
    tokenizer = FAMILIES[family](tmp_path)
    rows, vocabulary, job, _processor = run_job(data, tmp_path / "auto", tokenizer, "tokens", {"max_seq_length": 48})
    assert job.config.step("segment").params["segmenter"] == "document"
    assert dataset_info.describe(job.config, {}, complete=False)["segmenter"] == "document"
    expected = chunked(vocabulary, texts, 48)
    assert [row["input_ids"] for row in rows] == expected
    assert len(expected) > 2 * len(texts)
    given, _vocabulary, job, _processor = run_job(data, tmp_path / "given", tokenizer, "tokens",
                                                  {"max_seq_length": 48}, segmenter="blingfire")
    assert job.config.step("segment").params["segmenter"] == "blingfire"
    assert [row["input_ids"] for row in given] == expected


@pytest.mark.parametrize("family", ["byte-level-bpe", "unigram-metaspace"])
def test_a_one_segment_document_is_encoded_alone_on_the_fast_encoder(corpora, tmp_path, family, monkeypatch):
    """Chunks' documents are one segment each: each document's text goes whole to ``encode_many`` (the fast
    encoder), none through HF's offsets (``_encode_with_offsets``: Metaspace may not be cut before a line break,
    so a sentence split sent about half of a Unigram document there)."""
    from common.tokenization.vocabulary import Vocabulary

    encoded: list[str] = []
    with_offsets: list[str] = []
    encode_many, encode_with_offsets = Vocabulary.encode_many, Vocabulary._encode_with_offsets

    def seen_many(self, given):
        encoded.extend(given)
        return encode_many(self, given)

    def seen_with_offsets(self, given):
        with_offsets.extend(text for text, _cuts in given)
        return encode_with_offsets(self, given)

    monkeypatch.setattr(Vocabulary, "encode_many", seen_many)
    monkeypatch.setattr(Vocabulary, "_encode_with_offsets", seen_with_offsets)
    data, texts = corpora["jsonl"]
    rows, vocabulary, _job, _processor = run_job(data, tmp_path / "out", FAMILIES[family](tmp_path), "tokens",
                                                 {"max_seq_length": 64})
    assert not with_offsets
    assert encoded == texts  # every document whole, once, in order
    assert [row["input_ids"] for row in rows] == chunked(vocabulary, texts, 64)
    if family == "unigram-metaspace":
        assert vocabulary._fast_encoder() is not None  # fast_unigram, exact on this tokenizer


@pytest.mark.parametrize("family", FAMILIES)
def test_roberta_blocks_laid_end_to_end_are_the_documents_encodings(corpora, tmp_path, family):
    data, texts = corpora["example-corpus"]
    rows, vocabulary, _job, _processor = run_job(data, tmp_path / "out", FAMILIES[family](tmp_path), "roberta",
                                                 {"masking": "none", "pack": "doc-sentences",
                                                  "max_seq_length": 128})
    content = [token for row in rows
               for token, special in zip(row["input_ids"], row["special_tokens_mask"]) if not special]
    assert content == [token for ids in oracle(vocabulary, texts) for token in ids]


@pytest.mark.parametrize("objective", ["tokens", "roberta", "electra"])
@pytest.mark.parametrize("family", FAMILIES)
def test_the_tokenize_step_gives_each_document_its_encoding(corpora, tmp_path, family, objective):
    """Every objective cut from a document's encoding gets it from the tokenize step, whatever its segmenter
    (ELECTRA's lines, Bling Fire's sentences); word starts are one per token where the family needs them."""
    from common.readers import ParseReport
    from common.steps.base import TaskStats

    data, texts = corpora["jsonl"]
    _rows, vocabulary, job, processor = run_job(data, tmp_path / "out", FAMILIES[family](tmp_path), objective,
                                                output_format="parquet")
    documents = []
    for task in job.tasks:
        documents += list(job.reader.documents(task, job.reader.read(job.input_storage, task), ParseReport()))
    tokenized, _tokens = processor.tokenize_documents(documents, ParseReport(), TaskStats())
    segment_offsets = np.asarray(tokenized.segment_offsets)
    starts = segment_offsets[np.asarray(tokenized.document_offsets)]
    got = [tokenized.tokens[a:b].tolist() for a, b in zip(starts[:-1], starts[1:])]
    assert not _differing(got, oracle(vocabulary, texts), texts)
    if tokenized.word_starts is not None:
        assert len(tokenized.word_starts) == len(tokenized.tokens)


def test_the_bert_objective_keeps_encoding_each_sentence_as_its_reference_does(corpora, tmp_path):
    """BERT's script tokenizes line by line: its sentences' tokens are not the document's (no line break)."""
    data, texts = corpora["example-corpus"]
    from common.readers import ParseReport
    from common.steps.base import TaskStats

    _rows, vocabulary, job, processor = run_job(data, tmp_path / "out", FAMILIES["byte-level-bpe"](tmp_path),
                                                "bert", {"dupe_factor": 1})
    documents = []
    for task in job.tasks:
        documents += list(job.reader.documents(task, job.reader.read(job.input_storage, task), ParseReport()))
    tokenized, _tokens = processor.tokenize_documents(documents, ParseReport(), TaskStats())
    newline = vocabulary.tokenizer.encode("\n", add_special_tokens=False).ids
    assert newline and not np.isin(tokenized.tokens, newline).any()
    assert len(tokenized.tokens) < sum(len(ids) for ids in oracle(vocabulary, texts))


@pytest.mark.parametrize("family", ["wordpiece", "byte-level-bpe", "unigram-metaspace"])
def test_the_fast_encoder_gives_hf_ids_on_whole_documents(corpora, family, tmp_path):
    from common.tokenization import load_vocabulary

    given = FAMILIES[family](tmp_path)
    vocabulary = load_vocabulary(vocab_file=given.get("vocab_file"), tokenizer_file=given.get("tokenizer"))
    fast = vocabulary._fast_encoder()
    from common import kernels

    # Without the compiled kernels kitoken is the byte-level candidate, and its probes refuse it on this
    # vocabulary (a contraction after a line break): HF is used.
    bpe = "word cache" if kernels.compiled is not None else None
    expected = {"wordpiece": "nanotoken", "byte-level-bpe": bpe, "unigram-metaspace": "unigram-cache"}[family]
    if expected is None:
        assert fast is None
        return
    assert fast is not None and fast.name == expected
    texts = [text for corpus in CORPORA for text in corpora[corpus][1]]
    texts += [text + "\n" for text in texts[:20]] + ["\n\n" + text.replace("\n", "\r\n") for text in texts[:20]]
    ids, lengths = fast(texts)
    expected = vocabulary.text_tokenizer.encode_batch(texts, add_special_tokens=False)
    assert lengths.tolist() == [len(encoding.ids) for encoding in expected]
    assert ids.tolist() == [token for encoding in expected for token in encoding.ids]


def test_a_documents_text_leaves_out_the_blank_lines_at_its_ends():
    from common.readers.base import Document

    assert Document(0, ["", "  ", "First.", "", "Second. ", "", " "]).text == "First.\n\nSecond. "
    assert Document(0, ["\tIndented", "next"]).text == "\tIndented\nnext"
    assert Document(0, ["", ""]).text == ""
