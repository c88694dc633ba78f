"""pytest hooks and fixtures of the fleet tests; helpers live in fleethelpers.py."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.fleet.fleethelpers import MODULE_DIR, run_terraform, terraform_binary

# The `fleet` marker (the multi-host test) is registered in setup.cfg.


@pytest.fixture(scope="session")
def terraform():
    """The terraform (or tofu) binary, >= 1.6 for `terraform test`; skips if there is none."""
    found = terraform_binary()
    if found is None:
        pytest.skip("no terraform or tofu binary on PATH: none installs from PyPI/npm/Debian here "
                    "(see docs/fleet.md); the python-hcl2 structural tests still run")
    path, version = found
    if version < (1, 6, 0):
        pytest.skip(f"{path} is {'.'.join(map(str, version))}; `terraform test` needs >= 1.6")
    return path


@pytest.fixture(scope="session")
def module_outputs(terraform, tmp_path_factory):
    """Apply terraform/modules/fleet_config (no provider, no resources) with given variables: outputs as a dict."""
    cache: dict[str, dict] = {}

    def apply(**variables) -> dict:
        key = json.dumps(variables, sort_keys=True)
        if key in cache:
            return cache[key]
        work = tmp_path_factory.mktemp("tfmodule")
        shutil.copytree(MODULE_DIR, work / "fleet_config", ignore=shutil.ignore_patterns(".terraform*", "tests"))
        (work / "main.tf").write_text(
            'variable "v" {\n  type = any\n}\n'
            'module "m" {\n  source = "./fleet_config"\n'
            + "".join(f"  {k} = var.v.{k}\n" for k in variables)
            + "}\n"
            'output "all" {\n  value = module.m\n}\n')
        (work / "terraform.tfvars.json").write_text(json.dumps({"v": variables}))
        for args in (("init", "-input=false"), ("apply", "-auto-approve", "-input=false")):
            proc = run_terraform(terraform, work, *args)
            assert proc.returncode == 0, f"terraform {args[0]} failed:\n{proc.stdout}\n{proc.stderr}"
        proc = run_terraform(terraform, work, "output", "-json", "all")
        assert proc.returncode == 0, proc.stderr
        cache[key] = json.loads(proc.stdout)
        return cache[key]

    return apply
