"""The README ModernBERT section's install line, run as written in a fresh venv with nothing of the machine's
site-packages and no stubs (torch's CPU build, then this checkout with the trainer extra); then the
section's commands with that venv's python.  Slow (a venv and the packages, from the registry
and this machine's torch file): minutes."""

import shlex
import subprocess
import sys

import pytest

from tests.e2e.test_readme_modernbert import install_commands, run_section
from tests.support.helpers import REPO

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(2400)]


def pip(venv, *args) -> None:
    result = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", *args], cwd=REPO,
                            capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, (args, result.stderr[-3000:])


def test_the_trainer_extra_installs_and_runs_the_readme_section(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    # as README says: torch's CPU build (a file on this machine's disk), then the extra with torch named again
    for command in install_commands():
        argv = shlex.split(command)
        assert argv[:2] == ["pip", "install"], command
        pip(venv, *argv[2:])
    python = str(venv / "bin" / "python")
    probe = subprocess.run([python, "-c", "import sys, torch, transformers, accelerate, numpy; "
                            "print(sys.prefix, torch.__version__, transformers.__version__, numpy.__version__)"],
                           capture_output=True, text=True, timeout=300)
    assert probe.returncode == 0, probe.stderr[-3000:]
    prefix, torch_version, transformers_version, _ = probe.stdout.split()
    assert prefix == str(venv) and torch_version.startswith("2.13.0") and transformers_version.startswith("5.")
    summary, server_log = run_section(tmp_path, python)
    assert summary["steps"] == 20 and summary["last_loss"] < summary["first_loss"] - 0.5, summary
    assert "<= 8192 tokens (flat)" in server_log
