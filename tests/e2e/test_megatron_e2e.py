"""--objective tokens --output-format megatron through the real command lines."""

from __future__ import annotations

import subprocess
import sys

import pytest

from common.writers.megatron import IndexedDataset
from tests.helpers import REPO, VOCAB, WIKI, manifest, need_shared, run_ventilator

pytestmark = pytest.mark.e2e

JOB = ["--vocab-file", VOCAB, "--task-size", "512K", "--objective", "tokens", "--output-format", "megatron"]


def test_megatron_output_is_the_same_whatever_the_fleet(tmp_path):
    need_shared()
    outputs = []
    for workers in (1, 2):
        output = tmp_path / f"out{workers}"
        result = run_ventilator(WIKI, output, *JOB, "--workers", str(workers))
        assert result.returncode == 0, result.stderr[-3000:]
        outputs.append(output)
    names = sorted(p.name for p in outputs[0].glob("part-*"))
    assert names == sorted(p.name for p in outputs[1].glob("part-*")) and len(names) == 8
    for name in names:
        assert (outputs[0] / name).read_bytes() == (outputs[1] / name).read_bytes(), name
    verify = subprocess.run([sys.executable, "-m", "sink.verify", str(outputs[0])], cwd=REPO, capture_output=True,
                            text=True, timeout=120)
    assert verify.returncode == 0, verify.stderr

    blend = (outputs[0] / "megatron_data_path.txt").read_text().split()
    weights, prefixes = [int(w) for w in blend[0::2]], blend[1::2]
    entries = manifest(outputs[0]).values()
    assert sum(weights) == sum(e["tokens"] for e in entries) > 0
    documents = 0
    for weight, prefix in zip(weights, prefixes):
        dataset = IndexedDataset.parse_index(open(prefix + ".idx", "rb").read()).with_data(
            open(prefix + ".bin", "rb").read())
        assert int(dataset.sequence_lengths.sum()) == weight
        documents += len(dataset.document_indices) - 1
    assert documents == sum(e["documents"] for e in entries) == 103


def test_masked_instances_are_refused_before_any_work(tmp_path):
    need_shared()
    result = run_ventilator(WIKI, tmp_path / "out", "--vocab-file", VOCAB, "--output-format", "megatron")
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert "megatron holds token sequences, not finished instances: use --objective tokens" in last
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
