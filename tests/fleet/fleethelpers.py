"""Helpers of the fleet tests (Terraform, Ansible), importable by name from tests/fleet."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.helpers import REPO

TERRAFORM_DIR = REPO / "terraform"
MODULE_DIR = TERRAFORM_DIR / "modules" / "fleet_config"
ANSIBLE_DIR = REPO / "ansible"

# ---------------------------------------------------------------- Terraform

def terraform_binary() -> tuple[str, tuple[int, int, int]] | None:
    """(path, version) of terraform, or of OpenTofu (same commands), if one is on PATH."""
    for name in ("terraform", "tofu"):
        path = shutil.which(name)
        if not path:
            continue
        proc = subprocess.run([path, "version"], capture_output=True, text=True, env=terraform_env(),
                              timeout=60)
        match = re.search(r"v(\d+)\.(\d+)\.(\d+)", proc.stdout)
        if match:
            return path, tuple(int(x) for x in match.groups())
    return None


def terraform_env() -> dict[str, str]:
    """No checkpoint (version check) traffic, no user CLI config, no colour."""
    env = dict(os.environ)
    env.update({
        "CHECKPOINT_DISABLE": "1",
        "TF_IN_AUTOMATION": "1",
        "TF_INPUT": "0",
        "TF_CLI_CONFIG_FILE": os.devnull,
        "NO_COLOR": "1",
    })
    env.pop("TF_DATA_DIR", None)
    return env


def run_terraform(binary: str, cwd: Path, command: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([binary, command, "-no-color", *args], cwd=cwd, capture_output=True, text=True,
                          env=terraform_env(), timeout=timeout)


# ---------------------------------------------------------------- Ansible

def ansible_env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "ANSIBLE_CONFIG": str(ANSIBLE_DIR / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_LOCAL_TEMP": str(tmp / "ansible-local"),
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(tmp / "cp"),
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
        "ANSIBLE_DEPRECATION_WARNINGS": "0",
        # Never ask AWS's instance metadata service for credentials.
        "AWS_EC2_METADATA_DISABLED": "true",
    })
    return env


def ansible_tool(name: str) -> str:
    """ansible-playbook & co next to this interpreter, else on PATH; skip if absent."""
    here = Path(sys.executable).parent / name
    if here.exists():
        return str(here)
    found = shutil.which(name)
    if not found:
        pytest.skip(f"{name} is not installed (pip install -r tests/fleet/requirements.txt)")
    return found


RECAP = re.compile(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def recap(output: str) -> dict[str, dict[str, int]]:
    """PLAY RECAP counters per host (summed over the plays of one run)."""
    totals: dict[str, dict[str, int]] = {}
    for host, ok, changed, unreachable, failed in RECAP.findall(output):
        entry = totals.setdefault(host, {"ok": 0, "changed": 0, "unreachable": 0, "failed": 0})
        for key, value in (("ok", ok), ("changed", changed), ("unreachable", unreachable), ("failed", failed)):
            entry[key] = max(entry[key], int(value))
    return totals


def apply_startup_module(binary: str, work: Path, variables: dict) -> dict:
    """terraform/gcp/modules/startup applied in ``work`` with ``variables`` (a copy, no state kept): its outputs."""
    shutil.copytree(TERRAFORM_DIR / "gcp" / "modules" / "startup", work / "startup",
                    ignore=shutil.ignore_patterns(".terraform*", "tests"))
    (work / "main.tf").write_text('variable "v" {\n  type = any\n}\nmodule "m" {\n  source = "./startup"\n'
                                  + "".join(f"  {k} = var.v.{k}\n" for k in variables)
                                  + '}\noutput "all" {\n  value = module.m\n}\n')
    (work / "terraform.tfvars.json").write_text(json.dumps({"v": variables}))
    for args in (("init", "-input=false"), ("apply", "-auto-approve", "-input=false")):
        proc = run_terraform(binary, work, *args)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = run_terraform(binary, work, "output", "-json", "all")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)
