"""A rerun leaves only what its manifest lists, and its summary's cost covers every run (issue 34, items 7
and 13).

The job: ``--dedup exact`` with a held-out side over two files, ``a.gz`` and ``b``, where ``b`` copies
``a.gz``'s documents.  The first run finds ``a.gz`` corrupt (quarantined: exit 3), so ``b``'s documents
survive dedup and ``b``'s tasks write files.  With ``a.gz`` repaired (the same size and mtime: the same
job), the rerun redoes the stages and the normal pass: ``b``'s documents are now ``a.gz``'s copies and
``b``'s tasks write nothing.  The first run's files of ``b`` must not stay: not on disk, not in
Megatron's merged pairs, not in what the loader serves."""

from __future__ import annotations

import gzip
import json
import os

import pytest

from common.output.manifest import read_entries, shard_files, stage_files
from common.storage import LocalStorage, S3Storage
from common.writers import is_output_file
from loader.shards import ShardCache, open_dataset
from sink.verify import verify_output
from tests.support.helpers import VOCAB, WIKI, need_shared, run_ventilator

pytestmark = pytest.mark.e2e

JOB = ["--vocab-file", VOCAB, "--task-size", "8K", "--workers", "1", "--dedup", "exact",
       "--holdout-fraction", "0.3", "--max-attempts", "1", "--report-seconds", "2", "--format", "wikiextractor"]
FORMATS = {"tfrecord": ["--dupe-factor", "1"], "parquet": ["--dupe-factor", "1", "--output-format", "parquet"],
           "megatron": ["--objective", "tokens", "--output-format", "megatron", "--megatron-merge-size", "64K"]}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """``a.gz`` (short whole documents, ~30 KB of text), ``b`` (the same documents), and a.gz's good bytes."""
    need_shared()
    documents = (WIKI / "AA" / "wiki_00").read_text(encoding="utf-8").split("</doc>\n")[:-1]
    text = "".join(document + "</doc>\n" for document in documents if len(document) < 7000)
    root = tmp_path_factory.mktemp("corpus")
    (root / "data").mkdir()
    good = gzip.compress(text.encode(), mtime=0)
    (root / "data" / "b").write_text(text, encoding="utf-8")
    return root / "data", good


def _run_twice(corpus, output, *args, env=None):
    """The first run with a.gz corrupt (exit 3), the rerun with it repaired; the first run's summary."""
    data, good = corpus
    victim = data / "a.gz"
    bad = bytearray(good)
    bad[len(bad) // 2] ^= 0xFF
    victim.write_bytes(bytes(bad))
    os.utime(victim, ns=(1_700_000_000_000_000_000,) * 2)
    first = run_ventilator(data, output, *JOB, *args, env=env)
    assert first.returncode == 3, first.stderr[-3000:]
    victim.write_bytes(good)  # the same size and mtime: the same version, the same job
    os.utime(victim, ns=(1_700_000_000_000_000_000,) * 2)
    return first


def _check(storage, first_files: set[str], first_summary: dict) -> None:
    entries = read_entries(storage)
    listed = {f["name"] for e in entries for f in shard_files(e) + stage_files(e)}
    written = {name for name in storage.list_outputs() if is_output_file(name)}
    assert first_files - listed, "the rerun lists every file of the first run: the test would prove nothing"
    assert any(name.startswith(("holdout/", "validation/", "val/")) for name in listed)  # the held-out side's directory
    # Item 7: on disk, exactly what the manifest lists; mlm-verify passes.
    assert written == {name for name in listed if is_output_file(name)}
    assert verify_output(storage).problems == []
    summary = json.loads(storage.get_bytes("summary.json"))
    assert summary["complete"] and summary["reason"].endswith("all tasks done")
    # Megatron's merged pairs hold exactly the listed pairs (the stale ones were read back twice before).
    merged = {f["name"]: f for e in entries if e.get("stage") == "finish" for f in stage_files(e)}
    if merged:
        for side in ("", "holdout/"):
            parts = [f for e in entries if not e.get("stage") for f in shard_files(e)
                     if f["name"].endswith(".bin") and f["name"].startswith(side + "part-")]
            joined = [f for name, f in merged.items() if name.endswith(".bin") and name.startswith(side + "megatron/")]
            assert sum(f["bytes"] for f in joined) == sum(f["bytes"] for f in parts) > 0, side
    # The files that describe the output name only listed files: the dataset card (Parquet), Megatron's data
    # path lists.
    stale = first_files - listed
    for description in ("README.md", "megatron_data_path.txt", "holdout/megatron_data_path.txt"):
        text = (storage.get_bytes(description) or b"").decode()
        assert not [name for name in stale if name.rsplit(".", 1)[0] in text], description
        root = storage.uri("").rstrip("/")
        for line in text.splitlines() if description.endswith(".txt") else ():  # TOKENS PREFIX
            prefix = line.split()[1]
            assert prefix.startswith(root) and f"{prefix[len(root):].lstrip('/')}.bin" in listed, line
    if not merged:  # the loader serves what the manifest lists, and reads every file of it (fixed-length records)
        served, shards = open_dataset(storage.uri(""))
        cache = ShardCache(served, shards, 1 << 30)
        assert sum(len(next(iter(cache.columns(i).values()))) for i in range(len(shards.names))) == shards.records
    # Item 13: the cost adds up over both runs.
    cost, before, this_run = summary["cost"], first_summary["cost"], summary["this_run"]["cost"]
    assert cost["runs"] == 2 and before["runs"] == 1
    for spent in ("worker_cpu_hours", "instance_hours"):  # what each run spent, summed
        assert cost[spent] == pytest.approx(before[spent] + this_run[spent], abs=1e-8), spent
        assert cost[spent] > before[spent] > 0, spent
    # What the job made: the manifest's tasks, whichever run did them.
    assert cost["input_gb"] == round(sum(e.get("bytes_in", 0) for e in entries) / 1e9, 9) > 0
    assert cost["output_tokens_without_padding"] == sum(e.get("output_tokens", 0) for e in entries) > 0
    if cost["output_tokens"] is not None:  # objectives with a sequence length: records x that length
        assert cost["output_tokens"] == summary["records"] * 128


def _local_summary(output) -> dict:
    return json.loads((output / "summary.json").read_text())


@pytest.mark.parametrize("output_format", sorted(FORMATS))
def test_a_rerun_after_a_quarantine_leaves_only_what_its_manifest_lists(corpus, tmp_path, output_format):
    output = tmp_path / "out"
    _run_twice(corpus, output, *FORMATS[output_format])
    first_files = {name for name in LocalStorage(str(output)).list_outputs() if is_output_file(name)}
    first_summary = _local_summary(output)
    if output_format == "megatron":
        # As if the first run's acknowledgements of b's tasks were lost (a crash between write and ack): their
        # files are there and listed nowhere, so only the task done again can know them, before the merge.
        lines = (output / "manifest.jsonl").read_text().splitlines(keepends=True)
        kept = [line for line in lines if json.loads(line).get("stage") or json.loads(line)["source"] != "b"]
        assert len(kept) < len(lines)
        (output / "manifest.jsonl").write_text("".join(kept))
    second = run_ventilator(corpus[0], output, *JOB, *FORMATS[output_format])
    assert second.returncode == 0, second.stderr[-3000:]
    _check(LocalStorage(str(output)), first_files, first_summary)


@pytest.mark.s3
def test_the_same_on_s3(s3, corpus, tmp_path):
    bucket = s3.new_bucket("rerun")
    output = f"s3://{bucket}/out"
    args = [*FORMATS["megatron"], "--s3-endpoint-url", s3.endpoint_url]
    _run_twice(corpus, output, *args, env=s3.env())
    os.environ.update(s3.env())
    storage = S3Storage(output, s3.endpoint_url)
    first_files = {name for name in storage.list_outputs() if is_output_file(name)}
    first_summary = json.loads(storage.get_bytes("summary.json"))
    second = run_ventilator(corpus[0], output, *JOB, *args, env=s3.env())
    assert second.returncode == 0, second.stderr[-3000:]
    _check(storage, first_files, first_summary)
