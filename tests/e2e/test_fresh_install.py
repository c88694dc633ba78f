"""The README ModernBERT section's install line, run as written in a fresh venv with nothing of the machine's
site-packages and no stubs (torch's CPU build, then this checkout with the trainer extra); then the
section's commands with that venv's python.  Slow (a venv and the packages, from the registry
and this machine's torch file): minutes.  And the quick start from a fresh clone: `pip install .`, then its
commands in the clone, on the compiled kernels."""

import json
import os
import shlex
import subprocess
import sys
import sysconfig

import pytest

from tests.e2e.test_readme_modernbert import install_commands, run_section
from tests.support.helpers import REPO, free_ports

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


#: Run by the venv's python: (this project's installed top-level names, {another distribution: the names it shares}).
TOP_LEVEL_NAMES = """
import importlib.metadata as metadata, json
own = set((metadata.distribution("mlm-pipeline").read_text("top_level.txt") or "").split())
clashing = {}
for dist in metadata.distributions():
    if dist.metadata["Name"] in (None, "mlm-pipeline"):
        continue
    tops = {path.parts[0] for path in dist.files or [] if len(path.parts) > 1}
    tops |= {path.parts[0].removesuffix(".py") for path in dist.files or [] if len(path.parts) == 1}
    if tops & own:
        clashing[dist.metadata["Name"]] = sorted(tops & own)
print(json.dumps([sorted(own), clashing]))
"""


def test_the_quick_start_runs_the_compiled_kernels_from_a_fresh_clone(tmp_path):
    """README's quick start as a new user runs it: a fresh clone, `pip install .` (a venv over this machine's
    packages, which stand in for the registry's: --no-deps --no-build-isolation), then its commands in the clone,
    whose `common/` is first on `python -m`'s path and has no build.  Both workers run the compiled kernels: the
    installed build of the same source."""
    readme = (REPO / "README.md").read_text()
    block = readme.split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    lines = block.strip().splitlines()
    assert lines[0] == "pip install .", "the quick start's install line is what this test runs"
    clone, venv = tmp_path / "clone", tmp_path / "venv"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True, timeout=300)
    assert not list((clone / "common").glob(f"_kernels{sysconfig.get_config_var('EXT_SUFFIX')}")), "a fresh clone"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=300)
    install = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-deps",
                              "--no-build-isolation", "."], cwd=clone, capture_output=True, text=True, timeout=900)
    assert install.returncode == 0, install.stderr[-3000:]
    # The installed top-level names are the ones docs/architecture.md lists (bench/ and tests/ not shipped), and no
    # other distribution in the environment ships a module of those names.
    names = subprocess.run([str(venv / "bin" / "python"), "-c", TOP_LEVEL_NAMES], capture_output=True, text=True,
                           timeout=300)
    assert names.returncode == 0, names.stderr[-3000:]
    own, clashing = json.loads(names.stdout)
    assert set(own) == {"mlm_pipeline", "common", "ventilator", "worker", "sink", "loader", "report"}, own
    assert clashing == {}, clashing
    vport, sink_port = free_ports(2)
    script = "\n".join(lines[1:]).replace("/tmp/", f"{tmp_path}/").replace(
        "python -m ventilator", f"python -m ventilator --vport {vport} --sink-port {sink_port}")
    env = {**os.environ, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PYTHONPATH", None)
    env.pop("MLM_PIPELINE_NUMPY_KERNELS", None)
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=clone, env=env, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((tmp_path / "mlm-out" / "summary.json").read_text())
    assert summary["kernels"] == {"compiled": summary["tasks"]}, (summary["kernels"], result.stderr[-3000:])
    assert "not built here" not in result.stderr + result.stdout
