"""Launchers (base.py), found by name: this package's modules and installed packages' entry points."""

from __future__ import annotations

from common.job.params import Registry
from ventilator.launchers.base import Fleet, Launcher, LaunchError, Role

__all__ = ["DEFAULT_LAUNCHER", "ENTRY_POINTS", "Fleet", "LaunchError", "Launcher", "Role", "launcher_named",
           "launchers"]

DEFAULT_LAUNCHER = "local"
ENTRY_POINTS = "mlm_pipeline.launchers"


_REGISTRY: Registry[Launcher] = Registry(__name__, Launcher, "launcher")
launchers = _REGISTRY.variants
launcher_named = _REGISTRY.named
