"""``python -m sink --ventilator HOST:PORT [--port 5558]``."""

from __future__ import annotations

import sys

import click

import common.one_blas_thread  # noqa: F401  (before numpy: see the module)
from common import logs, storage
from common.job.cli_settings import SectionedCommand, add_options, build, command_settings, naming_variables
from common.wire.security import Curve, SecurityError
from sink.settings import SinkSettings


@click.command(cls=SectionedCommand, context_settings=command_settings("sink"))
@add_options(SinkSettings)
def main(**values) -> None:
    """Collect workers' acknowledgements into OUT/manifest.jsonl.

    Every finished shard becomes one manifest line (task, shard URI, records,
    tokens, sha256); the ventilator learns the task is done only once that
    line is on disk.  Shows live throughput and writes OUT/summary.json at
    the end.
    """
    settings = build(SinkSettings, values)
    if settings.curve_dir:  # before any work: it serves workers and connects to the ventilator
        try:
            Curve(settings.curve_dir).check_server()
            Curve(settings.curve_dir).check_client()
        except SecurityError as error:
            click.echo(f"sink: error: {naming_variables(str(error))}", err=True)
            sys.exit(2)
    sys.exit(run(settings))


def run(settings: SinkSettings) -> int:
    logs.configure(settings.verbose)
    storage.configure(settings.storage)
    from sink.server import SinkServer  # here: --help and a refused command line need none of what it imports

    return SinkServer(settings.server_options()).run()
