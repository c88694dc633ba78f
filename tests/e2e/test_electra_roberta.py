"""--objective electra and --objective roberta through the real ventilator,
sink and workers: the same shards whatever the number of workers, records
TensorFlow parses with the reading trainer's own spec (ELECTRA's
pretrain_data.py), mlm-verify passes, and flags that do not apply are
refused in one line before any work."""

import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import REPO, VOCAB, WIKI, manifest, need_shared, run_ventilator, shard_digests

pytestmark = pytest.mark.e2e

CLS, SEP, MASK = 101, 102, 103


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory):
    """The first ~150 KB of wiki_00, whole documents: several 32 KB tasks."""
    need_shared()
    text = (WIKI / "AA" / "wiki_00").read_text(encoding="utf-8")
    cut = text.index("</doc>\n", 150_000) + len("</doc>\n")
    root = tmp_path_factory.mktemp("small") / "corpus"
    root.mkdir()
    (root / "wiki_00").write_text(text[:cut], encoding="utf-8")
    return root


def run_twice(corpus, tmp_path, *args):
    """The job with 1 worker and with 2; both must succeed and pass mlm-verify."""
    outputs = []
    for workers in (1, 2):
        output = tmp_path / f"out{workers}"
        result = run_ventilator(corpus, output, "--vocab-file", VOCAB, "--task-size", "32K", "--workers", workers,
                                *args, timeout=120)
        assert result.returncode == 0, result.stderr[-3000:]
        verified = subprocess.run([sys.executable, "-m", "sink.verify", str(output)], cwd=REPO, capture_output=True,
                                  text=True, timeout=120)
        assert verified.returncode == 0, verified.stdout + verified.stderr
        outputs.append(output)
    one, two = (shard_digests(o) for o in outputs)
    assert len(one) >= 3 and one == two
    return outputs[0]


def read(output, spec):
    import os

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    records = {}
    for entry in manifest(output).values():
        for shard in entry["shards"]:
            dataset = tf.data.TFRecordDataset(str(output / shard["name"]))
            examples = [{k: v.numpy() for k, v in tf.io.parse_single_example(r, spec).items()} for r in dataset]
            assert len(examples) == shard["records"] > 0
            records[shard["name"]] = examples
    return [example for name in sorted(records) for example in records[name]]


def test_electra(small_corpus, tmp_path):
    import tensorflow as tf

    output = run_twice(small_corpus, tmp_path, "--objective", "electra")
    # pretrain_data.py's name_to_features, as ELECTRA's trainer reads them.
    spec = {name: tf.io.FixedLenFeature([128], tf.int64) for name in ("input_ids", "input_mask", "segment_ids")}
    examples = read(output, spec)
    two_segments = 0
    for ex in examples:
        ids, mask, segments = ex["input_ids"], ex["input_mask"], ex["segment_ids"]
        n = int(mask.sum())
        assert (mask[:n] == 1).all() and not mask[n:].any() and not ids[n:].any() and not segments[n:].any()
        assert ids[0] == CLS and ids[n - 1] == SEP and MASK not in ids
        if segments.any():
            b = int(np.argmax(segments))
            assert ids[b - 1] == SEP and (segments[b:n] == 1).all()
            two_segments += 1
    assert len(examples) > 200
    assert 0.6 < two_segments / len(examples) < 0.95


@pytest.mark.parametrize("masking", ["none", "static"])
def test_roberta(small_corpus, tmp_path, masking):
    import tensorflow as tf

    args = ["--objective", "roberta", "--max-seq-length", "128", "--masking", masking]
    if masking == "static":
        args += ["--masked-lm-prob", "0.3", "--dupe-factor", "2"]
    output = run_twice(small_corpus, tmp_path, *args)
    spec = {name: tf.io.FixedLenFeature([128], tf.int64) for name in ("input_ids", "input_mask", "segment_ids")}
    if masking == "none":
        spec.update({name: tf.io.FixedLenFeature([128], tf.int64) for name in ("special_tokens_mask", "word_starts")})
    else:
        spec.update(masked_lm_positions=tf.io.FixedLenFeature([38], tf.int64),
                    masked_lm_ids=tf.io.FixedLenFeature([38], tf.int64),
                    masked_lm_weights=tf.io.FixedLenFeature([38], tf.float32))
    examples = read(output, spec)
    lengths = []
    for ex in examples:
        ids, mask = ex["input_ids"], ex["input_mask"]
        n = int(mask.sum())
        assert ids[0] == CLS and ids[n - 1] == SEP and not mask[n:].any() and not ex["segment_ids"].any()
        lengths.append(n)
        if masking == "none":
            assert MASK not in ids
            assert (ex["special_tokens_mask"] == (np.isin(ids, [CLS, SEP]) | (mask == 0))).all()
        else:
            count = int(ex["masked_lm_weights"].sum())
            assert count == min(38, max(1, round(n * 0.3)))
            positions = ex["masked_lm_positions"][:count]
            assert (np.diff(positions) > 0).all() and positions[0] >= 1 and positions[-1] <= n - 2
            assert not np.isin(ex["masked_lm_ids"][:count], [CLS, SEP]).any()  # never [CLS], [SEP], separators
    assert np.mean(lengths) > 100  # whole sentences fill blocks, across documents


@pytest.mark.parametrize("objective,flag,expected", [
    ("electra", ["--short-seq-prob", "0.2"], "--short-seq-prob does not apply here"),
    ("bert", ["--pack", "doc-sentences"], "--pack does not apply here"),
    ("roberta", ["--masking", "none", "--dupe-factor", "5"], "--dupe-factor would repeat identical blocks"),
])
def test_flags_that_do_not_apply_are_refused(tmp_path, objective, flag, expected):
    need_shared()
    output = tmp_path / "out"
    result = run_ventilator(WIKI / "AA", output, "--vocab-file", VOCAB, "--workers", "1", "--objective", objective,
                            *flag, timeout=120)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("ventilator: error:") and expected in lines[-1], result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert not output.exists() or not list(output.glob("part-*")), "no work was done"


def test_static_masking_needs_a_mask_token(tmp_path):
    need_shared()
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(line for line in VOCAB.read_text().splitlines() if line != "[MASK]") + "\n")
    result = run_ventilator(WIKI / "AA", tmp_path / "out", "--vocab-file", vocab, "--workers", "1", "--objective",
                            "roberta", "--masking", "static", timeout=120)
    assert result.returncode == 1
    assert "--masking static needs the tokenizer's mask token" in result.stderr.strip().splitlines()[-1]
