"""--objective roberta (both --masking values) through the real ventilator,
sink and workers: the same shards whatever the number of workers, records
TensorFlow parses, mlm-verify passes; settings that make no sense are
refused in one line before any work."""

import numpy as np
import pytest

from tests.e2e.objective_runs import CLS, MASK, SEP, read, run_twice, small_corpus  # noqa: F401 (fixture)
from tests.support.helpers import VOCAB, WIKI, need_shared, run_ventilator

pytestmark = pytest.mark.e2e


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


@pytest.mark.parametrize("flag,expected", [
    (["--masking", "none", "--dupe-factor", "5"], "--dupe-factor would repeat identical blocks"),
    (["--masking", "none", "--masked-lm-prob", "0.3", "--do-whole-word-mask", "--max-predictions-per-seq", "20"],
     "--masked-lm-prob, --max-predictions-per-seq, --do-whole-word-mask do nothing but with --masking static"),
])
def test_roberta_flags_that_make_no_sense_are_refused(tmp_path, flag, expected):
    need_shared()
    output = tmp_path / "out"
    result = run_ventilator(WIKI / "AA", output, "--vocab-file", VOCAB, "--workers", "1", "--objective", "roberta",
                            *flag, timeout=120)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("ventilator: error:") and expected in lines[-1], result.stderr[-2000:]
    assert "Traceback" not in result.stderr


def test_static_masking_needs_a_mask_token(tmp_path):
    need_shared()
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(line for line in VOCAB.read_text().splitlines() if line != "[MASK]") + "\n")
    result = run_ventilator(WIKI / "AA", tmp_path / "out", "--vocab-file", vocab, "--workers", "1", "--objective",
                            "roberta", "--masking", "static", timeout=120)
    assert result.returncode == 1
    assert "--masking static needs the tokenizer's mask token" in result.stderr.strip().splitlines()[-1]
