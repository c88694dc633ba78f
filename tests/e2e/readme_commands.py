"""The README's commands as the fresh-venv checks and the suite read them: its sections, its ```bash blocks split
into commands, and the ModernBERT section run as written (tests/e2e/test_readme_modernbert.py in the suite's
environment; scripts/readme-venvs.sh in a venv of the section's own install line).

Only the standard library: scripts/readme-venvs.sh and scripts/readers-venv.sh import it with a python whose venv
holds nothing yet, or only the project's base install.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODERNBERT = "Training a ModernBERT-style encoder"


def readme() -> str:
    return (REPO / "README.md").read_text(encoding="utf-8")


def readme_section(title: str) -> str:
    """The text under ``## title`` up to the next ``## `` heading (its ``###`` subsections included)."""
    return readme().split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, re.S)


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.S)


@dataclass(frozen=True)
class Command:
    """One command of a README ```bash block: its section (the ``##`` or ``###`` heading above it), its text as
    written (continuation lines joined, spaces collapsed, the comment dropped) and whether it ends in ``&``."""

    section: str
    text: str
    background: bool = False


def _drop_comment(line: str) -> str:
    """The line up to a ``#`` that starts a shell comment (at the start or after a blank, outside quotes)."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def commands(text: str, section: str = "") -> list[Command]:
    """The commands of a bash block: split at ``&&`` and a trailing ``&``."""
    found = []
    for line in text.replace("\\\n", " ").splitlines():
        for part in _drop_comment(line).split("&&"):
            part = " ".join(part.split())
            background = part.endswith("&")
            part = part.removesuffix("&").strip()
            if part:
                found.append(Command(section, part, background))
    return found


def readme_commands() -> list[Command]:
    """Every command of every ```bash block of the README, in order, each with its section."""
    found, section = [], ""
    for chunk in re.split(r"(?m)^(#{2,3} .*)$", readme()):
        if re.fullmatch(r"#{2,3} .*", chunk):
            section = chunk.lstrip("#").strip()
            continue
        for block in bash_blocks(chunk):
            found.extend(commands(block, section))
    return found


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def ventilator_sockets(state_dir: Path | None = None) -> list[str]:
    """What every run of the ventilator here adds: its sockets on free loopback ports (never the defaults another
    run on the machine may hold), and a state directory of its own."""
    vport, sink_port = free_ports(2)
    extra = ["--vport", str(vport), "--sink-port", str(sink_port), "--bind-host", "127.0.0.1"]
    return extra + (["--state-dir", str(state_dir)] if state_dir is not None else [])


# ---- the ModernBERT section -------------------------------------------------------------------------------------

def modernbert_install_commands() -> list[str]:
    """The section's first block, its install line, split at ``&&``."""
    block = bash_blocks(readme_section(MODERNBERT))[0]
    assert block.strip().startswith("pip install"), "the section's install line comes first"
    return [c.text for c in commands(block)]


def modernbert_section_commands() -> list[str]:
    """The section's second block, as written (a trailing ``&`` kept)."""
    block = bash_blocks(readme_section(MODERNBERT))[1]
    return [line.strip() for line in block.splitlines() if line.strip()]


def run_modernbert_section(work: Path, python: str = sys.executable, cwd: Path = REPO) -> tuple[dict, str]:
    """The section's commands as written (``/tmp/mb/`` in ``work``, the loader on a free port), ``python`` for every
    ``python``, in ``cwd``: the trainer's summary line and the loader's log."""
    port = free_ports(1)[0]
    lines = [c.replace("/tmp/mb/", f"{work}/").replace("5560", str(port)) for c in modernbert_section_commands()]
    assert [c.split()[:3] for c in lines] == [
        ["python", "-m", "common.tokenization.training"], ["python", "-m", "ventilator"], ["python", "-m", "loader"],
        ["python", "examples/train_tiny_modernbert.py", "--loader"]], lines
    background = None
    server_log = ""
    try:
        for line in lines:
            argv = shlex.split(line.rstrip("&"))
            argv[0] = python
            if line.endswith("&"):
                background = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                              text=True)
                continue
            if argv[1:3] == ["-m", "ventilator"]:
                argv += ventilator_sockets(work / "state")
            result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=600)
            assert result.returncode == 0, (line, result.stderr[-3000:])
    finally:
        if background is not None:
            background.terminate()
            server_log = background.communicate(timeout=20)[0]
    return json.loads(result.stdout.strip().splitlines()[-1]), server_log


def check_modernbert_run(summary: dict, server_log: str) -> None:
    """What the section promises: 20 steps of a tiny ModernBERT whose loss falls, on flat token-budget batches."""
    assert summary["steps"] == 20, summary
    assert summary["last_loss"] < summary["first_loss"] - 0.5, summary  # from ~ln(2000) = 7.6
    assert "<= 8192 tokens (flat)" in server_log, server_log[-3000:]


def run(argv: list[str], cwd: Path = REPO, timeout: float = 600, env: dict | None = None) -> str:
    result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                            env={**os.environ, **(env or {})})
    assert result.returncode == 0, (shlex.join(argv), result.stderr[-3000:])
    return result.stdout
