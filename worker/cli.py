"""``python -m worker --ventilator HOST:PORT [--processes N]``."""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import sys
import time

import click

from common import logs
from common.security import Curve
from worker.interruption import DEFAULT_ENDPOINT, DEFAULT_NOTICE_DRAIN_SECONDS, Imds, InterruptionWatcher
from worker.lifecycle import LifecycleHook, complete_after_drain
from worker.runtime import WorkerOptions, WorkerProcess

log = logging.getLogger("worker")

#: A worker process that dies (OOM, kill -9) is started again, but not in a
#: tight loop.
RESTART_DELAY_SECONDS = 1.0


def _run_one(options: WorkerOptions, verbose: int, release_at=None) -> None:
    logs.configure(verbose)
    worker = WorkerProcess(options)
    if release_at is not None:  # the supervisor's interruption notice: SIGUSR1, deadline in shared memory
        signal.signal(signal.SIGUSR1, lambda _signum, _frame: worker.interrupt(release_at.value))
    sys.exit(worker.run())


def supervise(options: WorkerOptions, processes: int, verbose: int, watch: Imds | None = None,
              notice_drain_seconds: float = DEFAULT_NOTICE_DRAIN_SECONDS, watch_seconds: float = 5.0,
              noticed: list | None = None) -> int:
    """Run ``processes`` worker processes; restart any that dies abnormally,
    forward SIGTERM/SIGINT so they drain; exit when all have exited cleanly.
    With ``watch``, an interruption notice from IMDS drains them too, with its deadline."""
    context = multiprocessing.get_context("spawn")
    draining = False
    release_at = context.Value("d", 0.0)

    def start() -> multiprocessing.Process:
        process = context.Process(target=_run_one, args=(options, verbose, release_at), daemon=False)
        process.start()
        return process

    def on_notice(notice) -> None:
        nonlocal draining
        if noticed is not None:
            noticed.append(notice)
        release_at.value = notice.release_at
        draining = True
        for process in children:
            if process.is_alive():
                os.kill(process.pid, signal.SIGUSR1)

    def on_signal(signum, _frame):
        nonlocal draining
        draining = True
        for process in children:
            if process.is_alive():
                os.kill(process.pid, signal.SIGTERM)

    children = [start() for _ in range(processes)]
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if watch is not None:
        InterruptionWatcher(watch, on_notice, interval=watch_seconds, drain_seconds=notice_drain_seconds).start()
    job_over = False  # a process exited 0: the job finished, restart nobody
    while children:
        time.sleep(0.2)
        for process in list(children):
            if process.is_alive():
                continue
            process.join()
            children.remove(process)
            job_over = job_over or process.exitcode == 0
            if process.exitcode != 0 and not (draining or job_over):
                log.warning("worker process %d exited with %s; starting another in %.0fs",
                            process.pid, process.exitcode, RESTART_DELAY_SECONDS)
                time.sleep(RESTART_DELAY_SECONDS)
                children.append(start())
    return 0


@click.command(context_settings={"auto_envvar_prefix": "MLM", "show_default": True,
                                 "help_option_names": ["-h", "--help"]})
@click.option("--ventilator", required=True, metavar="HOST:PORT", show_envvar=True,
              help="Where the ventilator listens (its --vport). Everything else, including the tokenizer, comes from it.")
@click.option("--processes", type=click.IntRange(min=1), default=os.cpu_count() or 1, show_envvar=True,
              show_default="this host's cores", help="Worker processes on this host (one core each).")
@click.option("--sink", default="", metavar="HOST:PORT", show_envvar=True,
              help="Override the sink address the ventilator hands out.")
@click.option("--credit", type=click.IntRange(min=1), default=1, show_envvar=True,
              help="Tasks a process holds at once (in progress + queued); 1 balances load best.")
@click.option("--drain-seconds", type=float, default=600.0, show_envvar=True,
              help="On SIGTERM, how long to keep working on the current task before exiting anyway.")
@click.option("--curve-dir", type=click.Path(file_okay=False), default=None, show_envvar=True,
              help="Encrypt and authenticate with CURVE keys from this directory (made by mlm-keys).")
@click.option("--idle-exit-seconds", type=click.FloatRange(min=0), default=None, show_envvar=True,
              help="Exit 0 after this long (at least three heartbeats) without hearing from a ventilator (none "
                   "started yet, or its job ended before this worker joined).  [default: wait for one]")
@click.option("--spot-watch/--no-spot-watch", default=False, show_envvar=True,
              help="On EC2: watch the instance metadata service (IMDSv2) for a spot interruption notice, a "
                   "rebalance recommendation or the Auto Scaling group's scale-in, and drain on any of them.")
@click.option("--spot-watch-seconds", type=click.FloatRange(min=0.05), default=5.0, show_envvar=True,
              help="How often --spot-watch asks (AWS updates the notices every 5 s).")
@click.option("--imds-endpoint", default=DEFAULT_ENDPOINT, show_envvar=True,
              help="The instance metadata service --spot-watch asks (1 s timeouts).")
@click.option("--notice-drain-seconds", type=click.FloatRange(min=0), default=DEFAULT_NOTICE_DRAIN_SECONDS,
              show_envvar=True, help="After a notice, how long to finish the current task before handing it back "
                                     "(a spot notice's own time, less 15 s, caps it).")
@click.option("--lifecycle-hook", default="", metavar="NAME", show_envvar=True,
              help="With --spot-watch and --autoscaling-group: complete this termination lifecycle hook's action "
                   "once drained, so scale-in waits for the drain and no longer.  [default: none]")
@click.option("--autoscaling-group", default="", metavar="NAME", show_envvar=True,
              help="The Auto Scaling group of this instance (for --lifecycle-hook).  [default: none]")
@click.option("--lifecycle-wait-seconds", type=click.FloatRange(min=0), default=300.0, show_envvar=True,
              help="After exiting, how long to wait for the group to start terminating this instance.")
@click.option("-v", "--verbose", count=True, help="More logging.")
def main(ventilator: str, processes: int, sink: str, credit: int, drain_seconds: float, curve_dir: str | None,
         idle_exit_seconds: float | None, spot_watch: bool, spot_watch_seconds: float, imds_endpoint: str,
         notice_drain_seconds: float, lifecycle_hook: str, autoscaling_group: str, lifecycle_wait_seconds: float,
         verbose: int) -> None:
    """Process tasks from a ventilator into TFRecord shards.

    Starts PROCESSES worker processes that each ask the ventilator for a
    task, tokenize and mask it with google-research/bert's semantics, write
    its shard to the job's output (local directory or S3), and acknowledge it
    to the sink.  Exits 0 when the job is finished.  SIGTERM drains: current
    tasks are finished and acknowledged, queued ones handed back.
    """
    logs.configure(verbose)
    if bool(lifecycle_hook) != bool(autoscaling_group) or (lifecycle_hook and not spot_watch):
        click.echo("worker: error: --lifecycle-hook and --autoscaling-group go together, with --spot-watch", err=True)
        sys.exit(2)
    options = WorkerOptions(ventilator=ventilator, sink=sink, credit=credit, drain_seconds=drain_seconds,
                            curve=Curve(curve_dir) if curve_dir else None, idle_exit_seconds=idle_exit_seconds)
    imds = Imds(imds_endpoint) if spot_watch else None
    noticed: list = []  # the notice the watcher acted on, if any
    if processes == 1:
        worker = WorkerProcess(options)
        if imds is not None:
            def on_notice(notice) -> None:
                noticed.append(notice)
                worker.interrupt(notice.release_at)
            InterruptionWatcher(imds, on_notice, interval=spot_watch_seconds,
                                drain_seconds=notice_drain_seconds).start()
        code = worker.run()
    else:
        code = supervise(options, processes, verbose, imds, notice_drain_seconds, spot_watch_seconds, noticed)
    if imds is not None and lifecycle_hook:
        rebalanced = any(notice.kind == "rebalance-recommendation" for notice in noticed)
        complete_after_drain(imds, LifecycleHook(lifecycle_hook, autoscaling_group, lifecycle_wait_seconds),
                             leave=rebalanced)
    sys.exit(code)
