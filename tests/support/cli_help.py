"""The options a command's ``--help`` shows, as users read them: flags, metavar, help text, env var, default.

Parsed from the rendered ``python -m ROLE --help`` (not from click's objects), so a snapshot recorded on one
implementation of the command line holds another to the same text.  The snapshots (tests/data/cli_help/) are
changed on purpose, never by a test: ``python -m tests.support.cli_help --write`` records every role's, and the
diff is reviewed with the change that made it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SNAPSHOTS = REPO / "tests" / "data" / "cli_help"
_CHOICES = re.compile(r"^(?P<flags>.*?) \[(?P<choices>[^\]\s]+\|[^\]\s]+)\]$")


def help_text(module: str) -> str:
    done = subprocess.run([sys.executable, "-m", module, "--help"], cwd=REPO, capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "COLUMNS": "80"})
    assert done.returncode == 0, done.stderr
    return done.stdout


def options(text: str) -> dict[str, dict]:
    """Each option by its longest flag: ``head`` (flags and metavar; a choice list apart, as ``choices``)
    and ``text`` (help, env var and default, whitespace collapsed: the wrapping depends on the column)."""
    first_heading = re.search(r"^[A-Z][^\n]*:$", text, re.M)  # "Options:", or the first of --help's sections
    assert first_heading, "no options in the help text"
    entries: list[list[str]] = []
    for line in text[first_heading.end():].splitlines():
        if re.match(r"^  -", line):
            entries.append([line])
        elif entries and line.startswith(" ") and line.strip():  # not a section's heading
            entries[-1].append(line)
    found = {}
    for lines in entries:
        first = lines[0].strip()
        head, _, rest = first.partition("  ")  # flags and metavar, then two spaces before the help, if on one line
        body = " ".join([rest, *(line.strip() for line in lines[1:])]).strip()
        head = head.strip()
        choices: list[str] = []
        match = _CHOICES.match(head)
        if match:
            head, choices = match["flags"], sorted(match["choices"].split("|"))
        flag = max((part.strip(",") for part in head.split() if part.startswith("-")), key=len)
        text = re.sub(r"(?<=\w-) (?=\w)", "", re.sub(r"\s+", " ", body))  # "--holdout- seed": a wrap's break
        found[flag] = {"head": head, "choices": choices, "text": text}
    return found


def record(module: str) -> None:
    (SNAPSHOTS / f"{module}.json").write_text(json.dumps(options(help_text(module)), indent=1, sort_keys=True) + "\n")


def snapshot(module: str) -> dict[str, dict]:
    return json.loads((SNAPSHOTS / f"{module}.json").read_text())


#: The roles whose --help is held to a snapshot.
ROLES = ("ventilator", "sink", "worker", "loader", "report", "sink.verify", "common.tokenization.training")

if __name__ == "__main__":  # python -m tests.support.cli_help --write [ROLE ...]: record, on purpose
    if sys.argv[1:2] != ["--write"]:
        sys.exit("usage: python -m tests.support.cli_help --write [ROLE ...] (records tests/data/cli_help/)")
    for name in sys.argv[2:] or ROLES:
        record(name)
