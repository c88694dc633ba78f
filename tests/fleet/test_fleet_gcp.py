"""terraform/gcp offline: `fmt -check`, `terraform test` of its provider-free startup module, the wiring read
with python-hcl2 (Spot VMs of a regional group from a template whose metadata runs the module's scripts, no
external address, the pipeline's ports only inside the network, narrow scopes, IAM bound to the one prefix,
the autoscaler's metric), the command lines the module renders parsed by the ventilator's and the worker's
own option parsers (so the metric the autoscaler reads is the one the publisher writes), and the gcp_compute
inventory against the plugin's own documented options.

`terraform validate` of terraform/gcp needs the hashicorp/google provider, which cannot be installed here (no
registry): those checks are the python-hcl2 ones below (docs/fleet.md says so).
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys

import pytest
import yaml

from tests.fleet.fleethelpers import (
    ANSIBLE_DIR,
    TERRAFORM_DIR,
    apply_startup_module,
    run_terraform,
    terraform_binary,
)
from tests.fleet.test_fleet_terraform import blocks, load_dir
from tests.support.helpers import REPO

hcl2 = pytest.importorskip("hcl2", reason="python-hcl2 is not installed (pip install -r tests/fleet/requirements.txt)")

GCP_DIR = TERRAFORM_DIR / "gcp"
STARTUP_DIR = GCP_DIR / "modules" / "startup"


@pytest.fixture(scope="module")
def root():
    return load_dir(GCP_DIR)


@pytest.fixture(scope="module")
def resources(root):
    return blocks(root, "resource")


def _one(value):
    return value[0] if isinstance(value, list) else value


def _tf():
    found = terraform_binary()
    if found is None:
        pytest.skip("no terraform or tofu binary on PATH")
    return found[0]


def test_fmt():
    proc = run_terraform(_tf(), GCP_DIR, "fmt", "-check", "-recursive", "-diff")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_startup_module_terraform_test(tmp_path):
    work = tmp_path / "startup"
    shutil.copytree(STARTUP_DIR, work)
    for args in (("init", "-backend=false", "-input=false"), ("test",)):
        proc = run_terraform(_tf(), work, *args)
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_validate_needs_the_google_provider():
    pytest.skip("terraform validate of terraform/gcp needs the hashicorp/google provider from the Terraform "
                "registry, which this machine cannot reach; test_every_attribute_is_in_the_providers_schema checks "
                "the attributes against the provider's documented schema instead")


#: Schemas of the google provider at both ends of terraform/gcp's version range, made from the provider's own
#: documentation at each release tag by scripts/google-provider-schema.py (the file says which commit).
PROVIDER_SCHEMAS = sorted((REPO / "tests" / "data").glob("google-provider-schema-*.json"))
#: Terraform's own arguments of every resource, not the provider's.
META_ARGUMENTS = {"count", "for_each", "depends_on", "provider", "lifecycle", "provisioner", "connection"}


def _schema_problems(body: dict, block: dict, where: str) -> list[str]:
    """Every argument and nested block of ``body`` that ``block`` (a providers-schema block) does not have."""
    problems = []
    for key, value in body.items():
        if key in META_ARGUMENTS or key.startswith("__"):
            continue
        if key in block["block_types"]:
            for item in value if isinstance(value, list) else [value]:
                if isinstance(item, dict):
                    problems += _schema_problems(item, block["block_types"][key]["block"], f"{where}.{key}")
        elif key not in block["attributes"]:
            problems.append(f"{where}.{key}")
    return problems


def _provider_schema_problems(root: dict, schema: dict) -> list[str]:
    google = schema["provider_schemas"]["registry.terraform.io/hashicorp/google"]
    kinds = {"resource": google["resource_schemas"], "data": google["data_source_schemas"]}
    problems = []
    for kind, schemas in kinds.items():
        for address, body in blocks(root, kind).items():
            kind_type = address.split(".")[0]
            if kind_type not in schemas:
                problems.append(f"{kind} {kind_type}: not in the schema file")
                continue
            problems += _schema_problems(body, schemas[kind_type]["block"], f"{kind}.{address}")
    # Attributes read from other resources (google_service_account.worker.email, ....id, data....names).
    import re

    for data, kind_type, _name, attribute in set(re.findall(r"\b(data\.)?(google_[a-z0-9_]+)\.([a-z0-9_-]+)\.([a-z0-9_]+)",
                                                           json.dumps(root))):
        found = kinds["data" if data else "resource"].get(kind_type)
        if found is None or (attribute not in found["block"]["attributes"]
                             and attribute not in found["block"]["block_types"]):
            problems.append(f"{data}{kind_type}.*.{attribute}: read, but not in the schema")
    return problems


@pytest.mark.parametrize("schema_path", PROVIDER_SCHEMAS, ids=lambda p: p.stem)
def test_every_attribute_is_in_the_providers_schema(root, schema_path):
    """What `terraform validate` would check of the names: every resource and data source terraform/gcp declares,
    every argument and nested block in it, and every attribute read from one, exists in the google provider's
    schema at each end of the version range versions.tf admits."""
    schema = json.loads(schema_path.read_text())
    version = schema["source"]["tag"].lstrip("v")
    constraint = load_dir(GCP_DIR)["terraform"][0]["required_providers"][0]["google"]["version"]
    assert f">= {version}" in constraint or f"< {int(version.split('.')[0]) + 1}.0.0" in constraint, \
        f"{schema_path.name} describes {version}, not an end of {constraint}"
    assert not _provider_schema_problems(root, schema)


def test_the_schema_check_finds_what_the_provider_lacks(root):
    """The check above fails on a misspelt argument, an argument in the wrong block, a beta-only argument
    (google-beta's, not google's) and an attribute no resource has."""
    import copy

    schema = json.loads(PROVIDER_SCHEMAS[0].read_text())
    broken = copy.deepcopy(root)
    autoscaler = blocks(broken, "resource")["google_compute_region_autoscaler.workers"]
    _one(_one(autoscaler["autoscaling_policy"])["metric"])["utilization_target_typo"] = 1
    group = blocks(broken, "resource")["google_compute_region_instance_group_manager.workers"]
    _one(group["update_policy"])["single_instance_assignment"] = 1
    template = blocks(broken, "resource")["google_compute_instance_template.worker"]
    template["partner_metadata"] = {}  # google-beta only at 6.0.0
    broken["output"].append({"x": {"value": "${google_service_account.worker.no_such_attribute}"}})
    assert sorted(_provider_schema_problems(broken, schema)) == [
        "google_service_account.*.no_such_attribute: read, but not in the schema",
        "resource.google_compute_instance_template.worker.partner_metadata",
        "resource.google_compute_region_autoscaler.workers.autoscaling_policy.metric.utilization_target_typo",
        "resource.google_compute_region_instance_group_manager.workers.update_policy.single_instance_assignment",
    ]


def test_the_autoscaled_regional_group_keeps_proactive_redistribution(resources):
    """Compute Engine allows instance_redistribution_type NONE only for a group no autoscaler scales (the API's
    InstanceGroupManagerUpdatePolicy.instanceRedistributionType, docs/fleet.md): this group has an autoscaler."""
    group = resources["google_compute_region_instance_group_manager.workers"]
    autoscaled = [body for body in resources.values()
                  if body.get("target") == "${google_compute_region_instance_group_manager.workers.id}"]
    assert autoscaled, "no autoscaler targets the group"
    assert _one(group["update_policy"])["instance_redistribution_type"] == "PROACTIVE"
    assert group.get("distribution_policy_target_shape", "EVEN") == "EVEN", "proactive redistribution keeps EVEN"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    """The startup module applied with a seed-000 job's variables: its outputs."""
    work = tmp_path_factory.mktemp("gcp-startup")
    variables = {"fleet_name": "zh-electra", "project": "my-project", "package_spec": "mlm-pipeline[gcs]==0.1.0",
                 "bucket_name": "my-corpora", "bucket_prefix": "zhwiki/run1", "ventilator_address": "10.20.0.2",
                 "vocab_file": "gs://my-corpora/zhwiki/run1/vocab.txt",
                 "job_args": ["--objective", "electra", "--word-segmenter", "jieba", "--word-starts"]}
    return apply_startup_module(_tf(), work, variables)


def test_the_autoscaler_reads_what_the_publisher_writes(rendered, resources):
    """The ventilator's command line, parsed by the ventilator itself, publishes <prefix>/backlog to the
    project; the root module's autoscaler reads the module's metric_type; they are the same name."""
    from ventilator.run_config import parse

    argv = shlex.split(rendered["ventilator_command"])[1:]
    argv = [a if a != "/opt/mlm-pipeline/vocab.txt" else "vocab.txt" for a in argv]
    config = parse(argv)
    assert config.metrics.backlog_publisher == "cloud-monitoring"
    published = config.metrics.publisher_params  # the chosen publisher's own (ventilator/publishers/)
    assert published["project"] == "my-project"
    assert f"{published['prefix']}/backlog" == rendered["metric_type"]
    assert config.input.data == "gs://my-corpora/zhwiki/run1/corpus" and config.job.output == rendered["output_uri"]
    autoscaler = resources["google_compute_region_autoscaler.workers"]
    policy = _one(autoscaler["autoscaling_policy"])
    metric = _one(policy["metric"])
    assert metric["name"] == "${module.startup.metric_type}"
    assert metric["filter"] == 'resource.type = \\"global\\"' or metric["filter"] == 'resource.type = "global"'
    assert "single_instance_assignment" in metric, "a per-group metric: the backlog divided among the VMs"
    assert autoscaler["target"] == "${google_compute_region_instance_group_manager.workers.id}"


def test_the_worker_command_is_the_workers_own(rendered):
    """The rendered worker command, parsed by the worker's own options: the GCE watch, the ventilator's address."""
    import click
    from click.testing import CliRunner

    from common.job.cli_settings import add_options, build
    from worker.settings import WorkerSettings

    argv = shlex.split(rendered["worker_command"].replace("$$(nproc)", "2"))[1:]
    seen: list[WorkerSettings] = []

    @click.command()
    @add_options(WorkerSettings)
    def worker(**values):
        seen.append(build(WorkerSettings, values))

    result = CliRunner().invoke(worker, argv)
    assert result.exit_code == 0, result.output
    settings = seen[0]
    assert settings.spot_watch and settings.spot_watch_cloud == "gce" and settings.processes == 2
    assert settings.ventilator == "10.20.0.2:5557"
    assert "--signal=SIGUSR1 mlm-worker.service" in rendered["worker_shutdown_script"]


def test_workers_are_spot_vms_of_a_regional_group_from_the_template(resources):
    template = resources["google_compute_instance_template.worker"]
    scheduling = _one(template["scheduling"])
    assert scheduling["provisioning_model"] == "SPOT" and scheduling["instance_termination_action"] == "DELETE"
    metadata = _one(template["metadata"])
    assert metadata["startup-script"] == "${module.startup.worker_startup_script}"
    assert metadata["shutdown-script"] == "${module.startup.worker_shutdown_script}"
    group = resources["google_compute_region_instance_group_manager.workers"]
    assert group["distribution_policy_zones"] == "${local.zones}"
    assert _one(group["version"])["instance_template"] == "${google_compute_instance_template.worker.id}"
    assert "target_size" in str(group["lifecycle"]), "the autoscaler owns the size"


def test_no_external_address_and_no_public_port(resources):
    for name in ("google_compute_instance_template.worker", "google_compute_instance.ventilator"):
        interface = _one(resources[name]["network_interface"])
        assert "access_config" not in interface, f"{name} has an external address"
    for name, body in resources.items():
        if name.startswith("google_compute_firewall."):
            ranges = body["source_ranges"]
            assert "0.0.0.0/0" not in ranges, name
    pipeline = resources["google_compute_firewall.pipeline"]
    assert pipeline["source_ranges"] == ["${var.network_cidr}"]
    assert "google_compute_router_nat.fleet" in resources, "Cloud NAT: PyPI without external addresses"


def test_narrow_scopes_and_a_prefix_bound_service_account(resources, root):
    locals_ = {k: v for entry in root["locals"] for k, v in entry.items()}
    scopes = locals_["worker_scopes"]
    assert scopes == ["https://www.googleapis.com/auth/devstorage.read_write",
                      "https://www.googleapis.com/auth/logging.write"]
    assert "cloud-platform" not in json.dumps(resources)
    assert _one(resources["google_compute_instance_template.worker"]["service_account"])["scopes"] == \
        "${local.worker_scopes}"
    assert _one(resources["google_compute_instance.ventilator"]["service_account"])["scopes"] == \
        "${local.ventilator_scopes}"
    assert "monitoring.write" in str(locals_["ventilator_scopes"])
    condition = _one(resources["google_storage_bucket_iam_member.objects"]["condition"])
    assert "${local.objects}" in condition["expression"], "the objects' grant is not bound to the prefix"
    assert locals_["objects"] == "projects/_/buckets/${var.bucket_name}/objects/${local.prefix}/"


def gcp_compute_documentation() -> str:
    """The google.cloud.gcp_compute inventory plugin's DOCUMENTATION, imported in a process of its own: importing
    Ansible patches ``sys.intern`` for the whole process (a callable object, not a function), and torch's dynamo,
    imported later by another test in the same xdist worker, then fails to load."""
    code = "from ansible_collections.google.cloud.plugins.inventory import gcp_compute; print(gcp_compute.DOCUMENTATION)"
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert found.returncode == 0, found.stderr[-3000:]
    return found.stdout


def test_gcp_compute_inventory_uses_the_plugins_options_and_the_modules_labels(rendered):
    inventory = yaml.safe_load((ANSIBLE_DIR / "inventory" / "gcp_compute.yml").read_text())
    documented = set(yaml.safe_load(gcp_compute_documentation())["options"])
    constructed = {"compose", "groups", "keyed_groups", "strict", "leading_separator", "use_extra_vars"}
    assert inventory["plugin"] == "google.cloud.gcp_compute"
    unknown = set(inventory) - documented - constructed - {"plugin"}
    assert not unknown, f"options the plugin does not take: {unknown}"
    labels = {"project": rendered["worker_labels"]["project"], "role": rendered["worker_labels"]["role"]}
    assert f"labels.project = {labels['project']}" in inventory["filters"]
    assert inventory["groups"]["worker"] == f"labels.role == '{labels['role']}'"
    assert inventory["groups"]["ventilator"] == f"labels.role == '{rendered['ventilator_labels']['role']}'"


def _grants(condition: str, variables: dict[str, str], name: str, list_prefix: str = "") -> bool:
    """Evaluates a Cloud Storage IAM condition of the shapes this module writes (CEL: ``resource.name``'s
    ``startsWith`` and ``==``, the ``objectListPrefix`` API attribute, ``||``, ``&&``) for one request."""
    import re

    expression = condition.replace('\\"', '"')
    for key, value in variables.items():
        expression = expression.replace("${" + key + "}", value)
    assert "${" not in expression, expression
    expression = expression.replace('api.getAttribute("storage.googleapis.com/objectListPrefix", "")', "list_prefix")
    expression = expression.replace("api.getAttribute('storage.googleapis.com/objectListPrefix', '')", "list_prefix")
    expression = expression.replace("resource.name", "name").replace(".startsWith(", ".startswith(")
    expression = expression.replace("||", " or ").replace("&&", " and ")
    leftover = set(re.findall(r"\b[a-zA-Z_]\w*\b", re.sub(r'"[^"]*"', '""', expression)))
    assert leftover <= {"name", "list_prefix", "startswith", "or", "and"}, f"not understood: {leftover}"
    return bool(eval(expression, {"__builtins__": {}}, {"name": name, "list_prefix": list_prefix}))


def test_the_service_accounts_reach_the_jobs_prefix_only(resources, root):
    """Every bucket grant, evaluated for requests: objects below the prefix and listings of it are granted;
    an object elsewhere, and a listing of the whole bucket or of another prefix (its names and metadata), are not.
    A listing's resource is the bucket itself, so a condition on the bucket's name would grant the whole bucket:
    Cloud Storage's `storage.googleapis.com/objectListPrefix` attribute is what limits it to a prefix."""
    variables = {"var.bucket_name": "my-corpora", "local.prefix": "zhwiki/run1"}
    variables["local.objects"] = "projects/_/buckets/my-corpora/objects/zhwiki/run1/"
    locals_ = {k: v for entry in root["locals"] for k, v in entry.items()}
    assert locals_["objects"] == "projects/_/buckets/${var.bucket_name}/objects/${local.prefix}/"
    bucket = "projects/_/buckets/my-corpora"
    grants = [(name, _one(body["condition"])["expression"]) for name, body in resources.items()
              if name.startswith("google_storage_bucket_iam")]
    assert grants and all(expression for _name, expression in grants), "every bucket grant has a condition"

    def granted(name: str, list_prefix: str = "") -> bool:
        return any(_grants(expression, variables, name, list_prefix) for _name, expression in grants)

    assert granted(f"{bucket}/objects/zhwiki/run1/corpus/AA/wiki_00")
    assert granted(f"{bucket}/objects/zhwiki/run1/out/part-00000.tfrecord")
    assert granted(bucket, "zhwiki/run1/corpus/"), "the corpus can be listed"
    assert granted(bucket, "zhwiki/run1/out/"), "the output can be listed"
    assert not granted(f"{bucket}/objects/other-team/secret.txt")
    assert not granted(f"{bucket}/objects/zhwiki/run10/x"), "a sibling prefix is another job's"
    assert not granted(bucket, ""), "a listing of the whole bucket"
    assert not granted(bucket, "other-team/"), "a listing of another prefix"


def _render(template: str, values: dict[str, str]) -> str:
    """Terraform's templatefile for a template without directives: ${name} interpolated, $${ a literal ${."""
    text = template.replace("$${", "\0")
    for name, value in values.items():
        text = text.replace("${" + name + "}", value)
    assert "${" not in text, text
    return text.replace("\0", "${")


@pytest.mark.parametrize("failures, succeeds", [(2, True), (99, False)])
def test_the_install_outlasts_a_package_index_not_answering_yet(tmp_path, failures, succeeds):
    """The install part of both startup scripts, run by bash with stand-ins for the system's commands: PyPI (through
    Cloud NAT, just after boot) failing twice does not leave a VM without its worker, idle until scaled in;
    failing for good ends the script non-zero (the guest agent logs it)."""
    opt, bin_dir = tmp_path / "opt", tmp_path / "bin"
    (opt / "venv" / "bin").mkdir(parents=True)
    bin_dir.mkdir()
    calls = tmp_path / "pip-calls"
    pip = opt / "venv" / "bin" / "pip"
    pip.write_text(f'#!/bin/bash\necho "$@" >> {calls}\n[ "$(wc -l < {calls})" -gt {failures} ]\n')
    (opt / "venv" / "bin" / "python").write_text("#!/bin/bash\nexit 0\n")
    for name, body in {"id": "exit 0", "python3": "exit 0", "useradd": "exit 0", "sleep": "exit 0"}.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
    for path in [pip, opt / "venv" / "bin" / "python", *bin_dir.iterdir()]:
        path.chmod(0o755)
    script = _render((STARTUP_DIR / "templates" / "install.sh.tftpl").read_text(),
                     {"user": "mlm", "install_dir": str(opt), "venv": str(opt / "venv"),
                      "package_spec": "mlm-pipeline[gcs]==0.1.0"})
    import os
    import subprocess

    proc = subprocess.run(["bash", "-c", "set -euo pipefail\n" + script], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    tries = calls.read_text().splitlines()
    assert tries and all(t == "install --quiet --no-cache-dir mlm-pipeline[gcs]==0.1.0" for t in tries), tries
    if succeeds:
        assert proc.returncode == 0 and len(tries) == failures + 1, (proc.returncode, tries, proc.stderr)
    else:
        assert proc.returncode != 0 and 3 <= len(tries) <= 10, (proc.returncode, tries)


def test_the_ventilator_journals_where_its_service_user_may_write(rendered):
    """The ventilator VM's service runs as the install's system user, whose home (the install directory) is
    root's: the sink's default --state-dir (~/.cache/mlm-pipeline), where a gs:// output's manifest is journaled,
    could not be made, and the job would never start.  The journal goes to the unit's StateDirectory, which
    systemd makes and hands to that user."""
    import re

    from ventilator.run_config import parse

    argv = shlex.split(rendered["ventilator_command"])[1:]
    argv = [a if a != "/opt/mlm-pipeline/vocab.txt" else "vocab.txt" for a in argv]
    state_dir = parse(argv).sink.state_dir
    unit = rendered["ventilator_startup_script"]
    directory = re.search(r"^StateDirectory=(\S+)$", unit, re.M)
    assert directory, "the ventilator's unit has no StateDirectory"
    assert state_dir == f"/var/lib/{directory.group(1)}", state_dir
