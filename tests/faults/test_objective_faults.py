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

from tests.support.cluster import Cluster
from tests.support.helpers import VOCAB, WIKI, manifest, need_shared, run_ventilator

pytestmark = [pytest.mark.e2e, pytest.mark.faults]

#: Every objective, every format (Megatron takes only the tokens objective).
CASES = {
    "albert-parquet": ["--objective", "albert", "--max-seq-length", "128", "--dupe-factor", "2",
                       "--output-format", "parquet"],
    "electra-tfrecord": ["--objective", "electra"],
    "roberta-static-tfrecord": ["--objective", "roberta", "--masking", "static", "--max-seq-length", "128",
                                "--dupe-factor", "2"],
    "roberta-none-parquet": ["--objective", "roberta", "--masking", "none", "--max-seq-length", "256",
                             "--output-format", "parquet", "--bin-size", "64"],
    "tokens-megatron": ["--objective", "tokens", "--output-format", "megatron"],
}


#: Files that record the run itself: compared apart, or not at all (dataset_info.json and the dataset card
#: README.md name the command line, which differs between the clean run and the cluster's).
RUN_RECORDS = ("summary.json", "manifest.jsonl", "dataset_info.json", "README.md")


def _files(output: Path) -> dict[str, str]:
    """Every file of the output but the run's own records (summary, manifest: compared apart): name → sha256
    (of the bytes with the output's own location written as OUT: Megatron's blend list names its prefixes)."""
    return {str(p.relative_to(output)): hashlib.sha256(p.read_bytes().replace(str(output).encode(), b"OUT")).hexdigest()
            for p in sorted(output.rglob("*")) if p.is_file() and p.name not in RUN_RECORDS}


def _entries(output: Path) -> dict[str, dict]:
    """The manifest by task, without which worker wrote each line, when, and the CPU it took."""
    return {task: {k: v for k, v in entry.items() if k not in ("worker", "at", "seconds", "cpu_seconds")} for task, entry in manifest(output).items()}


def _ventilator_log(cluster: Cluster) -> str:
    return "\n".join(log.read_text() for log in cluster.logs if log.name.startswith("ventilator"))


def _requeued(cluster: Cluster, timeout: float) -> bool:
    """Whether the ventilator puts a task back in the queue (a lease expired) within ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if "back in the queue" in _ventilator_log(cluster):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("case", sorted(CASES))
def test_killed_workers_and_a_restarted_ventilator_change_nothing(case, tmp_path):
    """The faults happen at known points, whatever the machine's speed: the
    only worker is killed holding a task, its lease expires with no worker
    left (the task goes back in the queue), the ventilator is killed with
    work still pending and restarted, and new workers finish the job."""
    need_shared()
    job = ["--vocab-file", VOCAB, "--task-size", "256K", *CASES[case]]
    clean = tmp_path / "clean"
    result = run_ventilator(WIKI, clean, *job, "--workers", "2")
    assert result.returncode == 0, result.stderr[-3000:]
    tasks = len(manifest(clean))
    assert tasks >= 6

    cluster = Cluster(WIKI, tmp_path / "out", job, tmp_path)
    try:
        cluster.start(1)
        for attempt in range(3):  # a worker killed between an ack and its next lease holds nothing: again
            cluster.wait_for_progress(attempt + 1)
            assert cluster.progress() < tasks - 1, "the job ran out before the kill"
            cluster.kill(cluster.live_workers()[0])
            if _requeued(cluster, timeout=10):  # leases are 3 s (tests/support/cluster.py)
                break
            cluster.start_worker()
        else:
            pytest.fail(f"no lease expired after three kills: {cluster.tail()}")
        assert cluster.ventilator.poll() is None and cluster.progress() < tasks
        cluster.kill(cluster.ventilator)  # work still pending
        time.sleep(0.5)
        cluster.start_ventilator()  # the same command: resumes from the manifest
        cluster.start_worker()
        cluster.start_worker()
        assert cluster.wait() == 0, cluster.tail()
    finally:
        cluster.close()

    assert _entries(cluster.output) == _entries(clean)  # each task once, the same shards and counts
    ours, theirs = _files(cluster.output), _files(clean)
    assert ours == theirs, {name for name in ours.keys() | theirs.keys() if ours.get(name) != theirs.get(name)}
