"""Chinese text through the real command line: ventilator, worker and sink over loopback,
``--word-segmenter jieba`` and ``--chinese-ref``; refusals in one line before any work."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from bench.chinese_bench import chinese_vocabulary, make_corpus
from loader.client import LoaderClient
from tests.e2e.test_loader_whole_words import words
from tests.support.helpers import VOCAB, manifest, need_shared, run_ventilator
from tests.support.loader_helpers import LoaderProcess

pytestmark = pytest.mark.e2e


def test_chinese_job_writes_chinese_ref_and_resumes_to_nothing(tmp_path):
    need_shared()
    make_corpus(tmp_path / "in" / "AA", 0.2)
    vocabulary = chinese_vocabulary(str(VOCAB), tmp_path)
    job = ["--vocab-file", tmp_path / "zh-vocab.txt", "--word-segmenter", "jieba", "--objective", "roberta",
           "--masking", "none", "--max-seq-length", "128", "--output-format", "parquet", "--chinese-ref",
           "--task-size", "64K", "--workers", "2"]
    result = run_ventilator(tmp_path / "in", tmp_path / "out", *job)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "word segmenter: jieba" in result.stderr
    files = sorted((tmp_path / "out").glob("train/part-*.parquet"))
    assert len(files) == len(manifest(tmp_path / "out")) > 1
    rows = [row for f in files for row in pq.read_table(f).to_pylist()]
    han = 0
    for row in rows:
        assert row["chinese_ref"] == [i for i, (s, w, m) in enumerate(zip(row["special_tokens_mask"],
                                                                          row["word_starts"], row["input_mask"]))
                                      if m and not s and not w]
        han += len(row["chinese_ref"])
    assert han > 10_000 and vocabulary.size > 30522
    info = json.loads((tmp_path / "out" / "dataset_info.json").read_text())
    assert info["features"]["chinese_ref"]["arrow_type"].startswith("list<")
    # The loader serves it (word_starts carries chinese_ref's words): masks are unions of jieba's words.
    with LoaderProcess(tmp_path / "out", "--batch-size", 64, "--dynamic-masking", "--whole-word-mask",
                       "--vocab-file", tmp_path / "zh-vocab.txt") as server, \
            LoaderClient(server.address, timeout_seconds=60) as client:
        batch = client.next_batch()
    assert set(batch.features) >= {"input_ids", "word_starts", "masked_lm_positions"}
    whole = 0
    for row, index in enumerate(batch.record_ids):  # the loader's record order: the files' (task order)
        record = rows[int(index)]
        positions = batch.features["masked_lm_positions"][row][batch.features["masked_lm_weights"][row] > 0]
        maskable = np.array(record["input_mask"]) == 1
        maskable &= np.array(record["special_tokens_mask"]) == 0
        word_of = words(np.array(record["word_starts"]), maskable)
        taken = set(word_of[positions].tolist())
        assert -1 not in taken and set(np.flatnonzero(np.isin(word_of, list(taken)))) == set(positions.tolist())
        whole += sum(1 for w in taken if (word_of == w).sum() > 1)
    assert whole > 50
    again = run_ventilator(tmp_path / "in", tmp_path / "out", *job)
    assert again.returncode == 0, again.stderr[-3000:]
    assert sorted((tmp_path / "out").glob("train/part-*.parquet")) == files


def test_electra_word_starts_carry_the_segmenters_words_and_leave_the_examples_as_they_were(tmp_path):
    """ELECTRA masks at train time: --word-starts writes where words begin (jieba's inside Han text), and
    Parquet's chinese_ref follows from them; the examples are the bytes a job without it writes."""
    need_shared()
    make_corpus(tmp_path / "in" / "AA", 0.05)
    chinese_vocabulary(str(VOCAB), tmp_path)
    job = ["--vocab-file", tmp_path / "zh-vocab.txt", "--objective", "electra", "--output-format", "parquet",
           "--task-size", "64K", "--workers", "2"]
    marked = run_ventilator(tmp_path / "in", tmp_path / "marked", *job, "--word-segmenter", "jieba",
                            "--word-starts", "--chinese-ref")
    plain = run_ventilator(tmp_path / "in", tmp_path / "plain", *job)
    assert marked.returncode == 0, marked.stderr[-3000:]
    assert plain.returncode == 0, plain.stderr[-3000:]

    def rows(out):
        return sorted((row for f in sorted(out.glob("train/part-*.parquet")) for row in pq.read_table(f).to_pylist()),
                      key=lambda row: row["input_ids"])

    marked_rows, plain_rows = rows(tmp_path / "marked"), rows(tmp_path / "plain")
    assert len(marked_rows) == len(plain_rows) > 50
    continuing = 0
    for row, before in zip(marked_rows, plain_rows):
        assert {k: row[k] for k in before} == before
        text = [m == 1 and s == 0 for m, s in zip(row["input_mask"], row["special_tokens_mask"])]
        assert row["chinese_ref"] == [i for i, (t, w) in enumerate(zip(text, row["word_starts"])) if t and not w]
        continuing += len(row["chinese_ref"])
    assert continuing > 0.2 * sum(sum(row["input_mask"]) for row in marked_rows)  # Chinese words: 2+ characters


ROLES = ["--cls-token", "<s>", "--sep-token", "</s>", "--mask-token", "<mask>", "--pad-token", "<pad>",
         "--unk-token", "<unk>"]


@pytest.mark.parametrize("flags,reason", [
    (["--word-segmenter", "jieba", "--objective", "roberta", "--tokenizer", "BPE", *ROLES],
     "needs a tokenizer that makes each Han character"),
    (["--jieba-hmm", "--vocab-file", "VOCAB"], "--jieba-hmm does not apply to"),
    (["--chinese-ref", "--output-format", "parquet", "--vocab-file", "VOCAB"],
     "--chinese-ref needs records with word_starts"),
])
def test_chinese_flags_that_cannot_work_are_refused(tmp_path, flags, reason):
    from tokenizers import Tokenizer, models, pre_tokenizers

    need_shared()
    make_corpus(tmp_path / "in" / "AA", 0.01)
    bpe = Tokenizer(models.BPE({"a": 0, "<unk>": 1, "<s>": 2, "</s>": 3, "<mask>": 4, "<pad>": 5}, [],
                               unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel()  # byte-level pieces can span characters: refused
    bpe.save(str(tmp_path / "bpe.json"))
    paths = {"BPE": str(tmp_path / "bpe.json"), "VOCAB": str(VOCAB)}
    result = run_ventilator(tmp_path / "in", tmp_path / "out", *[paths.get(f, f) for f in flags])
    assert result.returncode == 1
    assert reason in result.stderr, result.stderr[-2000:]
    assert not (tmp_path / "out" / "manifest.jsonl").exists()
