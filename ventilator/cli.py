"""``python -m ventilator --data DIR --output OUT [--workers N] [job flags]``."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import sys
from collections.abc import Callable

import click

import common.one_blas_thread  # noqa: F401  (before numpy: see the module)
from common import logs, storage
from common.job.cli_settings import DeferredCommand, command_settings, naming_variables
from common.job.config import JobConfig
from common.output.lock import OutputLock
from common.wire import protocol
from common.wire.security import Curve, SecurityError
from common.wire.transport import ListenError
from ventilator.job import JobError, identify, lock_output, plan, validate
from ventilator.launchers import Fleet, Launcher, LaunchError, Role, launcher_named
from ventilator.publishers import publisher_named
from ventilator.publishers.base import PublisherError
from ventilator.run_config import EXIT_FAILED, ConfigError, RunConfig, data_command, from_values, run_options
from ventilator.server import Job, Unplanned, VentilatorServer
from ventilator.show_steps import show_steps

log = logging.getLogger("ventilator")

EXIT_OK = 0
EXIT_QUARANTINED = 3
EXIT_INTERRUPTED = 130

__all__ = ["EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_QUARANTINED", "main", "run"]


@click.command(cls=DeferredCommand, options=run_options, context_settings=command_settings("ventilator"))
def main(**values) -> None:
    """Cut a corpus into tasks and hand them to workers over ZeroMQ.

    Serves the job (tokenizer, BERT parameters, output) to every worker and
    sink that connects on --vport, leases tasks to workers, and exits 0 once
    the sink has every task in OUT/manifest.jsonl.  Run the same command
    again after a crash or Ctrl-C to resume.

    One machine, everything: python -m ventilator --data DIR --output OUT
    --vocab-file vocab.txt --workers 2
    """
    try:
        config = from_values(values)
    except ConfigError as error:
        click.echo(f"ventilator: error: {naming_variables(str(error))}", err=True)
        sys.exit(EXIT_FAILED)
    sys.exit(print_steps(config) if config.display.show_steps else run(config))


def print_steps(config: RunConfig) -> int:
    """--show-steps: the job's steps printed, nothing started (ventilator/show_steps.py); the exit status."""
    logs.configure(config.display.verbose)
    storage.configure(config.storage)
    try:
        click.echo(show_steps(config))
    except JobError as error:
        click.echo(f"ventilator: error: {naming_variables(str(error))}", err=True)
        return EXIT_FAILED
    return EXIT_OK


def run(config: RunConfig) -> int:
    """Plan the job, start what the run starts beside the ventilator, serve the job to its end: the exit status."""
    logs.configure(config.display.verbose)
    storage.configure(config.storage)
    lock = None
    try:
        if config.network.curve_dir:  # before any work: it serves with them
            Curve(config.network.curve_dir).check_server()
        launcher_class = launcher_named(config.fleet.launcher)
        launcher = launcher_class(launcher_class.make_params(config.fleet.launcher_params),
                                  Fleet(workers=config.fleet.workers))
        publisher_class = publisher_named(config.metrics.backlog_publisher)
        publisher_class.check(publisher_class.make_params(config.metrics.publisher_params))
        run_config = dataclasses.replace(config, command=data_command(config))
        checked = validate(run_config)
        job_config = identify(run_config, checked)
        _check_sendable(job_config)
        lock = lock_output(run_config, job_config)  # one run per output, from before anything is written to it
    except (LaunchError, PublisherError, JobError, SecurityError) as error:
        if lock is not None:
            lock.release()
        click.echo(f"ventilator: error: {naming_variables(str(error))}", err=True)
        return EXIT_FAILED
    try:
        return _run(config, lambda: plan(run_config, checked, job_config), job_config, launcher, lock)
    finally:
        lock.release()


def _run(config: RunConfig, planner: Callable[[], Job], job_config: JobConfig, launcher: Launcher,
         lock: OutputLock) -> int:
    """Start the sink and workers the run starts, then plan the job (``planner``) and serve it, the sink
    reading its manifest while the job is planned; the exit status (the output's lock held)."""
    show_progress = sys.stderr.isatty() if config.display.progress is None else config.display.progress
    display = None
    if show_progress:
        from ventilator.display import TerminalDisplay  # rich: ~20 ms to import, for a terminal only

        display = TerminalDisplay()
        logs.route_to(display.print_line)

    def planned() -> Job:
        job = planner()
        if display is not None:
            display.set_totals(len(job.tasks), sum(task.length for task in job.tasks))
        return job

    launcher.relay = display.print_line if display is not None else None
    if config.sink.starts_sink:
        launcher.start(Role.of("sink", "sink", config.sink_settings(launcher.ventilator_host)))
    if config.fleet.workers:
        launcher.start(Role.of("workers", "worker", config.worker_settings(launcher.ventilator_host)))

    publisher = publisher_named(config.metrics.backlog_publisher)
    params = publisher.make_params(config.metrics.publisher_params)  # checked by from_values
    server_options = config.server_options(
        on_progress=display.update if display is not None else None,
        backlog_publisher=(lambda observe: publisher(params, observe)) if publisher.enabled(params) else None)
    with display if display is not None else contextlib.nullcontext():
        code, message = _serve(Unplanned(job_config, planned), server_options, launcher, lock)
    click.echo(f"ventilator: {message}", err=True)
    return code


def _check_sendable(job_config) -> None:
    """The job as every peer will decode it: a value the wire refuses (``--lease-seconds inf``: every number
    must be finite and in its range) would have every Welcome dropped and the workers wait for good."""
    try:
        JobConfig.from_welcome(protocol.decode(protocol.encode(job_config.welcome(""))))
    except protocol.ProtocolError as error:
        raise JobError(f"this job cannot be sent to its workers: {error}") from None


def _serve(job: Unplanned, server_options, launcher: Launcher, lock: OutputLock) -> tuple[int, str]:
    """Run the job to its end; the exit status and its one-line reason."""
    failure: list[str] = []

    def child_failed() -> bool:
        reason = launcher.failure() or lock.lost
        if reason:
            failure.append(reason)
        return bool(reason)

    server = VentilatorServer(job, server_options, should_stop=child_failed, peers_gone=launcher.all_exited,
                              output_held=lambda: not lock.lost)
    try:
        result = server.run()
        if lock.lost and not failure:  # the run stopped for a signal first: the lost lock is still its end
            failure.append(lock.lost)
    except (ListenError, JobError) as error:  # JobError: the plan failed (the stages before the normal pass)
        launcher.terminate()
        launcher.wait(timeout=30)
        return EXIT_FAILED, f"error: {naming_variables(str(error))}"
    except BaseException:
        launcher.terminate()
        raise
    if server.interrupted or failure or result.error:
        launcher.terminate()  # SIGTERM: workers drain, the sink flushes
    codes = launcher.wait(timeout=120)
    if failure:
        return EXIT_FAILED, f"error: {failure[0]}"
    if server.interrupted:
        return EXIT_INTERRUPTED, result.reason
    bad = {name: code for name, code in codes.items() if code not in (0, None)}
    if result.error:
        return EXIT_FAILED, f"error: {result.error}"
    if not result.completed:
        return EXIT_QUARANTINED, f"error: {result.reason} (see the sink's summary)"
    if bad:
        return EXIT_FAILED, f"error: local processes exited badly: {bad}"
    return EXIT_OK, f"done: {result.reason}"
