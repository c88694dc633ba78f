"""The sink's settings: what ``python -m sink`` takes, and what the ventilator hands a sink it starts.

Each field is its option (common/job/cli_settings.py); the defaults are the sink server's own (SinkOptions).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import click

from common.job.cli_settings import Address, option
from common.storage import StorageSettings
from common.wire.security import Curve
from common.wire.transport import VENTILATOR_PORT
from sink.options import SinkOptions


@dataclass(frozen=True)
class SinkSettings:
    ventilator: str = option("--ventilator", required=True, type=Address(VENTILATOR_PORT), show_envvar=True,
                             help="The ventilator's --vport; the sink learns the job (output, manifest) from it.")
    port: int = option("--port", type=int, default=SinkOptions.port, show_envvar=True,
                       help="Port workers push acknowledgements to.")
    bind_host: str = option("--bind-host", default=SinkOptions.bind_host, show_envvar=True,
                            help="Interface to listen on (* for all).")
    state_dir: str = option("--state-dir", default=SinkOptions.state_dir, show_envvar=True,
                            help="Where the manifest of an S3 output is journaled before it is published to S3.")
    report_seconds: float = option("--report-seconds", type=float, default=SinkOptions.report_seconds,
                                   show_envvar=True, help="Throughput log interval.")
    publish_seconds: float = option("--publish-seconds", type=float, default=SinkOptions.publish_seconds,
                                    show_envvar=True, help="How often the manifest of an S3 output is uploaded.")
    curve_dir: str | None = option("--curve-dir", type=click.Path(file_okay=False), default=None, show_envvar=True,
                                   help="Encrypt and authenticate with CURVE keys from this directory (made by "
                                        "mlm-keys).")
    metrics_port: int | None = option("--metrics-port", type=click.IntRange(0, 65535), default=SinkOptions.metrics_port,
                                      show_envvar=True,
                                      help="Serve Prometheus metrics (manifest totals, throughput, stage times) on "
                                           "this port.", described="off")
    instance_hourly_price: float | None = option(
        "--instance-hourly-price", type=click.FloatRange(min=0), default=SinkOptions.instance_hourly_price,
        show_envvar=True, described="hours only",
        help="USD per worker instance-hour (e.g. the workers' spot price): the summary then gives the run's cost, per "
             "billion output tokens and per input GB.")
    verbose: int = option("-v", "--verbose", count=True, default=0, help="More logging.")
    storage: StorageSettings = field(default_factory=StorageSettings)

    def server_options(self) -> SinkOptions:
        return SinkOptions(ventilator=self.ventilator, port=self.port, bind_host=self.bind_host,
                           state_dir=self.state_dir, report_seconds=self.report_seconds,
                           publish_seconds=self.publish_seconds,
                           curve=Curve(self.curve_dir) if self.curve_dir else None,
                           metrics_port=self.metrics_port, instance_hourly_price=self.instance_hourly_price)
