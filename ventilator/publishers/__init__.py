"""Backlog publishers (base.py), found by name: this package's modules and installed packages' entry points."""

from __future__ import annotations

from common.job.params import Registry
from ventilator.publishers.base import Backlog, BacklogPublisher

__all__ = ["DEFAULT_PUBLISHER", "ENTRY_POINTS", "Backlog", "BacklogPublisher", "publisher_named", "publishers"]

DEFAULT_PUBLISHER = "cloudwatch"
ENTRY_POINTS = "mlm_pipeline.publishers"


_REGISTRY: Registry[BacklogPublisher] = Registry(__name__, BacklogPublisher, "backlog publisher")
publishers = _REGISTRY.variants
publisher_named = _REGISTRY.named
