"""What the end-to-end tests share: the shared material, free ports, running
the real command lines, and checking output with TensorFlow."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import numpy as np
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from bench.procs import free_ports  # one helper for tests and benchmarks

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared"
WIKI = SHARED / "corpus" / "wiki"
VOCAB = SHARED / "vocab" / "bert-base-uncased-vocab.txt"


def need_shared() -> None:
    if not WIKI.is_dir() or not VOCAB.is_file():
        pytest.skip(f"needs ../shared (corpus and vocabulary) beside the repository: {SHARED} is absent")


def python_module(module: str, *args: str, **kwargs) -> subprocess.Popen:
    env = {**os.environ, **kwargs.pop("env", {})}
    return subprocess.Popen([sys.executable, "-m", module, *map(str, args)], cwd=REPO, env=env,
                            stdout=kwargs.pop("stdout", subprocess.PIPE), stderr=kwargs.pop("stderr", subprocess.STDOUT),
                            text=True, **kwargs)


def run_ventilator(data, output, *args, timeout: float = 300, env=None) -> subprocess.CompletedProcess:
    vport, sink_port = free_ports(2)
    command = [sys.executable, "-m", "ventilator", "--data", str(data), "--output", str(output),
               "--vport", str(vport), "--sink-port", str(sink_port), "--bind-host", "127.0.0.1",
               "--state-dir", str(Path(str(output)).parent / "state") if "://" not in str(output) else "/tmp/mlm-state",
               *map(str, args)]
    return subprocess.run(command, cwd=REPO, env={**os.environ, **(env or {})}, capture_output=True, text=True,
                          timeout=timeout)


def manifest(output: Path) -> dict[str, dict]:
    lines = (Path(output) / "manifest.jsonl").read_text().splitlines()
    entries = [orjson.loads(line) for line in lines]  # strict JSON: orjson refuses Infinity and NaN
    by_task = {e["task"]: e for e in entries}
    assert len(by_task) == len(entries), "a task is listed twice"
    return by_task


def shard_digests(output: Path) -> dict[str, str]:
    import hashlib
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(Path(output).glob("part-*"))}


def check_shards(output: Path, vocab_size: int = 30522, max_seq_length: int = 128, max_predictions: int = 20,
                 compression: str = "", cls_id: int = 101, sep_id: int = 102, pad_id: int = 0) -> dict:
    """Read every shard with TensorFlow and check BERT's invariants record by
    record; returns totals for further checks."""
    from tests.support.tf_reader import read_examples

    entries = manifest(output)
    totals = {"records": 0, "masked": 0, "tokens": 0, "random_next": 0}
    names = set()
    for entry in entries.values():
        if not entry["shards"]:
            assert entry["records"] == 0
            continue
        (shard,) = entry["shards"]
        path = Path(output) / shard["name"]
        names.add(path.name)
        examples = read_examples(str(path), max_seq_length, max_predictions, "GZIP" if compression else "")
        assert len(examples) == entry["records"] == shard["records"] > 0
        for ex in examples:
            ids, mask, segments = ex["input_ids"], ex["input_mask"], ex["segment_ids"]
            length = int(mask.sum())
            assert (mask[:length] == 1).all() and (mask[length:] == 0).all()
            assert ids[0] == cls_id and ids[length - 1] == sep_id and (ids[length:] == pad_id).all()
            assert (ids >= 0).all() and (ids < vocab_size).all()
            first_b = int(np.argmax(segments)) if segments.any() else length
            assert ids[first_b - 1] == sep_id and (segments[first_b:length] == 1).all()
            count = int(ex["masked_lm_weights"].sum())
            assert 1 <= count <= max_predictions
            assert ex["next_sentence_labels"][0] in (0, 1)
            totals["records"] += 1
            totals["masked"] += count
            totals["tokens"] += length
            totals["random_next"] += int(ex["next_sentence_labels"][0])
    on_disk = {p.name for p in Path(output).glob("part-*")}
    assert on_disk == names, "shards on disk and in the manifest differ"
    assert not list(Path(output).glob(".*.tmp")), "temporary files left behind"
    return totals


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted labels): value} from http://127.0.0.1:PORT/metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def drawn_values(strategy, count: int) -> list:
    """``count`` values of a hypothesis ``strategy``, the same on every run: frames to send to a live role,
    where a test cannot be run once per example."""
    from hypothesis import HealthCheck, given, settings

    values: list = []

    @settings(max_examples=count, database=None, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(value):
        values.append(value)

    collect()
    return values
