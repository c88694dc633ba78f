"""A worker process's options, apart from its runtime: ``python -m worker --help`` and the supervisor read
them without importing what a compute process runs (the job's steps, numpy, tokenizers), which is imported
only where a job is worked on."""

from __future__ import annotations

from dataclasses import dataclass

from common.wire.security import Curve


@dataclass
class WorkerOptions:
    ventilator: str  # host:port
    sink: str = ""  # host:port; default: from the job configuration
    credit: int = 1  # tasks held at once (in progress + queued)
    drain_seconds: float = 600.0
    curve: Curve | None = None
    idle_exit_seconds: float | None = None  # exit 0 after this long without a ventilator (None: wait forever)
