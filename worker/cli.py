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
from worker.runtime import WorkerOptions, WorkerProcess

log = logging.getLogger("worker")

#: A worker process that dies (OOM, kill -9) is started again, but not in a
#: tight loop.
RESTART_DELAY_SECONDS = 1.0


def _run_one(options: WorkerOptions, verbose: int) -> None:
    logs.configure(verbose)
    sys.exit(WorkerProcess(options).run())


def supervise(options: WorkerOptions, processes: int, verbose: int) -> int:
    """Run ``processes`` worker processes; restart any that dies abnormally,
    forward SIGTERM/SIGINT so they drain; exit when all have exited cleanly."""
    context = multiprocessing.get_context("spawn")
    draining = False

    def start() -> multiprocessing.Process:
        process = context.Process(target=_run_one, args=(options, verbose), daemon=False)
        process.start()
        return process

    def on_signal(signum, _frame):
        nonlocal draining
        draining = True
        for process in children:
            if process.is_alive():
                os.kill(process.pid, signal.SIGTERM)

    children = [start() for _ in range(processes)]
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
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
@click.option("-v", "--verbose", count=True, help="More logging.")
def main(ventilator: str, processes: int, sink: str, credit: int, drain_seconds: float, curve_dir: str | None,
         idle_exit_seconds: float | None, verbose: int) -> None:
    """Process tasks from a ventilator into TFRecord shards.

    Starts PROCESSES worker processes that each ask the ventilator for a
    task, tokenize and mask it with google-research/bert's semantics, write
    its shard to the job's output (local directory or S3), and acknowledge it
    to the sink.  Exits 0 when the job is finished.  SIGTERM drains: current
    tasks are finished and acknowledged, queued ones handed back.
    """
    logs.configure(verbose)
    options = WorkerOptions(ventilator=ventilator, sink=sink, credit=credit, drain_seconds=drain_seconds,
                            curve=Curve(curve_dir) if curve_dir else None, idle_exit_seconds=idle_exit_seconds)
    if processes == 1:
        sys.exit(WorkerProcess(options).run())
    sys.exit(supervise(options, processes, verbose))
