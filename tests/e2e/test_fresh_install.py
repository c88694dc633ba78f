"""The install lines, in a fresh venv with nothing of the machine's site-packages and no stubs: torch's CPU build,
then the project from this checkout with the trainer and litdata extras; then the README's ModernBERT section runs
with that venv's python, and LitData imports.  Slow (a venv and the packages, from the registry and this machine's
torch file): minutes."""

import subprocess
import sys

import pytest

from tests.e2e.test_readme_modernbert import run_section
from tests.support.helpers import REPO

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(2400)]

#: torch's CPU build (a file on this machine's disk; elsewhere `--index-url .../whl/cpu`): a plain `torch` from the
#: registry is a CUDA build of several GB
TORCH = "torch==2.13.0"


def pip(venv, *args) -> None:
    result = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", *args],
                            capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, (args, result.stderr[-3000:])


def test_the_trainer_and_litdata_extras_install_and_run_the_readme_section(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    pip(venv, TORCH)
    # torch named again: litdata wants a torchvision, and the newest one pins the newest torch (a CUDA build): held
    # to the torch in place, pip takes the torchvision made for it
    pip(venv, "-e", f"{REPO}[trainer,litdata]", TORCH)
    python = str(venv / "bin" / "python")
    probe = subprocess.run([python, "-c", "import sys, torch, transformers, accelerate, litdata, numpy; "
                            "print(sys.prefix, torch.__version__, transformers.__version__, numpy.__version__)"],
                           capture_output=True, text=True, timeout=300)
    assert probe.returncode == 0, probe.stderr[-3000:]
    prefix, torch_version, transformers_version, _ = probe.stdout.split()
    assert prefix == str(venv) and torch_version.startswith("2.13.0") and transformers_version.startswith("5.")
    summary, server_log = run_section(tmp_path, python)
    assert summary["steps"] == 20 and summary["last_loss"] < summary["first_loss"] - 0.5, summary
    assert "<= 8192 tokens (flat)" in server_log
