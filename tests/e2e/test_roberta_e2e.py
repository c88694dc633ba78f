"""--objective roberta through the real command lines: any number of workers
gives the same bytes, TensorFlow reads every record, mlm-verify agrees."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from common.objectives.roberta import RobertaObjective
from common.tokenization import Vocabulary, load_tokenizer
from tests.helpers import REPO, VOCAB, WIKI, manifest, need_shared, run_ventilator, shard_digests

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("flags", [
    ["--masking", "static", "--masked-lm-prob", "0.3", "--dupe-factor", "2"],
    ["--masking", "none", "--pack", "doc-sentences"],
], ids=["static", "none"])
def test_roberta_blocks_end_to_end(tmp_path, flags):
    need_shared()
    job = ["--vocab-file", VOCAB, "--objective", "roberta", "--max-seq-length", "128", "--task-size", "512K", *flags]
    outputs = []
    for workers in (1, 2):
        output = tmp_path / f"out{workers}"
        result = run_ventilator(WIKI, output, *job, "--workers", str(workers))
        assert result.returncode == 0, result.stderr[-3000:]
        outputs.append(output)
    assert shard_digests(outputs[0]) == shard_digests(outputs[1]) != {}
    verify = subprocess.run([sys.executable, "-m", "sink.verify", str(outputs[0])], cwd=REPO, capture_output=True,
                            text=True, timeout=120)
    assert verify.returncode == 0, verify.stderr

    from tests.tf_reader import read_with_spec, spec_of

    vocabulary = Vocabulary.from_tokenizer(load_tokenizer(vocab_file=str(VOCAB)))
    params = RobertaObjective.make_params({"max_seq_length": 128, **{
        flags[i][2:].replace("-", "_"): (float(flags[i + 1]) if "." in flags[i + 1] else
                                          int(flags[i + 1]) if flags[i + 1].isdigit() else flags[i + 1])
        for i in range(0, len(flags), 2)}})
    spec = spec_of(RobertaObjective(params, vocabulary.special).features)
    records = 0
    for entry in manifest(outputs[0]).values():
        for shard in entry["shards"]:
            examples = read_with_spec(str(outputs[0] / shard["name"]), spec)
            assert len(examples) == shard["records"]
            for example in examples:
                length = int(example["input_mask"].sum())
                assert example["input_ids"][0] == vocabulary.special.cls
                assert example["input_ids"][length - 1] == vocabulary.special.sep
                assert (example["input_ids"][length:] == 0).all()
            records += len(examples)
    assert records > 100
    if "none" in flags:
        assert not np.isin(vocabulary.special.mask, [e["input_ids"] for e in examples])
