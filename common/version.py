"""Which mlm-pipeline made an output: what a dataset card and dataset_info.json record.

The package's version, and the git commit when the code runs from a checkout
(an editable install, a fleet host that cloned the repository), so two outputs
made between releases can still be told apart."""

from __future__ import annotations

import functools
import os
import shlex
import subprocess
import sys

PACKAGE = "mlm-pipeline"


@functools.cache
def version() -> str:
    """``0.1.0`` or ``0.1.0+g<commit>[.dirty]``."""
    from importlib import metadata

    try:
        release = metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        release = "unknown"
    commit = _git_commit()
    return f"{release}+g{commit}" if commit else release


def _git_commit() -> str:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not os.path.exists(os.path.join(root, ".git")):
        return ""
    try:
        head = subprocess.run(["git", "-C", root, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                              timeout=5)
        if head.returncode != 0:
            return ""
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return ""
    return head.stdout.strip() + (".dirty" if dirty.returncode == 0 and dirty.stdout.strip() else "")


def command_line(argv: list[str] | None = None) -> str:
    """The command as the user typed it: ``python -m ventilator ...`` for a module run (argv[0] is then the
    module's ``__main__.py``), the console script's name otherwise; quoted so it can be pasted back."""
    argv = list(sys.argv if argv is None else argv)
    if not argv:
        return ""
    first = argv[0]
    if os.path.basename(first) == "__main__.py":
        head = ["python", "-m", os.path.basename(os.path.dirname(first))]
    else:
        head = [os.path.basename(first)]
    return shlex.join(head + argv[1:])
