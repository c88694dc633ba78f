"""The Slurm launcher (ventilator/launchers/slurm.py) on a real single-host Slurm (scripts/slurm-cluster.sh,
Debian's slurmctld, slurmd and munge; two nodes of one cpu): ``python -m ventilator --launcher slurm`` in a
batch job starts the workers with srun on both nodes and gives a local run's bytes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest

from tests.slurm.conftest import NODES
from tests.support.factories import finished_run
from tests.support.helpers import REPO, VOCAB, WIKI, free_ports, manifest, run_ventilator, shard_digests

pytestmark = pytest.mark.slurm

JOB = ["--vocab-file", VOCAB, "--task-size", "256K"]


def _state(env, job_id: str) -> dict[str, str]:
    text = subprocess.run(["scontrol", "show", "job", "--oneliner", job_id], env=env, capture_output=True, text=True,
                          timeout=60).stdout
    return dict(field.split("=", 1) for field in text.split() if "=" in field)


def test_workers_started_with_srun_on_every_node_give_a_local_runs_bytes(slurm, tmp_path):
    local = finished_run(WIKI / "AA", tmp_path / "local", *JOB, "--workers", "2").output

    vport, sink_port = free_ports(2)
    output, log = tmp_path / "slurm-out", tmp_path / "job.log"
    command = [sys.executable, "-m", "ventilator", "--launcher", "slurm", "--workers", "1", "--data", WIKI / "AA",
               "--output", output, "--vport", vport, "--sink-port", sink_port, "--bind-host", "127.0.0.1",
               "--state-dir", tmp_path / "state", *JOB]
    submitted = subprocess.run(["sbatch", "--parsable", f"--nodes={NODES}", f"--output={log}", f"--chdir={REPO}",
                                "--wrap", " ".join(f"'{arg}'" for arg in map(str, command))],
                               env=slurm, capture_output=True, text=True, timeout=60)
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 180
    while (shown := _state(slurm, job_id)).get("JobState") not in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"):
        assert time.monotonic() < deadline, f"job {job_id} still {shown.get('JobState')}"
        time.sleep(0.5)
    text = log.read_text(errors="replace") if log.is_file() else ""
    assert shown["JobState"] == "COMPLETED" and shown["ExitCode"] == "0:0", text[-3000:]
    assert "starting workers: srun --job-name=mlm-workers --nodes=2" in text
    assert f"--ventilator 127.0.0.1:{vport}" in text  # the first node's NodeAddr
    # one worker process on each node, each started by srun (its first line): which of them got tasks is the
    # machine's timing (under load one may finish the job before the other asks), so that is not asserted
    started = set(re.findall(r"(\S+): started, asking \S+ for work", text))
    assert len(started) == NODES, text[-3000:]
    assert {entry["worker"] for entry in manifest(output).values()} <= started
    assert set(manifest(output)) == set(manifest(local))
    assert shard_digests(output) == shard_digests(local)


def test_outside_an_allocation_it_is_refused_in_one_line(tmp_path):
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLURM_")}
    result = run_ventilator(WIKI / "AA", tmp_path / "out", *JOB, "--launcher", "slurm", env=env)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "ventilator: error: --launcher slurm: not in a Slurm allocation (run it in an sbatch script or under salloc)"]
    assert not (tmp_path / "out").exists()
