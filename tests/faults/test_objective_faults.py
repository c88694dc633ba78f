"""Every objective, in every output format it can be written in, keeps the
pipeline's promises under faults: workers killed with -9 mid-job (their
tasks redelivered) and the ventilator killed and restarted (the job resumed
from the manifest) end with the same manifest and the same bytes, file for
file, as a clean run.  The mechanism is shared; this checks that no
objective or writer holds state outside it (a half-written Parquet or
Megatron file, a draw that depends on which worker ran a task)."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest

from tests.cluster import Cluster
from tests.helpers import VOCAB, WIKI, manifest, need_shared, run_ventilator

pytestmark = [pytest.mark.e2e, pytest.mark.faults]

CASES = {
    "albert-tfrecord": ["--objective", "albert", "--max-seq-length", "128", "--dupe-factor", "2"],
    "albert-parquet": ["--objective", "albert", "--max-seq-length", "128", "--dupe-factor", "2",
                       "--output-format", "parquet"],
    "electra-parquet": ["--objective", "electra", "--output-format", "parquet"],
    "roberta-static-tfrecord": ["--objective", "roberta", "--masking", "static", "--max-seq-length", "128",
                                "--dupe-factor", "2"],
    "roberta-none-parquet": ["--objective", "roberta", "--masking", "none", "--max-seq-length", "256",
                             "--output-format", "parquet", "--bin-size", "64"],
    "tokens-megatron": ["--objective", "tokens", "--output-format", "megatron"],
}


def _files(output: Path) -> dict[str, str]:
    """Every file of the output but the run's own records (summary, manifest: compared apart): name → sha256
    (of the bytes with the output's own location written as OUT: Megatron's blend list names its prefixes)."""
    return {str(p.relative_to(output)): hashlib.sha256(p.read_bytes().replace(str(output).encode(), b"OUT")).hexdigest()
            for p in sorted(output.rglob("*")) if p.is_file() and p.name not in ("summary.json", "manifest.jsonl")}


def _entries(output: Path) -> dict[str, dict]:
    """The manifest by task, without which worker wrote each line."""
    return {task: {k: v for k, v in entry.items() if k != "worker"} for task, entry in manifest(output).items()}


@pytest.mark.parametrize("case", sorted(CASES))
def test_killed_workers_and_a_restarted_ventilator_change_nothing(case, tmp_path):
    need_shared()
    job = ["--vocab-file", VOCAB, "--task-size", "128K", *CASES[case]]
    clean = tmp_path / "clean"
    result = run_ventilator(WIKI, clean, *job, "--workers", "2")
    assert result.returncode == 0, result.stderr[-3000:]
    tasks = len(manifest(clean))
    assert tasks >= 10

    cluster = Cluster(WIKI, tmp_path / "out", job, tmp_path)
    try:
        cluster.start(3)
        cluster.wait_for_progress(2)
        cluster.kill(cluster.live_workers()[0])  # its task, leased and half done, is redelivered
        cluster.start_worker()
        cluster.wait_for_progress(5)
        cluster.kill(cluster.live_workers()[-1])
        cluster.kill(cluster.ventilator)
        time.sleep(0.5)
        cluster.start_ventilator()  # the same command: resumes from the manifest
        assert cluster.wait() == 0, cluster.tail()
    finally:
        cluster.close()

    assert _entries(cluster.output) == _entries(clean)  # each task once, the same shards and counts
    ours, theirs = _files(cluster.output), _files(clean)
    assert ours == theirs, {name for name in ours.keys() | theirs.keys() if ours.get(name) != theirs.get(name)}
