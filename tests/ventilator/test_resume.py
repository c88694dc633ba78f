"""The same command run again over an output whose manifest lists the job's tasks: the sink it starts reads
that manifest while the job is planned (at a million tasks both take seconds), not after."""

from __future__ import annotations

import json
import time

from click.testing import CliRunner

from tests.support.helpers import VOCAB, WIKI, free_ports, need_shared

TASK_SIZE = 256 * 1024


def test_the_sink_reads_its_manifest_while_the_job_is_planned(tmp_path, monkeypatch):
    """The manifest ends in a torn line, which the sink's load cuts off: the plan (held until then) sees it cut,
    so the sink was started and welcomed, and had read its manifest, before the job was planned.  The run then
    finds every task done and exits 0."""
    from tests.support.run_configs import run_config
    from ventilator import cli
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

    seen: list[bool] = []
    plan = cli.plan

    def plan_once_the_sink_has_loaded(*args):
        deadline = time.monotonic() + 60
        while manifest.stat().st_size != len(lines) and time.monotonic() < deadline:
            time.sleep(0.05)
        seen.append(manifest.stat().st_size == len(lines))
        return plan(*args)

    monkeypatch.setattr(cli, "plan", plan_once_the_sink_has_loaded)
    vport, sink_port = free_ports(2)
    result = CliRunner().invoke(cli.main, [
        "--data", str(WIKI), "--output", str(output), "--vocab-file", str(VOCAB), "--task-size", str(TASK_SIZE),
        "--lease-seconds", "5", "--heartbeat-seconds", "1", "--vport", str(vport), "--sink-port", str(sink_port),
        "--bind-host", "127.0.0.1", "--no-progress", "--state-dir", str(tmp_path / "state")])
    assert seen == [True], "the job was planned before the sink read its manifest"
    assert result.exit_code == 0, result.output
    assert manifest.read_bytes() == lines
    assert json.loads((output / "summary.json").read_text())["complete"] is True
