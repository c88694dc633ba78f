"""Parquet and JSON Lines through the real command lines: the same bytes
shipped or read by workers, whatever their number; a held-out split in
OUT/holdout/ that mlm-verify accepts; a resume that redoes nothing; bad
inputs refused in one line before any work."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from common.steps import split_of
from tests.support.factories import finished_run
from tests.support.helpers import VOCAB, need_shared, python_module, run_ventilator
from tests.support.web_corpora import wiki_articles, wiki_jsonl, wiki_parquet

pytestmark = pytest.mark.e2e

JOB = ["--vocab-file", VOCAB, "--dupe-factor", "1", "--report-seconds", "2"]
HOLDOUT = ["--holdout-fraction", "0.2", "--holdout-seed", "5"]


def digests(output: Path) -> dict[str, str]:
    import hashlib
    return {p.relative_to(output).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(output.rglob("part-*"))}


@pytest.fixture(scope="module")
def parquet_data(tmp_path_factory):
    need_shared()
    root = tmp_path_factory.mktemp("parquet") / "data"
    wiki_parquet(root, files=2, row_group_size=6)
    return root


@pytest.fixture(scope="module")
def shipped(parquet_data):
    """Two workers, the ventilator shipping each task's columns."""
    run = finished_run(parquet_data, parquet_data.parent / "shipped", *JOB, *HOLDOUT, "--task-size", "150K",
                       "--workers", "2")
    assert "input format: parquet (detected" in run.stderr
    return run.output


def test_workers_reading_row_groups_themselves_write_the_same_bytes(parquet_data, shipped, tmp_path):
    output = tmp_path / "out"
    result = run_ventilator(parquet_data, output, *JOB, *HOLDOUT, "--task-size", "150K", "--workers", "1",
                            "--shared-fs", "--format", "parquet")
    assert result.returncode == 0, result.stderr[-3000:]
    assert digests(output) == digests(shipped)
    assert any(name.startswith("holdout/part-") for name in digests(output))


def test_holdout_side_is_marked_counted_and_verified(shipped):
    entries = [json.loads(line) for line in (shipped / "manifest.jsonl").read_text().splitlines()]
    summary = json.loads((shipped / "summary.json").read_text())
    held_files = [f for e in entries for f in e["shards"] if split_of(f) == "holdout"]
    training_files = [f for e in entries for f in e["shards"] if not split_of(f)]
    assert held_files and all(f["name"].startswith("holdout/part-") for f in held_files)
    assert all(f["name"].startswith("part-") for f in training_files)
    assert summary["holdout"]["documents"] == sum(e["holdout"]["documents"] for e in entries) > 5
    assert summary["holdout"]["shards"] == len(held_files)
    assert summary["holdout"]["records"] == sum(f["records"] for f in held_files)
    assert summary["records"] == sum(f["records"] for f in training_files) == sum(e["records"] for e in entries)
    assert summary["documents"] + summary["holdout"]["documents"] == len(wiki_articles())
    assert summary["shards"] == len(training_files)
    verified = python_module("sink.verify", shipped)
    out, _ = verified.communicate(timeout=120)
    assert verified.returncode == 0, out
    assert f"{len(held_files) + len(training_files)} shards" in out and "all match the manifest" in out
    # A held-out file the manifest does not list is reported.
    stray = shipped / "holdout" / "part-0000.tfrecord"
    stray.write_bytes(b"")
    try:
        verified = python_module("sink.verify", shipped)
        out, _ = verified.communicate(timeout=120)
        assert verified.returncode == 1 and "holdout/part-0000.tfrecord: not in the manifest" in out
    finally:
        stray.unlink()


def test_the_same_command_again_redoes_nothing(parquet_data, shipped):
    before = (shipped / "manifest.jsonl").read_bytes()
    result = run_ventilator(parquet_data, shipped, *JOB, *HOLDOUT, "--task-size", "150K", "--workers", "1")
    assert result.returncode == 0, result.stderr[-3000:]
    assert (shipped / "manifest.jsonl").read_bytes() == before


def test_json_lines_plain_and_compressed_with_named_fields(tmp_path):
    need_shared()
    articles = wiki_articles()
    wiki_jsonl(tmp_path / "data" / "a.jsonl", "content", "doc_id", articles[:50])
    compressed = wiki_jsonl(tmp_path / "b.jsonl", "content", "doc_id", articles[50:])
    (tmp_path / "data" / "b.jsonl.gz").write_bytes(gzip.compress(compressed.read_bytes()))
    output = tmp_path / "out"
    result = run_ventilator(tmp_path / "data", output, *JOB, "--task-size", "100K", "--workers", "2",
                            "--text-field", "content", "--id-field", "doc_id")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "input format: jsonl (detected" in result.stderr
    summary = json.loads((output / "summary.json").read_text())
    assert summary["documents"] == len(articles) and summary["skipped_documents"] == {}
    assert summary["tasks"] > 3 and "holdout" not in summary


def test_bad_parquet_inputs_are_refused_in_one_line(parquet_data, tmp_path):
    result = run_ventilator(parquet_data, tmp_path / "out", *JOB, "--text-column", "body", "--workers", "1",
                            timeout=120)
    assert result.returncode == 1
    (line,) = [line for line in result.stderr.splitlines() if "error" in line.lower()]
    assert "--text-column body: no input file has such a text column (train-00000-of-00002.parquet has: id " \
           "(string), text (string), url (string))" in line
    assert not (tmp_path / "out" / "manifest.jsonl").exists()
    data = tmp_path / "mixed"
    data.mkdir()
    for path in parquet_data.iterdir():
        (data / path.name).write_bytes(path.read_bytes())
    (data / "notes.txt").write_text("just text\n")
    result = run_ventilator(data, tmp_path / "out", *JOB, "--format", "parquet", "--workers", "1", timeout=120)
    assert result.returncode == 1
    assert "notes.txt: not a Parquet file" in result.stderr and "Traceback" not in result.stderr
