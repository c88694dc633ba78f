"""The sink server's options, apart from the server: ``python -m sink --help`` and the ventilator's launch
flags read their defaults without importing what the server runs (the dataset card, every step, numpy,
tokenizers), which it imports only when it serves a job."""

from __future__ import annotations

from dataclasses import dataclass

from common.wire.security import Curve
from common.wire.transport import SINK_PORT


@dataclass
class SinkOptions:
    ventilator: str
    port: int = SINK_PORT
    bind_host: str = "*"
    state_dir: str = "~/.cache/mlm-pipeline"
    report_seconds: float = 10.0
    publish_seconds: float = 30.0
    curve: Curve | None = None
    metrics_port: int | None = None  # Prometheus metrics on this port (0: any free one)
    instance_hourly_price: float | None = None  # USD per worker instance-hour, for the cost in the summary
