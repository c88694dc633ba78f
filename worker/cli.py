"""``python -m worker --ventilator HOST:PORT [--processes N]``."""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time

import click

import common.one_blas_thread  # noqa: F401  (before numpy: see the module)
from common import logs, storage
from common.job.cli_settings import SectionedCommand, add_options, build, command_settings, naming_variables
from common.wire.security import Curve, SecurityError
from worker.gce_metadata import GceMetadata, GceNotices
from worker.heap import keep_freed_heap
from worker.interruption import (
    DEFAULT_NOTICE_DRAIN_SECONDS,
    Ec2Notices,
    Imds,
    InterruptionWatcher,
    Notice,
    NoticeSource,
)
from worker.lifecycle import complete_after_drain
from worker.options import WorkerOptions
from worker.settings import SettingsError, WorkerSettings

log = logging.getLogger("worker")

#: A worker process that dies (OOM, kill -9) is started again, but not in a
#: tight loop.
RESTART_DELAY_SECONDS = 1.0


#: prctl(2)'s option: the signal this process gets when the thread that started it dies (Linux).
PR_SET_PDEATHSIG = 1
#: How often a compute process checks that its supervisor is still its parent (the fallback to prctl).
PARENT_CHECK_SECONDS = 1.0


def die_with_parent(parent: int, signum: int = signal.SIGTERM, every: float = PARENT_CHECK_SECONDS) -> None:
    """Make this compute process drain and exit once ``parent`` (its supervisor) is gone, however it went:
    after a kill -9 of the supervisor its processes ran on for good, holding their memory.  The kernel sends
    ``signum`` at the parent's death (PR_SET_PDEATHSIG); a thread that sees another parent pid does the same
    where prctl is missing, and for a parent that died before prctl was set."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the check below is all there is
        pass

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every)
        log.warning("worker process %d: its supervisor %d is gone; draining and exiting", os.getpid(), parent)
        os.kill(os.getpid(), signum)

    threading.Thread(target=watch, name="parent-check", daemon=True).start()


def _run_one(options: WorkerOptions, verbose: int, release_at=None, stopping=None,
             parent: int | None = None, storage_settings: storage.StorageSettings | None = None) -> None:
    logs.configure(verbose)
    if storage_settings is not None:  # a spawned process: its supervisor's, as its command line gave them
        storage.configure(storage_settings)
    if parent is not None:
        die_with_parent(parent)
    from worker.runtime import WorkerProcess  # here: the supervisor of N processes and --help need none of it

    keep_freed_heap()
    worker = WorkerProcess(options)
    if release_at is not None:  # the supervisor's interruption notice: SIGUSR1, deadline in shared memory
        signal.signal(signal.SIGUSR1, lambda _signum, _frame: worker.interrupt(release_at.value))
        # A notice (or a stop) given before the handler was there: the supervisor writes it to shared memory
        # before it signals, so a process started while the drain began still drains.
        if release_at.value:
            worker.interrupt(release_at.value)
    if stopping is not None and stopping.value:
        worker.draining = True
    sys.exit(worker.run())


def shutdown_notice(drain_seconds: float) -> Notice:
    """SIGUSR1 from outside (a VM's shutdown script, terraform/gcp): the same drain as a cloud's notice."""
    return Notice("shutdown", time.time() + drain_seconds, "SIGUSR1")


def supervise(options: WorkerOptions, processes: int, verbose: int, watch: NoticeSource | Imds | None = None,
              notice_drain_seconds: float = DEFAULT_NOTICE_DRAIN_SECONDS, watch_seconds: float = 5.0,
              noticed: list | None = None) -> int:
    """Run ``processes`` worker processes; restart any that dies abnormally,
    forward SIGTERM/SIGINT so they drain; exit when all have exited cleanly.
    With ``watch``, an interruption notice from IMDS drains them too, with its deadline."""
    context = multiprocessing.get_context("spawn")
    draining = False
    release_at = context.Value("d", 0.0)  # a notice's deadline (0: none), read by processes started later too
    stopping = context.Value("b", 0)  # SIGTERM/SIGINT received: processes started later drain too

    def start() -> None:
        process = context.Process(target=_run_one, args=(options, verbose, release_at, stopping, os.getpid(),
                                                         storage.settings()), daemon=False)
        process.start()
        children.append(process)
        if release_at.value or stopping.value:  # the drain began while it was starting: it drains too
            if process.pid is not None:
                os.kill(process.pid, signal.SIGUSR1 if release_at.value else signal.SIGTERM)

    def signal_children(signum: int) -> None:
        for process in list(children):  # a copy: the watcher's thread calls this while the loop edits the list
            if process.is_alive() and process.pid is not None:
                os.kill(process.pid, signum)

    def on_notice(notice) -> None:
        nonlocal draining
        if noticed is not None:
            noticed.append(notice)
        release_at.value = notice.release_at if not release_at.value else min(release_at.value, notice.release_at)
        draining = True
        signal_children(signal.SIGUSR1)

    def on_signal(signum, _frame):
        nonlocal draining
        stopping.value = 1
        draining = True
        signal_children(signal.SIGTERM)

    children: list[multiprocessing.process.BaseProcess] = []
    # Handlers first: a SIGUSR1 (whose default is to end the process) or SIGTERM while the processes start.
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGUSR1, lambda _signum, _frame: on_notice(shutdown_notice(notice_drain_seconds)))
    for _ in range(processes):
        if not draining:
            start()
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
                restart_at = time.monotonic() + RESTART_DELAY_SECONDS
                while not draining and time.monotonic() < restart_at:  # a drain now means: start nobody
                    time.sleep(0.1)
                if not draining:
                    start()
    return 0


@click.command(cls=SectionedCommand, context_settings=command_settings("worker"))
@add_options(WorkerSettings)
def main(**values) -> None:
    """Process tasks from a ventilator into TFRecord shards.

    Starts PROCESSES worker processes that each ask the ventilator for a
    task, tokenize and mask it with google-research/bert's semantics, write
    its shard to the job's output (local directory or S3), and acknowledge it
    to the sink.  Exits 0 when the job is finished.  SIGTERM drains: current
    tasks are finished and acknowledged, queued ones handed back.  SIGUSR1
    (a VM's shutdown script) drains like a spot notice: what is not done
    within --notice-drain-seconds is handed back.
    """
    try:
        settings = build(WorkerSettings, values)
        if settings.curve_dir:  # before any process starts: each would fail on them, and be restarted
            Curve(settings.curve_dir).check_client()
    except (SettingsError, SecurityError) as error:
        click.echo(f"worker: error: {naming_variables(str(error))}", err=True)
        sys.exit(2)
    sys.exit(run(settings))


def run(settings: WorkerSettings) -> int:
    """Work for the ventilator until its job is done (or this host is drained); the exit status."""
    logs.configure(settings.verbose)
    storage.configure(settings.storage)  # the worker processes spawned here get them as an argument
    options = settings.worker_options()
    imds = Imds(settings.imds_endpoint) if settings.spot_watch and settings.spot_watch_cloud == "ec2" else None
    source: NoticeSource | None = None
    if imds is not None:
        source = Ec2Notices(imds)
    elif settings.spot_watch:
        source = GceNotices(GceMetadata(settings.gce_metadata_host))
    noticed: list = []  # the notice the watcher acted on, if any
    if settings.processes == 1:
        from worker.runtime import WorkerProcess

        keep_freed_heap()
        worker = WorkerProcess(options)
        signal.signal(signal.SIGUSR1, lambda _signum, _frame: worker.interrupt(
            shutdown_notice(settings.notice_drain_seconds).release_at))
        if source is not None:
            def on_notice(notice) -> None:
                noticed.append(notice)
                worker.interrupt(notice.release_at)
            InterruptionWatcher(source, on_notice, interval=settings.spot_watch_seconds,
                                drain_seconds=settings.notice_drain_seconds).start()
        code = worker.run()
    else:
        code = supervise(options, settings.processes, settings.verbose, source, settings.notice_drain_seconds,
                         settings.spot_watch_seconds, noticed)
    hook = settings.lifecycle()
    if imds is not None and hook is not None:
        rebalanced = any(notice.kind == "rebalance-recommendation" for notice in noticed)
        complete_after_drain(imds, hook, leave=rebalanced)
    return code
