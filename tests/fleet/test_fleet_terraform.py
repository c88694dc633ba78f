"""Terraform: `terraform test` on the provider-free module, `fmt -check`, variable
validation, and python-hcl2 structural checks of the root module (whose
hashicorp/aws provider cannot be installed here: no registry access).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
import yaml

from tests.fleet.fleethelpers import ANSIBLE_DIR, MODULE_DIR, TERRAFORM_DIR, run_terraform

hcl2 = pytest.importorskip("hcl2", reason="python-hcl2 is not installed (pip install -r tests/fleet/requirements.txt)")


# ---------------------------------------------------------------- HCL loading

def _unquote(value):
    if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value


def _normalise(node):
    """python-hcl2 >= 8 keeps quotes and adds __is_block__/__comments__: strip them."""
    if isinstance(node, dict):
        return {_unquote(k): _normalise(v) for k, v in node.items() if not (k.startswith("__") and k.endswith("__"))}
    if isinstance(node, list):
        return [_normalise(v) for v in node]
    return _unquote(node)


def load_hcl(path: Path) -> dict:
    with open(path) as f:
        return _normalise(hcl2.load(f))


def load_dir(directory: Path) -> dict[str, list]:
    """All .tf files of a directory merged: {'resource': [...], 'variable': [...], ...}."""
    merged: dict[str, list] = {}
    for path in sorted(directory.glob("*.tf")):
        for key, value in load_hcl(path).items():
            merged.setdefault(key, []).extend(value if isinstance(value, list) else [value])
    return merged


def blocks(merged: dict, kind: str) -> dict[str, dict]:
    """resource/data blocks as {'type.name': body}; variable/output/module as {'name': body}."""
    found = {}
    for entry in merged.get(kind, []):
        for first, rest in entry.items():
            if kind in ("resource", "data"):
                for name, body in rest.items():
                    found[f"{first}.{name}"] = body
            else:
                found[first] = rest
    return found


@pytest.fixture(scope="module")
def root():
    return load_dir(TERRAFORM_DIR)


@pytest.fixture(scope="module")
def resources(root):
    return blocks(root, "resource")


def _as_list(value):
    return value if isinstance(value, list) else [value]


def _text(path: Path) -> str:
    return path.read_text()


# ---------------------------------------------------------------- terraform binary: fmt, test, validate

def test_fmt_check(terraform):
    proc = run_terraform(terraform, TERRAFORM_DIR, "fmt", "-check", "-recursive", "-diff", ".")
    assert proc.returncode == 0, f"terraform fmt -check found unformatted files:\n{proc.stdout}\n{proc.stderr}"


def _scratch(tmp_path: Path, source: Path) -> Path:
    work = tmp_path / source.name
    shutil.copytree(source, work, ignore=shutil.ignore_patterns(".terraform*", "*.tfstate*"))
    return work


def test_module_terraform_test(terraform, tmp_path):
    """The provider-free module's own tests (tests/*.tftest.hcl), including the root wiring harness."""
    work = _scratch(tmp_path, MODULE_DIR)
    proc = run_terraform(terraform, work, "init", "-input=false")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = run_terraform(terraform, work, "validate")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = run_terraform(terraform, work, "test")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"Success! \d+ passed, 0 failed", proc.stdout), proc.stdout
    assert 'run "root_wiring_has_no_cycle"... pass' in proc.stdout


def test_root_variable_validations(terraform, tmp_path):
    """terraform/variables.tf is provider-free: its validation blocks run for real in a scratch module."""
    work = tmp_path / "variables"
    (work / "tests").mkdir(parents=True)
    shutil.copy(TERRAFORM_DIR / "variables.tf", work)
    shutil.copy(TERRAFORM_DIR / "tests" / "variables.tftest.hcl", work / "tests")
    proc = run_terraform(terraform, work, "init", "-input=false")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = run_terraform(terraform, work, "test")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"Success! \d+ passed, 0 failed", proc.stdout), proc.stdout


def test_committed_aws_ec2_inventory_is_what_terraform_renders(module_outputs):
    """ansible/inventory/aws_ec2.yml == the module's rendering with default region and fleet name."""
    out = module_outputs(fleet_name="mlm", number_of_worker=1, bucket_name="b")
    rendered = yaml.safe_load(out["aws_ec2_inventory"])
    committed = yaml.safe_load((ANSIBLE_DIR / "inventory" / "aws_ec2.yml").read_text())
    assert committed == rendered


def test_worker_unit_is_valid_systemd(module_outputs, tmp_path):
    """The worker unit in cloud-init user_data passes `systemd-analyze verify` (no unknown keys/values)."""
    analyze = shutil.which("systemd-analyze")
    if not analyze:
        pytest.skip("systemd-analyze is not installed")
    install = tmp_path / "opt"
    (install / "venv" / "bin").mkdir(parents=True)
    exe = install / "venv" / "bin" / "mlm-worker"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    out = module_outputs(fleet_name="mlm", number_of_worker=1, bucket_name="b", install_dir=str(install),
                         service_user="root", package_spec="mlm-pipeline==0.1.0", start_workers_on_boot=True,
                         ventilator_private_ip="10.42.0.10")
    cloud = yaml.safe_load(out["worker_user_data"])
    unit = next(f for f in cloud["write_files"] if f["path"].endswith("mlm-worker@.service"))
    units = tmp_path / "units"
    units.mkdir()
    (units / "mlm-worker@.service").write_text(unit["content"])
    proc = __import__("subprocess").run([analyze, "verify", str(units / "mlm-worker@1.service")],
                                        capture_output=True, text=True, timeout=60)
    problems = [line for line in (proc.stdout + proc.stderr).splitlines()
                if "mlm-worker" in line and re.search(r"ignoring|Unknown|Failed|not executable|Invalid", line)]
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------- structure (python-hcl2, no provider)

PIPELINE_PORT_VARS = ("var.ventilator_port", "var.sink_port")


def test_versions_pin_terraform_1_and_aws_5(root):
    terraform_block = root["terraform"][0]
    assert re.match(r">=\s*1\.", terraform_block["required_version"])
    aws = terraform_block["required_providers"][0]["aws"] if isinstance(terraform_block["required_providers"], list) \
        else terraform_block["required_providers"]["aws"]
    assert aws["source"] == "hashicorp/aws"
    assert ">= 5.0" in aws["version"]


def test_security_group_never_opens_pipeline_ports_to_the_world(resources):
    ingress = {k: v for k, v in resources.items() if k.startswith("aws_vpc_security_group_ingress_rule.")}
    assert ingress, "ingress rules are separate aws_vpc_security_group_ingress_rule resources"
    # No legacy inline/standalone rules that could sneak a CIDR in.
    assert not [k for k in resources if k.startswith("aws_security_group_rule.")]
    assert "ingress" not in resources["aws_security_group.fleet"]
    for name, rule in ingress.items():
        text = json.dumps(rule)
        assert "0.0.0.0/0" not in text and "::/0" not in text, f"{name} opens to the whole internet"
        ports = {str(rule.get("from_port")), str(rule.get("to_port"))}
        for_each = json.dumps(rule.get("for_each", ""))
        touches_pipeline = any(v in for_each or "${" + v + "}" in ports for v in PIPELINE_PORT_VARS)
        if touches_pipeline:
            assert rule.get("referenced_security_group_id") == "${aws_security_group.fleet.id}", \
                f"{name}: pipeline ports only from the fleet's own security group"
            assert not any(k in rule for k in ("cidr_ipv4", "cidr_ipv6", "prefix_list_id")), name
        elif name == "aws_vpc_security_group_ingress_rule.metrics":
            # Both metrics ports, from the monitoring CIDRs only (validated: never /0), none when off.
            assert "setproduct(var.monitoring_cidrs, [var.metrics_port, var.metrics_port + 1])" in for_each, for_each
            assert "var.metrics_port == 0 ? {}" in for_each, for_each
            assert ports == {"${each.value.port}"}
            assert "each.value.cidr" in rule["cidr_ipv4"] and "each.value.cidr" in rule["cidr_ipv6"]
        else:
            assert ports == {"22"}, f"{name}: the only CIDR-based ingress is ssh"
            assert rule.get("for_each") == "${toset(var.admin_cidrs)}", f"{name}: ssh only from admin_cidrs"
    pipeline = ingress["aws_vpc_security_group_ingress_rule.pipeline"]
    assert set(pipeline["for_each"].values()) == {"${var.ventilator_port}", "${var.sink_port}"}


def test_number_of_worker_is_the_groups_desired_size(resources):
    group = resources["aws_autoscaling_group.worker"]
    assert group["desired_capacity"] == "${var.number_of_worker}"
    # ... when the group is created: afterwards the policies own it, an apply during a job keeps their size
    assert "desired_capacity" in json.dumps(_as_list(group["lifecycle"])[0]["ignore_changes"])
    assert group["min_size"] == "${local.worker_min_size}" and group["max_size"] == "${local.worker_max_size}"
    assert not [k for k in resources if k.startswith("aws_instance.") and k != "aws_instance.ventilator"], \
        "workers come from the Auto Scaling group only"
    assert "count" not in resources["aws_instance.ventilator"] and "for_each" not in resources["aws_instance.ventilator"]
    assert resources["aws_instance.ventilator"]["tags"] == "${module.fleet.ventilator_tags}"
    locals_ = {k: v for entry in load_dir(TERRAFORM_DIR).get("locals", []) for k, v in entry.items()}
    # number_of_worker = 0: min = max = desired = 0 (autoscale is false then).
    assert "var.autoscale && var.number_of_worker > 0" in locals_["autoscale"]
    assert locals_["worker_max_size"].endswith(": var.number_of_worker}")


def test_instances_use_role_group_and_imdsv2(resources):
    ventilator, template = resources["aws_instance.ventilator"], resources["aws_launch_template.worker"]
    assert ventilator["iam_instance_profile"] == "${aws_iam_instance_profile.ventilator.name}"
    assert _as_list(template["iam_instance_profile"])[0]["name"] == "${aws_iam_instance_profile.worker.name}"
    assert ventilator["vpc_security_group_ids"] == ["${aws_security_group.fleet.id}"]
    assert _as_list(template["network_interfaces"])[0]["security_groups"] == ["${aws_security_group.fleet.id}"]
    for body in (ventilator, template):
        assert _as_list(body["metadata_options"])[0]["http_tokens"] == "required"
    assert _as_list(ventilator["root_block_device"])[0]["encrypted"] is True
    ebs = _as_list(_as_list(template["block_device_mappings"])[0]["ebs"])[0]
    assert ebs["encrypted"] is True and ebs["volume_size"] == "${var.volume_size}"
    assert ventilator["user_data"].startswith("${module.fleet.")
    assert template["user_data"] == "${base64encode(module.fleet.worker_user_data)}"


def test_workers_are_a_mixed_spot_group_with_a_drain_hook(resources):
    group = resources["aws_autoscaling_group.worker"]
    policy = _as_list(group["mixed_instances_policy"])[0]
    distribution = _as_list(policy["instances_distribution"])[0]
    assert distribution["on_demand_percentage_above_base_capacity"] == "${var.use_spot ? 0 : 100}"
    assert distribution["on_demand_base_capacity"] == "${var.on_demand_base_capacity}"
    assert distribution["spot_allocation_strategy"] == "${var.spot_allocation_strategy}"
    assert group["capacity_rebalance"] == "${var.capacity_rebalance}"
    assert "local.worker_types" in json.dumps(policy["launch_template"])
    hook = _as_list(group["initial_lifecycle_hook"])[0]
    assert hook["lifecycle_transition"] == "autoscaling:EC2_INSTANCE_TERMINATING"
    assert hook["name"] == "${local.drain_hook_name}" and hook["default_result"] == "CONTINUE"
    assert "instance_market_options" not in json.dumps(resources["aws_instance.ventilator"])
    variables = blocks(load_dir(TERRAFORM_DIR), "variable")
    assert variables["use_spot"]["default"] is True
    assert variables["spot_allocation_strategy"]["default"] == "price-capacity-optimized"  # AWS's advice
    assert variables["on_demand_base_capacity"]["default"] == 0
    assert len(variables["worker_instance_types"]["default"]) > 1


def test_scaling_policies_read_what_the_ventilator_publishes(resources):
    """The names the policies read are the ones ventilator/publishers/cloudwatch.py publishes."""
    from ventilator.publishers.cloudwatch import Backlog, metric_data
    published = {d["MetricName"] for d in metric_data(Backlog(1, 1, 1, 1))}
    tracking = json.dumps(resources["aws_autoscaling_policy.backlog"])
    assert "TargetTrackingScaling" in tracking and "backlog / instances" in tracking
    assert '"metric_name": "Backlog"' in tracking and "GroupInServiceInstances" in tracking
    assert resources["aws_cloudwatch_metric_alarm.job_ended"]["metric_name"] in published
    waiting = json.dumps(resources["aws_cloudwatch_metric_alarm.work_waiting"])
    assert '"metric_name": "Backlog"' in waiting and "Backlog" in published
    assert resources["aws_cloudwatch_metric_alarm.job_ended"]["alarm_actions"] == \
        ["${aws_autoscaling_policy.job_ended[0].arn}"]
    assert resources["aws_cloudwatch_metric_alarm.work_waiting"]["alarm_actions"] == \
        ["${aws_autoscaling_policy.wake[0].arn}"]


def test_root_module_autoscaling_terraform_test(terraform, tmp_path):
    """terraform/tests/autoscaling.tftest.hcl against a mocked hashicorp/aws provider. The provider's
    schema is needed: from the registry, or offline from a plugin directory (MLM_TF_PLUGIN_DIR, or
    /opt/tf-plugins where this machine has one)."""
    plugin_dir = os.environ.get("MLM_TF_PLUGIN_DIR") or "/opt/tf-plugins"
    work = _scratch(tmp_path, TERRAFORM_DIR)
    args = ["-input=false"] + ([f"-plugin-dir={plugin_dir}"] if Path(plugin_dir).is_dir() else [])
    proc = run_terraform(terraform, work, "init", *args)
    if proc.returncode != 0:
        pytest.skip(f"the hashicorp/aws provider cannot be installed here (no registry, no plugin directory "
                    f"{plugin_dir}): {proc.stderr.strip().splitlines()[-1:]}")
    proc = run_terraform(terraform, work, "validate")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = run_terraform(terraform, work, "test", "-filter=tests/autoscaling.tftest.hcl")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"Success! \d+ passed, 0 failed", proc.stdout), proc.stdout
    for run in ("group_of_spot_workers", "drain_hook_on_scale_in", "scaling_policies_wired_to_the_backlog",
                "no_public_ports", "zero_workers_is_no_worker", "apply_during_a_job_keeps_the_groups_size",
                "autoscale_without_a_package_source_is_refused",
                "autoscale_with_workers_not_started_on_boot_is_refused", "fixed_group_needs_no_package_source",
                "instance_types_of_other_vcpus_are_refused", "instance_types_of_another_architecture_are_refused",
                "more_zones_than_the_vpc_holds_are_refused"):
        assert f'run "{run}"... pass' in proc.stdout


def test_no_access_keys_anywhere(root, resources):
    assert not [k for k in resources if k.startswith(("aws_iam_access_key.", "aws_iam_user."))]
    for provider in root.get("provider", []):
        for body in provider.values():
            assert not {"access_key", "secret_key", "token", "shared_credentials_files"} & set(body)
    for path in TERRAFORM_DIR.rglob("*"):
        if path.is_file() and ".terraform" not in path.parts:
            text = path.read_text(errors="replace")
            assert not re.search(r"AKIA[0-9A-Z]{16}", text), path
            assert "aws_secret_access_key" not in text.lower(), path


def test_instance_role_writes_only_the_prefix(resources):
    assume = json.dumps(blocks(load_dir(TERRAFORM_DIR), "data")["aws_iam_policy_document.assume_ec2"])
    assert "ec2.amazonaws.com" in assume and "sts:AssumeRole" in assume
    assert resources["aws_iam_role_policy.shards"]["policy"] == "${module.fleet.s3_policy_json}"
    assert set(resources["aws_iam_role_policy.shards"]["for_each"].values()) == {
        "${aws_iam_role.ventilator.id}", "${aws_iam_role.worker.id}"}
    for side in ("ventilator", "worker"):
        assert resources[f"aws_iam_instance_profile.{side}"]["role"] == f"${{aws_iam_role.{side}.name}}"
    assert resources["aws_iam_role_policy.backlog"]["role"] == "${aws_iam_role.ventilator.id}"
    assert resources["aws_iam_role_policy.drain"]["role"] == "${aws_iam_role.worker.id}"
    assert "PutMetricData" not in json.dumps(resources["aws_iam_role_policy.drain"])
    assert "autoscaling:" not in json.dumps(resources["aws_iam_role_policy.backlog"])
    policies = [k for k in resources if k.startswith(("aws_iam_role_policy_attachment.", "aws_iam_policy."))]
    assert not policies, f"no managed policies (e.g. AmazonS3FullAccess): {policies}"


def test_optional_bucket_blocks_public_access(resources):
    assert resources["aws_s3_bucket.shards"]["count"] == "${var.create_bucket ? 1 : 0}"
    block = resources["aws_s3_bucket_public_access_block.shards"]
    assert block["count"] == "${var.create_bucket ? 1 : 0}"
    for key in ("block_public_acls", "block_public_policy", "ignore_public_acls", "restrict_public_buckets"):
        assert block[key] is True, key
    assert not [k for k in resources if k.startswith(("aws_s3_bucket_policy.", "aws_s3_bucket_acl."))]


def test_optional_bucket_aborts_incomplete_multipart_uploads(resources):
    lifecycle = resources["aws_s3_bucket_lifecycle_configuration.shards"]
    assert lifecycle["count"] == "${var.create_bucket ? 1 : 0}"
    rule = lifecycle["rule"][0] if isinstance(lifecycle["rule"], list) else lifecycle["rule"]
    abort = rule["abort_incomplete_multipart_upload"]
    abort = abort[0] if isinstance(abort, list) else abort
    assert rule["status"] == "Enabled" and abort["days_after_initiation"] >= 1


def test_ami_from_data_source_not_hard_coded(root):
    ami = blocks(root, "data")["aws_ami.ubuntu"]
    assert ami["owners"] == ["099720109477"]  # Canonical
    assert ami["most_recent"] is True
    names = [f for f in _as_list(ami["filter"]) if f["name"] == "name"][0]["values"][0]
    assert "ubuntu" in names and "${var.ubuntu_release}" in names
    for path in TERRAFORM_DIR.rglob("*.tf"):
        assert not re.search(r"\bami-[0-9a-f]{8,17}\b", path.read_text()), f"hard-coded AMI id in {path}"


def test_tags_the_inventory_uses(resources):
    """aws_ec2.yml filters on Project/Fleet and groups on Role: the module sets exactly those."""
    source = (MODULE_DIR / "main.tf").read_text()
    assert re.search(r"\bProject\s*=\s*var\.project\b", source)
    assert re.search(r"\bFleet\s*=\s*var\.fleet_name\b", source)
    assert re.search(r'\bRole\s*=\s*"ventilator"', source) and re.search(r'\bRole\s*=\s*"worker"', source)
    assert blocks(load_dir(MODULE_DIR), "variable")["project"]["default"] == "mlm-pipeline"
    inventory = yaml.safe_load((ANSIBLE_DIR / "inventory" / "aws_ec2.yml").read_text())
    assert inventory["filters"]["tag:Project"] == "mlm-pipeline"
    assert set(inventory["groups"]) == {"ventilator", "worker"}


def test_variables_documented_validated_and_provider_free(root):
    variables = blocks(root, "variable")
    required = {"region", "availability_zone", "subnet_id", "number_of_worker", "worker_instance_type",
                "ventilator_instance_type", "volume_size", "key_name", "admin_cidrs", "bucket_name",
                "bucket_prefix", "worker_processes", "use_spot"}
    assert required <= set(variables), required - set(variables)
    for name, body in variables.items():
        assert body.get("description"), f"variable {name} has no description"
        assert "type" in body, f"variable {name} has no type"
    must_validate = {"region", "number_of_worker", "worker_instance_type", "ventilator_instance_type", "volume_size",
                     "admin_cidrs", "bucket_name", "bucket_prefix", "worker_processes", "fleet_name",
                     "ventilator_port", "sink_port", "subnet_id", "availability_zones", "worker_subnet_ids",
                     "job_silence_minutes"}
    for name in must_validate:
        validations = _as_list(variables[name].get("validation", []))
        assert validations, f"variable {name} has no validation"
        for v in validations:
            assert len(v["error_message"]) > 20 and v["error_message"].rstrip('"').endswith((".", ")")), name
    only_variables = load_hcl(TERRAFORM_DIR / "variables.tf")
    assert set(only_variables) == {"variable"}, "variables.tf must hold variable blocks only (tests copy it alone)"
    assert "admin_cidrs" in variables and "default" not in variables["admin_cidrs"], "ssh access must be chosen"


def test_outputs(root):
    outputs = blocks(root, "output")
    for name in ("ventilator_public_ip", "ventilator_private_ip", "worker_public_ips", "worker_private_ips",
                 "commands", "static_inventory", "output_uri"):
        assert name in outputs, name
        assert outputs[name].get("description"), name


# ---------------------------------------------------------------- references (what `terraform validate` would catch)

REF = re.compile(r"\b(var|local|module|data)\.([A-Za-z_][A-Za-z0-9_-]*)(?:\.([A-Za-z_][A-Za-z0-9_-]*))?")
RESOURCE_REF = re.compile(r"(?<![\w.])(aws_[a-z0-9_]+)\.([A-Za-z_][A-Za-z0-9_-]*)")


def _expressions(node, out: list[str]):
    if isinstance(node, dict):
        for v in node.values():
            _expressions(v, out)
    elif isinstance(node, list):
        for v in node:
            _expressions(v, out)
    elif isinstance(node, str):
        out.append(node)
    return out


def _locals(merged: dict) -> set[str]:
    return {k for entry in merged.get("locals", []) for k in entry}


@pytest.mark.parametrize("directory", [TERRAFORM_DIR, MODULE_DIR], ids=["root", "fleet_config"])
def test_every_reference_is_declared(directory):
    merged = load_dir(directory)
    variables = set(blocks(merged, "variable"))
    local_names = _locals(merged)
    data = set(blocks(merged, "data"))
    resources = set(blocks(merged, "resource"))
    modules = blocks(merged, "module")
    exprs = [e for e in _expressions({k: v for k, v in merged.items() if k != "variable"}, []) if "${" in e]
    # validation conditions live inside variable blocks
    exprs += [e for e in _expressions(merged.get("variable", []), []) if "${" in e]
    used_vars = set()
    for expr in exprs:
        for kind, name, attr in REF.findall(expr):
            if kind == "var":
                used_vars.add(name)
                assert name in variables, f"var.{name} is not declared ({expr})"
            elif kind == "local":
                assert name in local_names, f"local.{name} is not declared ({expr})"
            elif kind == "data":
                assert f"{name}.{attr}" in data, f"data.{name}.{attr} is not declared ({expr})"
            elif kind == "module":
                assert name in modules, f"module.{name} is not declared ({expr})"
                outputs = blocks(load_dir(directory / modules[name]["source"]), "output")
                assert attr in outputs, f"module.{name}.{attr} is not an output of {modules[name]['source']}"
        for rtype, rname in RESOURCE_REF.findall(expr):
            if expr[expr.find(rtype) - 5:expr.find(rtype)].endswith("data."):
                continue
            assert f"{rtype}.{rname}" in resources, f"{rtype}.{rname} is not declared ({expr})"
    unused = variables - used_vars
    assert not unused, f"declared but unused variables: {sorted(unused)}"


def test_module_call_matches_module_variables():
    merged = load_dir(TERRAFORM_DIR)
    call = blocks(merged, "module")["fleet"]
    module_vars = blocks(load_dir(TERRAFORM_DIR / call["source"]), "variable")
    passed = set(call) - {"source", "providers", "depends_on", "count", "for_each"}
    assert passed <= set(module_vars), f"unknown module inputs: {passed - set(module_vars)}"
    missing = {n for n, body in module_vars.items() if "default" not in body} - passed
    assert not missing, f"required module inputs not passed: {missing}"


def test_no_state_or_secrets_committed():
    for path in TERRAFORM_DIR.rglob("*"):
        if ".terraform" in path.parts:
            continue
        assert not path.name.endswith((".tfstate", ".tfstate.backup")), path
        if path.suffix == ".tfvars":
            pytest.fail(f"real tfvars file in the tree: {path} (only *.tfvars.example)")
    gitignore = (TERRAFORM_DIR / ".gitignore").read_text()
    assert "*.tfstate" in gitignore and "*.tfvars" in gitignore


def test_static_example_matches_terraforms_static_inventory(module_outputs):
    out = module_outputs(fleet_name="mlm", number_of_worker=2, bucket_name="my-bert-shards", bucket_prefix="wiki/run1",
                         worker_processes=8, ventilator_private_ip="10.42.0.10", ventilator_public_ip="198.51.100.10",
                         workers=[{"private_ip": "10.42.0.20", "public_ip": "198.51.100.20"},
                                  {"private_ip": "10.42.0.21", "public_ip": "198.51.100.21"}])
    rendered = yaml.safe_load(out["inventory"])
    example = yaml.safe_load((ANSIBLE_DIR / "inventory" / "static.example.yml").read_text())
    assert rendered == example
