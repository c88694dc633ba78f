"""Logging set-up shared by the three command lines."""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass

FORMAT = "%(asctime)s %(levelname).1s %(name)s: %(message)s"
DATE_FORMAT = "%H:%M:%S"


def configure(verbose: int = 0, quiet: bool = False) -> None:
    level = logging.WARNING if quiet else (logging.DEBUG if verbose > 0 else logging.INFO)
    logging.basicConfig(
        level=level, stream=sys.stderr,
        format=FORMAT, datefmt=DATE_FORMAT)
    logging.getLogger("botocore").setLevel(logging.WARNING)
    logging.getLogger("boto3").setLevel(logging.WARNING)
    logging.getLogger("urllib3").setLevel(logging.WARNING)


class _LineHandler(logging.Handler):
    def __init__(self, emit_line: Callable[[str], None]):
        super().__init__()
        self._emit_line = emit_line
        self.setFormatter(logging.Formatter(FORMAT, DATE_FORMAT))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._emit_line(self.format(record))
        except Exception:  # logging must never raise
            self.handleError(record)


def route_to(emit_line: Callable[[str], None]) -> None:
    """Send this process's log lines, formatted as usual, to ``emit_line``
    (the terminal display) instead of stderr."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.addHandler(_LineHandler(emit_line))


#: How long a role waits in silence for a peer before it says so (:class:`Reminder`): the ventilator for a sink,
#: a worker or the sink for the ventilator.
SILENCE_WARNING_SECONDS = 30.0


@dataclass
class Reminder:
    """When to say that something awaited has not come: once it has been awaited ``after`` seconds, then every
    ``every`` seconds while it lasts.  A silent wait looks like a hang (a worker of another version waiting for
    a Welcome, a ventilator waiting for a sink); a line a minute does not flood the log."""

    after: float
    every: float = 60.0
    said: float = -math.inf  # when it was last said (``now``'s clock)

    def due(self, waited: float, now: float) -> bool:
        """Whether to say it now, ``waited`` seconds into the wait; if so, it counts as said."""
        if waited <= self.after or now - self.said <= self.every:
            return False
        self.said = now
        return True
