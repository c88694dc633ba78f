"""Logging set-up shared by the three command lines."""

from __future__ import annotations

import logging
import sys


def configure(verbose: int = 0, quiet: bool = False) -> None:
    level = logging.WARNING if quiet else (logging.DEBUG if verbose > 0 else logging.INFO)
    logging.basicConfig(
        level=level, stream=sys.stderr,
        format="%(asctime)s %(levelname).1s %(name)s: %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("botocore").setLevel(logging.WARNING)
    logging.getLogger("boto3").setLevel(logging.WARNING)
    logging.getLogger("urllib3").setLevel(logging.WARNING)
