"""The committed amazon.aws.aws_ec2 inventory against moto's EC2 endpoint.

Instances are created with the tags the Terraform module renders (from
`terraform apply` of terraform/modules/fleet_config when a terraform binary is
there), next to instances that must be left out (another fleet, another
project, a stopped worker). Then ansible-inventory and ansible-playbook
--list-hosts run on ansible/inventory/aws_ec2.yml unchanged, pointed at moto
with AWS_URL. Everything stays on 127.0.0.1: fake credentials in the
environment only, instance metadata disabled.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.fleet.fleethelpers import ANSIBLE_DIR, ansible_env, ansible_tool, terraform_binary

boto3 = pytest.importorskip("boto3")
moto_server = pytest.importorskip("moto.server", reason="moto[server] is not installed")

WORKERS = 3
FLEET = "mlm"  # the fleet name ansible/inventory/aws_ec2.yml filters on (Terraform's default)


@pytest.fixture(scope="module")
def moto_endpoint(moto_module):
    return moto_module.endpoint  # the session's server, emptied for this module: no other module's instances


@pytest.fixture(scope="module")
def aws_env(moto_endpoint, tmp_path_factory):
    env = ansible_env(tmp_path_factory.mktemp("ansible"))
    for key in list(env):
        if key.startswith("AWS_") and key not in ("AWS_EC2_METADATA_DISABLED",):
            env.pop(key)
    env.update({
        "AWS_URL": moto_endpoint,             # the aws_ec2 plugin's endpoint_url
        "AWS_ENDPOINT_URL": moto_endpoint,    # and any other boto3 client
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": "/dev/null",
        "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    })
    return env


def _expected_tags(request) -> tuple[dict, list[dict], str]:
    """(ventilator tags, worker tags, where they came from)."""
    if terraform_binary() is not None:
        apply = request.getfixturevalue("module_outputs")
        out = apply(fleet_name=FLEET, number_of_worker=WORKERS, bucket_name="shards", bucket_prefix="wiki/run1",
                    worker_processes=2)
        return out["ventilator_tags"], out["worker_tags"], "terraform"
    # No terraform binary: the same tags as the module's locals (test_fleet_terraform checks the keys).
    common = {"Project": "mlm-pipeline", "Fleet": FLEET, "ManagedBy": "terraform", "MlmOutput": "s3://shards/wiki/run1",
              "MlmData": "/data/corpus", "MlmVport": "5557", "MlmSinkPort": "5558", "MlmWorkerProcesses": "2"}
    return ({**common, "Name": f"{FLEET}-ventilator", "Role": "ventilator"},
            [{**common, "Name": f"{FLEET}-worker-{i:03d}", "Role": "worker", "WorkerIndex": str(i)}
             for i in range(WORKERS)], "hard-coded copy")


@pytest.fixture(scope="module")
def fleet_in_moto(request, moto_endpoint, aws_env):
    ventilator_tags, worker_tags, source = _expected_tags(request)
    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=moto_endpoint,
                       aws_access_key_id="testing", aws_secret_access_key="testing")
    vpc = ec2.create_vpc(CidrBlock="10.42.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.42.0.0/24")["Subnet"]["SubnetId"]
    ami = ec2.describe_images()["Images"][0]["ImageId"]

    def launch(tags: dict, instance_type="c6i.2xlarge") -> dict:
        return ec2.run_instances(
            ImageId=ami, MinCount=1, MaxCount=1, InstanceType=instance_type,
            NetworkInterfaces=[{"DeviceIndex": 0, "SubnetId": subnet, "AssociatePublicIpAddress": True}],
            TagSpecifications=[{"ResourceType": "instance",
                                "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}],
        )["Instances"][0]

    ventilator = launch(ventilator_tags, "m6i.large")
    workers = [launch(tags) for tags in worker_tags]
    # Must not show up: another fleet, another project, a stopped worker of this fleet.
    launch({**worker_tags[0], "Fleet": "other", "Name": "other-worker-000"})
    launch({**worker_tags[0], "Project": "someone-else", "Name": "foreign-worker"})
    stopped = launch({**worker_tags[0], "Name": f"{FLEET}-worker-099", "WorkerIndex": "99"})
    ec2.stop_instances(InstanceIds=[stopped["InstanceId"]])

    described = {i["InstanceId"]: i for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]}
    return {"ventilator": described[ventilator["InstanceId"]],
            "workers": [described[w["InstanceId"]] for w in workers],
            "worker_tags": worker_tags, "source": source}


@pytest.fixture(scope="module")
def inventory(fleet_in_moto, aws_env):
    proc = subprocess.run([ansible_tool("ansible-inventory"), "-i", "inventory/aws_ec2.yml", "--list"],
                          cwd=ANSIBLE_DIR, capture_output=True, text=True, env=aws_env, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return _plain(json.loads(proc.stdout))


def _plain(node):
    """ansible-inventory marks values from the plugin as {"__ansible_unsafe": value}: unwrap them."""
    if isinstance(node, dict):
        if set(node) == {"__ansible_unsafe"}:
            return node["__ansible_unsafe"]
        return {k: _plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    return node


def test_groups_resolve_to_the_fleet(inventory, fleet_in_moto):
    assert inventory["ventilator"]["hosts"] == [f"{FLEET}-ventilator"], fleet_in_moto["source"]
    assert sorted(inventory["worker"]["hosts"]) == [t["Name"] for t in fleet_in_moto["worker_tags"]]
    everyone = set(inventory["_meta"]["hostvars"])
    assert everyone == {f"{FLEET}-ventilator", *[t["Name"] for t in fleet_in_moto["worker_tags"]]}, \
        "other fleets, other projects and stopped instances are left out"


def test_hostvars_point_ssh_at_public_and_workers_at_private(inventory, fleet_in_moto):
    hostvars = inventory["_meta"]["hostvars"]
    ventilator = fleet_in_moto["ventilator"]
    mine = hostvars[f"{FLEET}-ventilator"]
    assert mine["ansible_host"] == ventilator["PublicIpAddress"]
    assert mine["mlm_private_address"] == ventilator["PrivateIpAddress"]
    assert mine["ansible_user"] == "ubuntu"
    for instance in fleet_in_moto["workers"]:
        name = next(t["Value"] for t in instance["Tags"] if t["Key"] == "Name")
        assert hostvars[name]["ansible_host"] == instance["PublicIpAddress"]
        assert hostvars[name]["mlm_private_address"] == instance["PrivateIpAddress"]
        # job settings from the tags Terraform sets
        assert hostvars[name]["vport"] == 5557 and hostvars[name]["mlm_sink_port"] == 5558
        assert hostvars[name]["mlm_output"] == "s3://shards/wiki/run1"
        assert hostvars[name]["mlm_worker_processes"] == 2


def test_playbooks_target_the_right_hosts(fleet_in_moto, aws_env):
    expected = {
        "working.yaml": sorted(t["Name"] for t in fleet_in_moto["worker_tags"]),
        "ventilating.yaml": [f"{FLEET}-ventilator"],
        "init.yaml": sorted([f"{FLEET}-ventilator", *[t["Name"] for t in fleet_in_moto["worker_tags"]]]),
    }
    for playbook, hosts in expected.items():
        proc = subprocess.run([ansible_tool("ansible-playbook"), "-i", "inventory/aws_ec2.yml", "--list-hosts",
                               playbook], cwd=ANSIBLE_DIR, capture_output=True, text=True, env=aws_env, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        listed = sorted(line.strip() for line in proc.stdout.splitlines()
                        if line.startswith("      ") and line.strip())
        assert listed == hosts, f"{playbook}: {proc.stdout}"


def test_vserver_resolves_to_the_ventilators_private_address(fleet_in_moto, aws_env, tmp_path):
    """The role's default mlm_vserver, evaluated for a worker against the dynamic inventory."""
    playbook = tmp_path / "vserver.yml"
    # The role is included (its tasks skipped) so its defaults, mlm_vserver among them, apply.
    playbook.write_text(
        "- name: resolve\n  hosts: worker\n  gather_facts: false\n  roles:\n    - role: mlm\n"
        "      when: false\n  tasks:\n"
        "    - name: show\n      ansible.builtin.debug:\n        msg: \"VSERVER={{ mlm_vserver }}:{{ mlm_vport }}\"\n")
    env = dict(aws_env, ANSIBLE_ROLES_PATH=str(ANSIBLE_DIR / "roles"))
    proc = subprocess.run([ansible_tool("ansible-playbook"), "-i", str(ANSIBLE_DIR / "inventory" / "aws_ec2.yml"),
                           "-c", "local", "-e", "ansible_python_interpreter=auto_silent", str(playbook)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    private = fleet_in_moto["ventilator"]["PrivateIpAddress"]
    assert proc.stdout.count(f"VSERVER={private}:5557") == WORKERS, proc.stdout
