"""A plugin "installed" for a test: what pip leaves in site-packages (a .dist-info with METADATA and
entry_points.txt) and the plugin's modules, in a directory the test puts on the path."""

from __future__ import annotations

from pathlib import Path


def fake_install(site: Path, name: str, entry_points: str, modules: dict[str, str] | None = None,
                 version: str = "1.0") -> Path:
    """Distribution ``name`` ``version`` declaring ``entry_points`` (entry_points.txt's text), with ``modules``
    (module name -> source) beside it, in ``site``; returns ``site``."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(entry_points)
    for module, text in (modules or {}).items():
        (site / f"{module}.py").write_text(text)
    return site
