"""The same command run again over an output whose manifest lists the job's tasks: the sink it starts reads
that manifest while the job is planned (at a million tasks both take seconds), not after."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.helpers import REPO, VOCAB, WIKI, free_ports, need_shared

TASK_SIZE = 256 * 1024

#: The ventilator's command (its own process: it sets signal handlers and logging), its plan held until the sink
#: has cut the manifest (argv[1]) back to its whole lines (argv[2] bytes), at most 60 s; the rest of argv is the
#: command's.
HELD_PLAN = """
import os, sys, time
from ventilator import cli
manifest, whole = sys.argv[1], int(sys.argv[2])
plan = cli.plan
def held(*args):
    deadline = time.monotonic() + 60
    while os.path.getsize(manifest) != whole and time.monotonic() < deadline:
        time.sleep(0.05)
    print("planned after the sink's load:", os.path.getsize(manifest) == whole, file=sys.stderr, flush=True)
    return plan(*args)
cli.plan = held
sys.argv = ["ventilator", *sys.argv[3:]]
cli.main()
"""


def test_the_sink_reads_its_manifest_while_the_job_is_planned(tmp_path):
    """The manifest ends in a torn line, which the sink's load cuts off: the plan (held until then, at most a
    minute) sees it cut, so the sink was started and welcomed, and had read its manifest, before the job was
    planned.  The run then finds every task done and exits 0."""
    from tests.support.run_configs import run_config
    from ventilator.job import prepare_job

    need_shared()
    output = tmp_path / "out"
    options = dict(task_size=TASK_SIZE, lease_seconds=5.0, heartbeat_seconds=1.0)
    planned = prepare_job(run_config(data=str(WIKI), output=str(output), vocab_file=str(VOCAB), **options))
    output.mkdir()
    lines = b"".join(json.dumps({
        "task": task.task_id, "job": planned.config.job_id, "source": task.path, "start": task.start,
        "end": task.end, "version": task.version, "shards": [], "records": 0, "documents": 0, "skipped": {},
        "tokens": 0, "bytes": 0, "worker": "earlier"}, sort_keys=True).encode() + b"\n" for task in planned.tasks)
    manifest = output / "manifest.jsonl"
    manifest.write_bytes(lines + b'{"task": "torn')

    vport, sink_port = free_ports(2)
    run = subprocess.run([
        sys.executable, "-c", HELD_PLAN, str(manifest), str(len(lines)),
        "--data", str(WIKI), "--output", str(output), "--vocab-file", str(VOCAB), "--task-size", str(TASK_SIZE),
        "--lease-seconds", "5", "--heartbeat-seconds", "1", "--vport", str(vport), "--sink-port", str(sink_port),
        "--bind-host", "127.0.0.1", "--no-progress", "--state-dir", str(tmp_path / "state")],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    assert "planned after the sink's load: True" in run.stderr, run.stderr[-3000:]
    assert run.returncode == 0, run.stderr[-3000:]
    assert manifest.read_bytes() == lines
    assert json.loads((output / "summary.json").read_text())["complete"] is True
