"""``python -m sink --ventilator HOST:PORT [--port 5558]``."""

from __future__ import annotations

import sys

import click

from common import logs
from common.security import Curve
from common.transport import SINK_PORT
from sink.server import SinkOptions, SinkServer


@click.command(context_settings={"auto_envvar_prefix": "MLM", "show_default": True,
                                 "help_option_names": ["-h", "--help"]})
@click.option("--ventilator", required=True, metavar="HOST:PORT", show_envvar=True,
              help="The ventilator's --vport; the sink learns the job (output, manifest) from it.")
@click.option("--port", type=int, default=SINK_PORT, show_envvar=True, help="Port workers push acknowledgements to.")
@click.option("--bind-host", default="*", show_envvar=True, help="Interface to listen on (* for all).")
@click.option("--state-dir", default="~/.cache/mlm-pipeline", show_envvar=True,
              help="Where the manifest of an S3 output is journaled before it is published to S3.")
@click.option("--report-seconds", type=float, default=10.0, show_envvar=True, help="Throughput log interval.")
@click.option("--publish-seconds", type=float, default=30.0, show_envvar=True,
              help="How often the manifest of an S3 output is uploaded.")
@click.option("--curve-dir", type=click.Path(file_okay=False), default=None, show_envvar=True,
              help="Encrypt and authenticate with CURVE keys from this directory (made by mlm-keys).")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=None, show_envvar=True,
              help="Serve Prometheus metrics (manifest totals, throughput, stage times) on this port.  [default: off]")
@click.option("--instance-hourly-price", type=click.FloatRange(min=0), default=None, show_envvar=True,
              help="USD per worker instance-hour (e.g. the workers' spot price): the summary then gives the run's "
                   "cost, per billion output tokens and per input GB.  [default: hours only]")
@click.option("-v", "--verbose", count=True, help="More logging.")
def main(ventilator, port, bind_host, state_dir, report_seconds, publish_seconds, curve_dir, metrics_port,
         instance_hourly_price, verbose) -> None:
    """Collect workers' acknowledgements into OUT/manifest.jsonl.

    Every finished shard becomes one manifest line (task, shard URI, records,
    tokens, sha256); the ventilator learns the task is done only once that
    line is on disk.  Shows live throughput and writes OUT/summary.json at
    the end.
    """
    logs.configure(verbose)
    options = SinkOptions(ventilator=ventilator, port=port, bind_host=bind_host, state_dir=state_dir,
                          report_seconds=report_seconds, publish_seconds=publish_seconds,
                          curve=Curve(curve_dir) if curve_dir else None, metrics_port=metrics_port,
                          instance_hourly_price=instance_hourly_price)
    sys.exit(SinkServer(options).run())
