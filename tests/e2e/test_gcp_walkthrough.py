"""docs/fleet.md's Google Cloud walk-through (seed 000's job), run as written where it can run offline: the
check of step 2, Chinese ELECTRA data with jieba words from a gs:// corpus, against the GCS emulator. The
command is read from the document itself, so the page and the test cannot drift apart."""

from __future__ import annotations

import re
import shlex

import pytest

from bench.chinese_bench import chinese_vocabulary, make_corpus
from tests.support.helpers import REPO, VOCAB, manifest, need_shared, python_module, run_ventilator
from tests.support.tf_reader import read_with_spec

pytestmark = [pytest.mark.e2e, pytest.mark.gcs]


def _walkthrough_command() -> list[str]:
    text = (REPO / "docs" / "fleet.md").read_text()
    section = text.split("### Walk-through: seed 000's job", 1)[1]
    block = section.split("```bash", 1)[1].split("```", 1)[0]
    joined = re.sub(r"\\\n\s*", " ", block)
    lines = [line for line in joined.splitlines() if line.startswith("python -m ventilator ")]
    assert len(lines) == 1, lines
    return shlex.split(lines[0])[3:]


def test_step_2_runs_as_written_on_a_gs_corpus(gcs, tmp_path):
    need_shared()
    args = _walkthrough_command()
    assert args[0] == "--data" and args[2] == "--output" and args[4:6] == ["--vocab-file", "chinese-vocab.txt"]
    assert args[1].startswith("gs://my-corpora/zhwiki/run1/corpus/")
    bucket = gcs.new_bucket("corpora")
    make_corpus(tmp_path / "zh" / "AA", 0.05)
    gcs.upload_tree(bucket, tmp_path / "zh", "zhwiki/run1/corpus", "wiki_*")
    chinese_vocabulary(str(VOCAB), tmp_path)
    data = args[1].replace("gs://my-corpora", f"gs://{bucket}")
    output = tmp_path / "zh-sample"
    rest = [str(tmp_path / "zh-vocab.txt") if a == "chinese-vocab.txt" else a for a in args[4:]]
    result = run_ventilator(data, output, *rest, env=gcs.env())
    assert result.returncode == 0, result.stderr[-3000:]
    assert "word segmenter: jieba" in result.stderr
    entries = manifest(output)
    assert entries and {e["source"] for e in entries.values()} == {"wiki_00"}  # relative to --data
    import tensorflow as tf

    spec = {name: tf.io.FixedLenFeature([128], tf.int64) for name in ("input_ids", "word_starts")}  # --word-starts
    examples = [ex for e in entries.values() for s in e["shards"] for ex in read_with_spec(str(output / s["name"]), spec)]
    assert examples and sum(int(ex["word_starts"].sum()) for ex in examples) > 0
    verified = python_module("sink.verify", str(output))
    out, _ = verified.communicate(timeout=120)
    assert verified.returncode == 0, out
