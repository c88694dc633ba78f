"""Finished runs, made one way: the real command line run to its end, the test failing with the end of the run's
log unless it exited 0.  Module fixtures build their job with these instead of repeating the run-and-check."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.support.helpers import WIKI, need_shared, run_ventilator

#: How much of a failed run's stderr the assertion shows: its last lines, where the reason is.
LOG_TAIL = 3000


@dataclass(frozen=True)
class FinishedRun:
    """A `python -m ventilator` that exited 0: where it wrote, and what it printed (a test may check its log)."""

    output: Path
    stdout: str
    stderr: str


def finished_run(data: Path | str, output: Path | str, *args: object, timeout: float = 300,
                 env: Mapping[str, str] | None = None) -> FinishedRun:
    """Run the ventilator over ``data`` into ``output`` with ``args``; fails the test unless it exited 0."""
    result: subprocess.CompletedProcess[str] = run_ventilator(data, output, *args, timeout=timeout,
                                                              env=dict(env or {}))
    assert result.returncode == 0, result.stderr[-LOG_TAIL:]
    return FinishedRun(Path(output), result.stdout, result.stderr)


def finished_job(directory: Path, *args: object, data: Path | None = None, timeout: float = 300,
                 env: Mapping[str, str] | None = None) -> Path:
    """``directory/out``: ``data`` (../shared's Wikipedia sample by default) made into a finished job with ``args``.
    Skips the test when ../shared is absent."""
    need_shared()
    return finished_run(WIKI if data is None else data, directory / "out", *args, timeout=timeout,
                        env=env).output


def finished_by_fleets(directory: Path, *args: object, fleets: Sequence[int] = (1, 2),
                       data: Path | None = None) -> list[Path]:
    """The same job run once by each number of workers in ``fleets`` (``directory/workers-N/out``): outputs that
    must be byte-identical whatever the fleet."""
    return [finished_job(directory / f"workers-{workers}", *args, "--workers", workers, data=data)
            for workers in fleets]


def wiki_prefix(directory: Path, size: int, extra: str = "") -> Path:
    """``directory/wiki_00``: ../shared's first WikiExtractor file cut at the first document end after ``size``
    characters (whole documents: a few small tasks), with ``extra`` appended.  Returns ``directory``."""
    need_shared()
    text = (WIKI / "AA" / "wiki_00").read_text(encoding="utf-8")
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "wiki_00").write_text(text[:text.index("</doc>\n", size) + len("</doc>\n")] + extra,
                                       encoding="utf-8")
    return directory
