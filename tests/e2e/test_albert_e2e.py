"""--objective albert through the real command lines: the same bytes for
any number of workers, TensorFlow parses every record with ALBERT's
run_pretraining.py features, mlm-verify agrees, foreign flags refused."""

from __future__ import annotations

import subprocess
import sys

import pytest

from common.objectives.albert import AlbertObjective
from common.tokenization import Vocabulary, load_tokenizer
from tests.support.factories import finished_by_fleets
from tests.support.helpers import REPO, VOCAB, WIKI, manifest, need_shared, run_ventilator, shard_digests

pytestmark = pytest.mark.e2e

JOB = ["--vocab-file", VOCAB, "--objective", "albert", "--max-seq-length", "128", "--dupe-factor", "2",
       "--task-size", "512K"]


def test_albert_end_to_end(tmp_path):
    outputs = finished_by_fleets(tmp_path, *JOB)
    assert shard_digests(outputs[0]) == shard_digests(outputs[1]) != {}
    verify = subprocess.run([sys.executable, "-m", "sink.verify", str(outputs[0])], cwd=REPO, capture_output=True,
                            text=True, timeout=120)
    assert verify.returncode == 0, verify.stderr

    from tests.support.tf_reader import read_with_spec, spec_of

    special = Vocabulary.from_tokenizer(load_tokenizer(vocab_file=str(VOCAB))).special
    features = AlbertObjective(AlbertObjective.make_params({"max_seq_length": 128}), special).features
    assert [f.name for f in features] == ["input_ids", "input_mask", "segment_ids", "token_boundary",
                                          "masked_lm_positions", "masked_lm_ids", "masked_lm_weights",
                                          "next_sentence_labels"]
    labels = []
    for entry in manifest(outputs[0]).values():
        for shard in entry["shards"]:
            examples = read_with_spec(str(outputs[0] / shard["name"]), spec_of(features))
            assert len(examples) == shard["records"] > 0
            for example in examples:
                length = int(example["input_mask"].sum())
                assert example["input_ids"][0] == special.cls and example["input_ids"][length - 1] == special.sep
                assert example["token_boundary"][0] == 1 and (example["token_boundary"][length:] == 0).all()
                assert 1 <= example["masked_lm_weights"].sum() <= 20
                labels.append(int(example["next_sentence_labels"][0]))
    assert 0.45 < sum(labels) / len(labels) < 0.8


@pytest.mark.parametrize("flags,reason", [
    (["--objective", "bert", "--ngram", "2"], "--ngram does not apply to --objective bert"),
    (["--objective", "albert", "--masking", "none"], "--masking does not apply to --objective albert"),
])
def test_flags_of_other_objectives_are_refused(tmp_path, flags, reason):
    need_shared()
    result = run_ventilator(WIKI, tmp_path / "out", "--vocab-file", VOCAB, *flags, "--workers", "1")
    assert result.returncode == 1 and reason in result.stderr.strip().splitlines()[-1]
