"""The scale simulation: one real ventilator and sink, thousands of simulated
workers, up to a million tasks (``python -m bench.run --only scale``).

The corpus is a synthetic listing: sparse files (``truncate``), so a million
8 MiB tasks (8 TB) take no disk, and the job runs in ranges mode
(``--shared-fs``): the ventilator plans from sizes and never reads them.
The workers are bench/sim_fleet.py processes: real connections and the real
protocol, each holding a task for a set time or acknowledging it at once.

Each scenario returns one point of a curve (a dict of figures):

* ``throughput(N, M)``: N workers acknowledge at once: grants per second
  sustained, ventilator and sink CPU per task, their peak RSS;
* ``plan(M)``: time from the command to a listening ventilator, its RSS;
* ``resume(M)``: an M-line manifest of the same job: time for the same
  command to see every task done and exit;
* ``heartbeats(N)``: N workers holding tasks, heartbeating: the
  ventilator's share of a core;
* ``loss(N, M, V)``: V of N workers vanish at once, holding tasks: the time
  until every one of their tasks is back in the queue (their leases ran out:
  ``mlm_ventilator_requeued_total{reason="lease_expired"}``) and until each
  is handed out again, and the manifest lists each task exactly once at the
  end.
"""

from __future__ import annotations

import json
import math
import re
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from bench.procs import Watcher, free_ports, start_module, stop

GIB = 1 << 30
TASK_SIZE = 8 << 20


def sparse_corpus(root: Path, tasks: int, task_size: int = TASK_SIZE, file_size: int = 64 * GIB) -> Path:
    """Text files adding up to ``tasks`` tasks, sparse: no block is written but the first."""
    root.mkdir(parents=True, exist_ok=True)
    total = tasks * task_size
    count = max(1, math.ceil(total / file_size))
    per_file = total // count // task_size * task_size
    for index in range(count):
        size = per_file if index < count - 1 else total - per_file * (count - 1)
        path = root / f"part-{index:05d}.txt"
        with open(path, "wb") as handle:
            handle.write(b"a synthetic corpus\n\n")
            handle.truncate(size)
    return root


@dataclass
class Job:
    """The one-machine command with no worker: the ventilator and the sink it starts."""

    data: Path
    output: Path
    vocab: str
    lease: float = 60.0
    heartbeat: float = 5.0
    log: Path = field(kw_only=True)  # the ventilator's log: listening and progress are read from it

    def __post_init__(self) -> None:
        self.vport, self.sink_port, self.metrics_port = free_ports(3)

    def args(self) -> list[object]:  # start_module writes each as a string
        return ["--data", self.data, "--output", self.output, "--vocab-file", self.vocab, "--format", "text",
                "--shared-fs", "--task-size", str(TASK_SIZE), "--lease-seconds", self.lease,
                "--heartbeat-seconds", self.heartbeat, "--vport", self.vport, "--sink-port", self.sink_port,
                "--bind-host", "127.0.0.1", "--metrics-port", self.metrics_port, "--report-seconds", "5",
                "--no-progress", "--state-dir", self.output.parent / "state"]

    def start(self) -> subprocess.Popen:
        return start_module("ventilator", *self.args(), log=self.log)

    def wait_listening(self, process: subprocess.Popen, timeout: float = 600) -> float:
        """Seconds until the ventilator says it listens (it has planned and built its dispatcher)."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            if self.log.exists() and "listening on port" in self.log.read_text(errors="replace"):
                return time.monotonic() - started
            if process.poll() is not None:
                raise RuntimeError(f"ventilator exited {process.returncode}: {self.log.read_text()[-2000:]}")
            time.sleep(0.05)
        raise RuntimeError(f"ventilator not listening after {timeout:.0f}s")

    def metric(self, name: str) -> float:
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10).read().decode()
        match = re.search(rf"^{re.escape(name)} ([0-9.e+-]+)$", text, re.M)
        return float(match.group(1)) if match else 0.0


def start_fleet(job: Job, workers: int, processes: int, work: Path, name: str = "fleet",
                **options) -> list[tuple[subprocess.Popen, Path]]:
    """``workers`` simulated workers over ``processes`` processes: (process, its report file)."""
    fleets = []
    for index in range(processes):
        share = workers // processes + (index < workers % processes)
        report = work / f"{name}-{index}.json"
        args = ["--ventilator", f"127.0.0.1:{job.vport}", "--workers", share, "--report", report]
        for key, value in options.items():
            if value is not None:
                args += [f"--{key.replace('_', '-')}", value]
        fleets.append((start_module("bench.sim_fleet", *args, log=work / f"{name}-{index}.log"), report))
    return fleets


def _reports(fleets) -> list[dict]:
    return [json.loads(report.read_text()) for _process, report in fleets if report.exists()]


def _manifest_tasks(output: Path) -> list[str]:
    path = output / "manifest.jsonl"
    if not path.exists():
        return []
    return [json.loads(line)["task"] for line in path.read_text().splitlines() if line]


def _role_cpu(watcher: Watcher, role: str) -> float:
    return sum(w.cpu[-1][1] for w in watcher.processes(role) if w.cpu)


def throughput(work: Path, vocab: str, workers: int, tasks: int, processes: int = 2) -> dict:
    work.mkdir(parents=True)
    job = Job(sparse_corpus(work / "corpus", tasks), work / "out", vocab, log=work / "ventilator.log")
    with Watcher(interval=0.2) as watcher:
        ventilator = job.start()
        watcher.add(ventilator.pid, "ventilator", tree=True)
        job.wait_listening(ventilator)
        time.sleep(1.0)  # the sink has said hello; its CPU from here on is the job's
        cpu0 = {role: _role_cpu(watcher, role) for role in ("ventilator", "sink")}
        fleets = start_fleet(job, workers, processes, work, hold=0, duration=900)
        code = ventilator.wait(timeout=900)
        stop([p for p, _ in fleets], timeout=30)
        time.sleep(0.3)
        cpu = {role: _role_cpu(watcher, role) - cpu0[role] for role in ("ventilator", "sink")}
        rss = {role: watcher.peak_rss(role) for role in ("ventilator", "sink")}
    if code != 0:
        raise RuntimeError(f"throughput run exited {code}: {job.log.read_text()[-2000:]}")
    reports = _reports(fleets)
    first = min(r["first_grant"] for r in reports if r["first_grant"])
    last = max(r["last_grant"] for r in reports)
    granted = sum(r["grants"] for r in reports)
    done = _manifest_tasks(job.output)
    assert len(done) == len(set(done)) == tasks, (len(done), len(set(done)), tasks)
    return {"workers": workers, "tasks": tasks, "grants_s": granted / max(last - first, 1e-9),
            "ventilator_cpu_ms_task": cpu["ventilator"] / tasks * 1000, "sink_cpu_ms_task": cpu["sink"] / tasks * 1000,
            "ventilator_rss_mb": rss["ventilator"] / 1e6, "sink_rss_mb": rss["sink"] / 1e6}


def plan(work: Path, vocab: str, tasks: int) -> dict:
    work.mkdir(parents=True)
    job = Job(sparse_corpus(work / "corpus", tasks), work / "out", vocab, log=work / "ventilator.log")
    with Watcher(interval=0.2) as watcher:
        ventilator = job.start()
        watcher.add(ventilator.pid, "ventilator")
        seconds = job.wait_listening(ventilator)
        time.sleep(0.5)
        rss = watcher.peak_rss("ventilator")
        ventilator.send_signal(signal.SIGINT)
        stop([ventilator], timeout=30)
    return {"tasks": tasks, "plan_s": seconds, "ventilator_rss_mb": rss / 1e6}


def resume(work: Path, vocab: str, tasks: int) -> dict:
    """The same command again over an output whose manifest lists every task."""
    from tests.support.run_configs import run_config
    from ventilator.job import prepare_job

    work.mkdir(parents=True)
    job = Job(sparse_corpus(work / "corpus", tasks), work / "out", vocab, log=work / "ventilator.log")
    planned = prepare_job(run_config(data=str(job.data), output=str(job.output), vocab_file=vocab,
                                     corpus_format="text", shared_fs=True, task_size=TASK_SIZE,
                                     lease_seconds=job.lease, heartbeat_seconds=job.heartbeat))
    job_id = planned.config.job_id
    job.output.mkdir(parents=True, exist_ok=True)
    with open(job.output / "manifest.jsonl", "wb") as handle:
        for task in planned.tasks:
            handle.write(json.dumps({
                "task": task.task_id, "job": job_id, "source": task.path, "start": task.start, "end": task.end,
                "version": task.version, "shards": [], "records": 0, "documents": 0, "skipped": {}, "tokens": 0,
                "bytes": 0, "worker": "sim"}, sort_keys=True).encode() + b"\n")
    del planned
    started = time.monotonic()
    with Watcher(interval=0.2) as watcher:
        ventilator = job.start()
        watcher.add(ventilator.pid, "ventilator", tree=True)
        code = ventilator.wait(timeout=900)
        rss = {role: watcher.peak_rss(role) for role in ("ventilator", "sink")}
        cpu = {role: _role_cpu(watcher, role) for role in ("ventilator", "sink")}  # steadier than wall time
    seconds = time.monotonic() - started
    if code != 0 or "all tasks done" not in job.log.read_text(errors="replace"):
        raise RuntimeError(f"resume exited {code}: {job.log.read_text()[-2000:]}")
    return {"tasks": tasks, "resume_s": seconds, "ventilator_rss_mb": rss["ventilator"] / 1e6,
            "sink_rss_mb": rss["sink"] / 1e6, "ventilator_cpu_s": cpu["ventilator"], "sink_cpu_s": cpu["sink"]}


def heartbeats(work: Path, vocab: str, workers: int, window: float = 15.0, heartbeat: float = 5.0,
               processes: int = 2) -> dict:
    """Every worker holds one task the whole time and heartbeats: the ventilator's CPU over a window."""
    work.mkdir(parents=True)
    job = Job(sparse_corpus(work / "corpus", workers * 2), work / "out", vocab, heartbeat=heartbeat,
              lease=max(60.0, 6 * heartbeat), log=work / "ventilator.log")
    with Watcher(interval=0.2) as watcher:
        ventilator = job.start()
        watcher.add(ventilator.pid, "ventilator")
        job.wait_listening(ventilator)
        fleets = start_fleet(job, workers, processes, work, hold=3600, duration=window * 4 + 120)
        deadline = time.monotonic() + 300
        leased = 'mlm_ventilator_tasks{state="leased"}'
        while job.metric(leased) < workers:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {job.metric(leased):.0f} of {workers} workers hold a task after 300 s")
            time.sleep(0.5)
        time.sleep(heartbeat)  # every worker has heartbeaten at least once
        pid = ventilator.pid
        t0 = time.monotonic()
        cpu0 = watcher.cpu_at(pid, t0)
        time.sleep(window)
        t1 = time.monotonic()
        time.sleep(0.3)
        cpu1 = watcher.cpu_at(pid, t1)
        for process, _ in fleets:  # simulators hold their tasks for an hour: end them, nothing to drain
            process.terminate()
        ventilator.send_signal(signal.SIGINT)
        stop([ventilator, *(p for p, _ in fleets)], timeout=30)
    return {"workers": workers, "heartbeat_s": heartbeat, "heartbeats_s": workers / heartbeat,
            "ventilator_core": (cpu1 - cpu0) / (t1 - t0)}


def loss(work: Path, vocab: str, workers: int, tasks: int, vanish: int, lease: float = 10.0,
         heartbeat: float = 2.0, hold: float = 2.0, processes: int = 2) -> dict:
    work.mkdir(parents=True)
    job = Job(sparse_corpus(work / "corpus", tasks), work / "out", vocab, lease=lease, heartbeat=heartbeat,
              log=work / "ventilator.log")
    ventilator = job.start()
    try:
        job.wait_listening(ventilator)
        # One process's workers vanish together, holding tasks; the others' go on.
        # They vanish once every worker has had a few tasks and heartbeats; the job must still run a lease or
        # two after that (the plan's task counts are sized so).
        fleets = start_fleet(job, vanish, 1, work, name="vanishing", hold=hold, duration=900,
                             vanish_after=3 * hold + 2 * heartbeat, vanish=vanish)
        rest = start_fleet(job, workers - vanish, processes, work, name="rest", hold=hold, duration=900)
        vanisher, vanish_report = fleets[0]
        vanisher.wait(timeout=600)
        gone = json.loads(vanish_report.read_text())
        held = len(gone["vanished_held"])
        if not held:
            raise RuntimeError("the job ended before the workers vanished: give the loss scenario more tasks")
        expired = 'mlm_ventilator_requeued_total{reason="lease_expired"}'
        expired0, redeliveries0 = job.metric(expired), job.metric("mlm_ventilator_redeliveries_total")
        requeued_after = None  # back in the queue (their leases ran out), then handed out again
        while job.metric("mlm_ventilator_redeliveries_total") - redeliveries0 < held:
            if requeued_after is None and job.metric(expired) - expired0 >= held:
                requeued_after = time.time() - gone["vanished_at"]
            if time.time() - gone["vanished_at"] > 10 * lease:
                raise RuntimeError("the vanished workers' tasks were not handed out again within 10 leases")
            time.sleep(0.1)
        handed_out_after = time.time() - gone["vanished_at"]
        requeued_after = handed_out_after if requeued_after is None else requeued_after
        code = ventilator.wait(timeout=900)
        stop([p for p, _ in rest], timeout=30)
    finally:
        stop([ventilator], timeout=0)
    if code != 0:
        raise RuntimeError(f"loss run exited {code}: {job.log.read_text()[-2000:]}")
    done = _manifest_tasks(job.output)
    assert len(done) == len(set(done)) == tasks, (len(done), len(set(done)), tasks)
    assert set(gone["vanished_held"]) <= set(done)
    return {"workers": workers, "tasks": tasks, "vanished": gone["vanished"], "held": held, "lease_s": lease,
            "requeued_after_s": requeued_after, "handed_out_after_s": handed_out_after}


@dataclass(frozen=True)
class Plan:
    """The points measured: the full curves, or a few small ones (--quick, CI)."""

    throughput: tuple[tuple[int, int], ...]  # (workers, tasks)
    plan: tuple[int, ...]  # tasks
    resume: tuple[int, ...]  # tasks
    heartbeats: tuple[int, ...]  # workers
    heartbeat_s: float
    window_s: float
    loss: tuple[int, int, int]  # workers, tasks, vanishing
    loss_lease_s: float
    loss_heartbeat_s: float
    loss_hold_s: float

    @classmethod
    def make(cls, quick: bool) -> Plan:
        if quick:
            return cls(throughput=((50, 1000),), plan=(10_000,), resume=(10_000,), heartbeats=(100,),
                       heartbeat_s=1.0, window_s=2.0, loss=(60, 1500, 6), loss_lease_s=2.0, loss_heartbeat_s=0.5,
                       loss_hold_s=0.3)
        return cls(throughput=((50, 20_000), (500, 20_000), (5000, 20_000), (500, 100_000)),
                   plan=(10_000, 100_000, 1_000_000), resume=(100_000, 1_000_000), heartbeats=(500, 5000),
                   heartbeat_s=5.0, window_s=15.0, loss=(5000, 80_000, 500), loss_lease_s=20.0,
                   loss_heartbeat_s=5.0, loss_hold_s=4.0)


def run_all(plan_: Plan, work: Path, vocab: str, log=print) -> dict[str, list[dict]]:
    """Every scenario of the plan: {scenario: its points}."""
    points: dict[str, list[dict]] = {"throughput": [], "plan": [], "resume": [], "heartbeats": [], "loss": []}
    for index, (workers, tasks) in enumerate(plan_.throughput):
        log(f"scale: throughput, {workers} workers, {tasks} tasks")
        points["throughput"].append(throughput(work / f"t{index}", vocab, workers, tasks))
    for index, tasks in enumerate(plan_.plan):
        log(f"scale: plan, {tasks} tasks")
        points["plan"].append(plan(work / f"p{index}", vocab, tasks))
    for index, tasks in enumerate(plan_.resume):
        log(f"scale: resume, {tasks}-line manifest")
        points["resume"].append(resume(work / f"r{index}", vocab, tasks))
    for index, workers in enumerate(plan_.heartbeats):
        log(f"scale: heartbeats, {workers} workers every {plan_.heartbeat_s:g} s")
        points["heartbeats"].append(heartbeats(work / f"h{index}", vocab, workers, plan_.window_s, plan_.heartbeat_s))
    workers, tasks, vanishing = plan_.loss
    log(f"scale: {vanishing} of {workers} workers vanish, {tasks} tasks")
    points["loss"].append(loss(work / "l", vocab, workers, tasks, vanishing, plan_.loss_lease_s,
                               plan_.loss_heartbeat_s, plan_.loss_hold_s))
    return points


def _figure(value) -> str:
    if not isinstance(value, float):
        return f"{value:,}"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}" if abs(value) >= 1 else f"{value:.3f}"


def curves(points: dict[str, list[dict]]) -> str:
    """The points as markdown tables, one per scenario."""
    out = []
    for scenario, rows in points.items():
        if not rows:
            continue
        keys = list(rows[0])
        out += [f"Scale: {scenario}", "", "| " + " | ".join(keys) + " |", "|" + " --- |" * len(keys)]
        for row in rows:
            out.append("| " + " | ".join(_figure(v) for v in row.values()) + " |")
        out.append("")
    return "\n".join(out)
