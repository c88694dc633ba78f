"""Logging set-up shared by the three command lines."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

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
        except Exception:  # noqa: BLE001 - logging must never raise
            self.handleError(record)


def route_to(emit_line: Callable[[str], None]) -> None:
    """Send this process's log lines, formatted as usual, to ``emit_line``
    (the terminal display) instead of stderr."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.addHandler(_LineHandler(emit_line))
