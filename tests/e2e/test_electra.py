"""--objective electra through the real ventilator, sink and workers: the
same shards whatever the number of workers, records TensorFlow parses with
ELECTRA's own pretrain_data.py spec, mlm-verify passes; flags that do not
apply are refused in one line before any work."""

import numpy as np
import pytest

from tests.e2e.objective_runs import CLS, MASK, SEP, read, run_twice, small_corpus  # noqa: F401 (fixture)
from tests.support.helpers import VOCAB, WIKI, need_shared, run_ventilator

pytestmark = pytest.mark.e2e


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
    assert len(examples) > 150  # ~150 KB: its paragraph lines, as the reference adds them (--segmenter auto)
    # Paragraph lines are often longer than half an example and then fill the first segment alone: about
    # half the examples have two (tests/common/objectives/test_electra.py compares that with the reference).
    assert 0.3 < two_segments / len(examples) < 0.95


@pytest.mark.parametrize("objective,flag,expected", [
    ("electra", ["--short-seq-prob", "0.2"], "--short-seq-prob does not apply"),
    ("bert", ["--pack", "doc-sentences"], "--pack does not apply"),
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


