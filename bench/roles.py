"""The roles as users run them: real command lines over loopback TCP.

* :func:`ventilator_alone`: ``python -m ventilator --sink ...`` (no local
  workers), ``python -m sink``, and null workers (bench/null_worker.py).
* :func:`sink_flood`: a ventilator planning N tiny tasks, a sink, and a
  flood of N valid acks (bench/flood.py).
* :func:`pipeline`: ``python -m ventilator --workers N``, the one-machine command.

Each returns what it measured, including the peak RSS (VmHWM) of every role.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.procs import Watcher, free_ports, start_module, stop, wait_all

#: Short heartbeats: a ventilator without local workers waits 2 heartbeats
#: after the end for late peers, which is dead time in a benchmark.
HEARTBEAT = "0.25"


@dataclass
class RoleRun:
    wall: float = 0.0  # seconds of the measured window
    cpu: float = 0.0  # CPU seconds of the measured role in that window
    bytes: int = 0
    tasks: int = 0
    peak_rss: dict[str, int] = field(default_factory=dict)
    extra: dict = field(default_factory=dict)


def _job_args(data: Path, output: Path, vport: int, vocab: str, state: Path, *extra) -> list:
    return ["--data", data, "--output", output, "--vport", vport, "--bind-host", "127.0.0.1",
            "--vocab-file", vocab, "--heartbeat-seconds", HEARTBEAT, "--report-seconds", "3600",
            "--state-dir", state, *extra]


def ventilator_alone(data: Path, work: Path, vocab: str, *, shared_fs: bool, task_size: str,
                     null_workers: int = 3, credit: int = 2, timeout: float = 300) -> RoleRun:
    """The ventilator handing out every task of ``data`` to null workers.

    The window runs from the first assignment any null worker received to
    the last; the ventilator's CPU in that window is interpolated from
    20 ms samples.  (The run then goes on until the sink has confirmed
    every task, which is the sink's speed, measured by :func:`sink_flood`.)
    """
    work.mkdir(parents=True, exist_ok=True)
    log = work / "log.txt"
    vport, sink_port = free_ports(2)
    reports = [work / f"null-{i}.json" for i in range(null_workers)]
    processes = []
    with Watcher(interval=0.02) as watcher:
        try:
            sink = start_module("sink", "--ventilator", f"127.0.0.1:{vport}", "--port", sink_port, "--bind-host",
                                "127.0.0.1", "--state-dir", work / "state", log=log)
            processes.append(sink)
            ventilator = start_module("ventilator", *_job_args(
                data, work / "out", vport, vocab, work / "state", "--sink", f"127.0.0.1:{sink_port}",
                "--task-size", task_size, "--dupe-factor", "1", *(["--shared-fs"] if shared_fs else [])), log=log)
            processes.append(ventilator)
            watcher.add(ventilator.pid, "ventilator")
            watcher.add(sink.pid, "sink")
            for report in reports:
                null = start_module("bench.null_worker", "--ventilator", f"127.0.0.1:{vport}", "--credit", credit,
                                    "--report", report, "--timeout", timeout, log=log)
                processes.append(null)
            wait_all(processes, timeout, "ventilator alone", log)
        finally:
            stop(processes)
    stats = [json.loads(r.read_text()) for r in reports]
    first = min(s["first"] for s in stats if s["first"])
    end = max(s["last"] for s in stats)
    run = RoleRun(wall=end - first, bytes=sum(s["bytes"] for s in stats), tasks=sum(s["tasks"] for s in stats))
    run.extra["to_shutdown"] = min(s["shutdown"] for s in stats if s["shutdown"]) - first
    run.cpu = watcher.cpu_at(ventilator.pid, end) - watcher.cpu_at(ventilator.pid, first)
    run.peak_rss = {"ventilator": watcher.peak_rss("ventilator"), "sink": watcher.peak_rss("sink")}
    run.extra["manifest_lines"] = _lines(work / "out" / "manifest.jsonl")
    return run


def sink_flood(data: Path, work: Path, vocab: str, acks: int, window: int = 800, timeout: float = 300) -> RoleRun:
    """The sink recording ``acks`` acknowledgements pushed as fast as ZMQ takes them.

    The window runs from the first ack sent to the manifest's last write
    (its mtime, after the sink has exited)."""
    work.mkdir(parents=True, exist_ok=True)
    log = work / "log.txt"
    size = sum(p.stat().st_size for p in Path(data).rglob("*") if p.is_file())
    task_size = str(max(1, -(-size // acks)))
    vport, sink_port = free_ports(2)
    manifest = work / "out" / "manifest.jsonl"
    processes = []
    with Watcher(interval=0.05) as watcher:
        try:
            ventilator = start_module("ventilator", *_job_args(
                data, work / "out", vport, vocab, work / "state", "--sink", f"127.0.0.1:{sink_port}",
                "--task-size", task_size, "--dupe-factor", "1"), log=log)
            processes.append(ventilator)
            sink = start_module("sink", "--ventilator", f"127.0.0.1:{vport}", "--port", sink_port, "--bind-host",
                                "127.0.0.1", "--state-dir", work / "state", log=log)
            processes.append(sink)
            watcher.add(ventilator.pid, "ventilator")
            watcher.add(sink.pid, "sink")
            deadline = time.monotonic() + timeout
            while not manifest.exists():  # the sink has the job and its manifest open
                if time.monotonic() > deadline or sink.poll() is not None or ventilator.poll() is not None:
                    raise RuntimeError("sink flood: the sink never opened its manifest\n" + log.read_text()[-3000:])
                time.sleep(0.05)
            flood_out = work / "flood.json"
            processes.append(start_module("bench.flood", "--ventilator", f"127.0.0.1:{vport}", "--data", data,
                                          "--task-size", task_size, "--manifest", manifest, "--window", window,
                                          log=log, stdout=flood_out))
            sink_cpu_before = None
            while sink_cpu_before is None:
                samples = watcher.watched[sink.pid].cpu
                sink_cpu_before = samples[-1][1] if samples else None
                time.sleep(0.01)
            wait_all(processes, timeout, "sink flood", log)
        finally:
            stop(processes)
    sent = json.loads(flood_out.read_text().strip().splitlines()[-1])
    done = manifest.stat().st_mtime
    run = RoleRun(wall=done - sent["started"], tasks=_lines(manifest))
    run.cpu = watcher.cpu_total(sink.pid) - sink_cpu_before
    run.peak_rss = {"ventilator": watcher.peak_rss("ventilator"), "sink": watcher.peak_rss("sink")}
    run.extra.update(sent=sent["acks"], queued_seconds=sent["queued"] - sent["started"])
    return run


def pipeline(data: Path, work: Path, vocab: str, workers: int, *, task_size: str, dupe_factor: int,
             timeout: float = 900, extra: tuple = ()) -> RoleRun:
    """``python -m ventilator --workers N``: command wall time, steady-state
    throughput from the manifest (polled every 50 ms), and peak RSS per role."""
    work.mkdir(parents=True, exist_ok=True)
    log = work / "log.txt"
    vport, sink_port = free_ports(2)
    manifest = work / "out" / "manifest.jsonl"
    arrivals: list[tuple[float, int]] = []
    seen = 0
    started = time.monotonic()
    with Watcher(interval=0.1) as watcher:
        ventilator = start_module("ventilator", *_job_args(
            data, work / "out", vport, vocab, work / "state", "--sink-port", sink_port, "--workers", workers,
            "--task-size", task_size, "--dupe-factor", dupe_factor, *extra), log=log)
        try:
            watcher.add(ventilator.pid, "ventilator", tree=True)
            deadline = started + timeout
            while ventilator.poll() is None:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"pipeline: still running after {timeout:.0f}s\n{log.read_text()[-3000:]}")
                seen = _poll_manifest(manifest, seen, arrivals)
                time.sleep(0.05)
            wall = time.monotonic() - started
            _poll_manifest(manifest, seen, arrivals)
            if ventilator.returncode != 0:
                raise RuntimeError(f"pipeline: exit status {ventilator.returncode}\n{log.read_text()[-3000:]}")
        finally:
            stop([ventilator])
    run = RoleRun(wall=wall, bytes=sum(b for _, b in arrivals), tasks=len(arrivals))
    steady = steady_rate(arrivals, workers)
    # A run too short for a slope (the quick mode's tiny input) falls back to
    # the whole-run rate, start-up included, and says so.
    run.extra["steady_measured"] = steady is not None
    run.extra["steady_mb_s"] = (steady if steady is not None else run.bytes / wall) / 1e6
    run.peak_rss = {role: watcher.peak_rss(role) for role in ("ventilator", "sink", "worker")}
    run.extra["cpu"] = {role: sum(watcher.cpu_total(w.process.pid) for w in watcher.processes(role))
                        for role in ("ventilator", "sink", "worker", "worker supervisor")}
    run.extra["summary"] = json.loads((work / "out" / "summary.json").read_text())
    return run


def steady_rate(arrivals: list[tuple[float, int]], workers: int) -> float | None:
    """Bytes per second once every worker is busy: the least-squares slope of
    bytes done against time, leaving out the first ``workers`` tasks (each
    worker's first task includes its start-up). None when the run was too
    short to tell: fewer than three completions seen at distinct times."""
    points = []
    done = 0
    for index, (moment, size) in enumerate(sorted(arrivals)):
        done += size
        if index >= workers - 1:
            points.append((moment, done))
    if len({t for t, _ in points}) < 3:
        return None
    mean_t = sum(t for t, _ in points) / len(points)
    mean_b = sum(b for _, b in points) / len(points)
    spread = sum((t - mean_t) ** 2 for t, _ in points)
    return sum((t - mean_t) * (b - mean_b) for t, b in points) / spread


def _lines(path: Path) -> int:
    with open(path, "rb") as handle:
        return sum(1 for _ in handle)


def _poll_manifest(manifest: Path, seen: int, arrivals: list[tuple[float, int]]) -> int:
    """Record (time, input bytes) of manifest lines written since the last poll."""
    try:
        size = os.path.getsize(manifest)
    except OSError:
        return seen
    if size <= seen:
        return seen
    now = time.monotonic()
    with open(manifest, "rb") as handle:
        handle.seek(seen)
        chunk = handle.read(size - seen)
    complete = chunk[:chunk.rfind(b"\n") + 1]
    for line in complete.splitlines():
        entry = json.loads(line)
        arrivals.append((now, entry["end"] - entry["start"]))
    return seen + len(complete)
