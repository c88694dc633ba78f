"""A module imported on first use.

Every reader and writer module is imported when the registry is built
(their names and parameters become the command line's options), so the
ventilator and the sink would load pyarrow (~40 MB of RSS) for a job that
reads WikiExtractor and writes TFRecords.  The Parquet modules name pyarrow
through this instead: it is loaded when a Parquet file is first touched.
"""

from __future__ import annotations

import importlib
from types import ModuleType


class LazyModule:
    """Stands for ``name``; the first attribute looked up imports it."""

    def __init__(self, name: str):
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attribute: str):
        if self._module is None:
            self._module = importlib.import_module(self._name)
        return getattr(self._module, attribute)

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}{' (loaded)' if self._module is not None else ''}>"
