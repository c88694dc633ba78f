"""The ventilator's terminal: a progress bar (rich) with log lines
scrolling above it.

Used only when stderr is a terminal (``--progress`` forces it either way).
The sink and workers the one-machine command starts write through it too
(the local launcher relays their lines), so nothing else draws under the bar.
"""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text


class TerminalDisplay:
    def __init__(self, total_tasks: int | None = None, total_bytes: int = 0):
        """The totals may come later (``set_totals``): the job is planned while the sink starts."""
        self.console = Console(stderr=True)
        self._total_bytes = total_bytes
        self._progress = Progress(
            TextColumn("tasks"), BarColumn(), MofNCompleteColumn(), TaskProgressColumn(),
            TextColumn("{task.fields[megabytes]}"), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
            console=self.console)
        self._bar = self._progress.add_task("tasks", total=total_tasks, megabytes="")

    def __enter__(self) -> TerminalDisplay:
        self._progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self._progress.stop()

    def set_totals(self, total_tasks: int, total_bytes: int) -> None:
        self._total_bytes = total_bytes
        self._progress.update(self._bar, total=total_tasks)

    def update(self, done: int, bytes_done: int) -> None:
        self._progress.update(self._bar, completed=done,
                              megabytes=f"{bytes_done / 1e6:,.1f}/{self._total_bytes / 1e6:,.1f} MB")

    def print_line(self, line: str) -> None:
        """One log line above the bar (rich's console is thread-safe)."""
        self.console.print(Text(line), soft_wrap=True)
