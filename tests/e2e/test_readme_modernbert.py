"""README's "Training a ModernBERT-style encoder": its commands, run as written (their own directory and port)."""

import json
import re
import shlex
import subprocess
import sys

import pytest

from bench.procs import free_ports
from tests.support.helpers import REPO

pytestmark = pytest.mark.e2e


def section_commands() -> list[str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## Training a ModernBERT-style encoder", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.S)
    assert blocks[0].strip().startswith("pip install"), "the section's install line comes first"
    return [line.strip() for line in blocks[1].splitlines() if line.strip()]


def install_commands() -> list[str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## Training a ModernBERT-style encoder", 1)[1].split("\n## ", 1)[0]
    block = re.findall(r"```bash\n(.*?)```", section, re.S)[0]
    return [part.strip() for line in block.splitlines() for part in line.split("&&") if part.strip()]


def run_section(tmp_path, python: str = sys.executable) -> tuple[dict, str]:
    """The section's commands as written (their own directory and port), ``python`` for every ``python``: the
    trainer's summary line and the loader's log."""
    port = free_ports(1)[0]
    commands = [c.replace("/tmp/mb/", f"{tmp_path}/").replace("5560", str(port)) for c in section_commands()]
    assert [c.split()[:3] for c in commands] == [
        ["python", "-m", "common.tokenization.training"], ["python", "-m", "ventilator"], ["python", "-m", "loader"],
        ["python", "examples/train_tiny_modernbert.py", "--loader"]]
    background = None
    try:
        for command in commands:
            argv = shlex.split(command.rstrip("&"))
            argv[0] = python
            if command.endswith("&"):
                background = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                              text=True)
                continue
            if argv[1] == "-m" and argv[2] == "ventilator":  # its sockets on free ports, as every test's
                vport, sink_port = free_ports(2)
                argv += ["--vport", str(vport), "--sink-port", str(sink_port), "--bind-host", "127.0.0.1",
                         "--state-dir", str(tmp_path / "state")]
            result = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300)
            assert result.returncode == 0, (command, result.stderr[-3000:])
    finally:
        if background is not None:
            background.terminate()
            server_log = background.communicate(timeout=20)[0]
    return json.loads(result.stdout.strip().splitlines()[-1]), server_log


def test_the_readme_path_trains_a_tiny_modernbert(tmp_path):
    pytest.importorskip("transformers", reason="transformers (with ModernBERT) is in the test extras")
    summary, server_log = run_section(tmp_path)
    assert summary["steps"] == 20
    assert summary["last_loss"] < summary["first_loss"] - 0.5, summary  # from ~ln(2000) = 7.6
    assert "<= 8192 tokens (flat)" in server_log
