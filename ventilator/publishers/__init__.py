"""Backlog publishers (base.py), found by name: this package's modules and installed packages' entry points."""

from __future__ import annotations

import functools

from common.params import discover
from ventilator.publishers.base import Backlog, BacklogPublisher

__all__ = ["DEFAULT_PUBLISHER", "ENTRY_POINTS", "Backlog", "BacklogPublisher", "publisher_named", "publishers"]

DEFAULT_PUBLISHER = "cloudwatch"
ENTRY_POINTS = "mlm_pipeline.publishers"


@functools.cache
def publishers() -> dict[str, type[BacklogPublisher]]:
    return discover(__name__, BacklogPublisher)  # and the ENTRY_POINTS group's (common.params)


def publisher_named(name: str) -> type[BacklogPublisher]:
    try:
        return publishers()[name]
    except KeyError:
        raise ValueError(f"unknown backlog publisher {name!r} (known: {', '.join(sorted(publishers()))})") from None
