"""Variants from other installed packages: a distribution's entry points in a group name classes to add
to an axis (``[options.entry_points] mlm_pipeline.launchers = slurm = mypkg.slurm:SlurmLauncher``)."""

from __future__ import annotations

from importlib.metadata import entry_points


def installed(group: str, base: type) -> dict[str, type]:
    """The ``base`` subclasses the installed distributions declare in ``group``, by their ``name``."""
    found: dict[str, type] = {}
    for point in entry_points(group=group):
        value = point.load()
        if not (isinstance(value, type) and issubclass(value, base)):
            raise TypeError(f"entry point {point.name} = {point.value} ({group}) is not a {base.__name__}")
        if found.setdefault(value.name, value) is not value:
            raise TypeError(f"two {base.__name__}s named {value.name!r} in {group}: {found[value.name]} and {value}")
    return found


def with_installed(found: dict[str, type], group: str, base: type) -> dict[str, type]:
    """``found`` (this package's modules) and the installed ones; one name twice is refused, naming both."""
    merged = dict(found)
    for name, value in installed(group, base).items():
        if merged.setdefault(name, value) is not value:
            raise TypeError(f"two {base.__name__}s named {name!r}: {merged[name]} and {value} (entry point {group})")
    return merged
