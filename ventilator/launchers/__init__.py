"""Launchers (base.py), found by name: this package's modules and installed packages' entry points."""

from __future__ import annotations

import functools

from common.params import discover
from ventilator.launchers.base import LaunchError, Launcher, Role

__all__ = ["DEFAULT_LAUNCHER", "ENTRY_POINTS", "LaunchError", "Launcher", "Role", "launcher_named", "launchers"]

DEFAULT_LAUNCHER = "local"
ENTRY_POINTS = "mlm_pipeline.launchers"


@functools.cache
def launchers() -> dict[str, type[Launcher]]:
    return discover(__name__, Launcher)  # and the ENTRY_POINTS group's (common.params)


def launcher_named(name: str) -> type[Launcher]:
    try:
        return launchers()[name]
    except KeyError:
        raise ValueError(f"unknown launcher {name!r} (known: {', '.join(sorted(launchers()))})") from None
