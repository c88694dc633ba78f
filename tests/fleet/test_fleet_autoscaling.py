"""Workers the Auto Scaling group starts, seen by Ansible (moto's EC2 and Auto Scaling).

The group launches from a launch template carrying the tags Terraform renders
for group instances (no Name; Role=worker; the drain hook): the committed
aws_ec2 inventory names them by instance id, puts them in `worker` beside the
ventilator, and working.yaml's worker command line keeps what the user data
gave them (--spot-watch, --lifecycle-hook, --autoscaling-group), so running
working.yaml on them does not take the drain away.
"""

from __future__ import annotations

import json
import re
import subprocess

import pytest
import yaml

from tests.fleet.fleethelpers import ANSIBLE_DIR, ansible_tool, terraform_binary
from tests.fleet.test_fleet_inventory import _plain, aws_env, moto_endpoint  # noqa: F401 (fixtures)

boto3 = pytest.importorskip("boto3")

FLEET, GROUP, HOOK = "mlm", "mlm-workers", "mlm-drain"


def _group_tags(request) -> tuple[dict, dict]:
    """(ventilator tags, group instance tags) as the module renders them (or their copy without terraform)."""
    if terraform_binary() is not None:
        out = request.getfixturevalue("module_outputs")(
            fleet_name=FLEET, number_of_worker=2, bucket_name="shards", worker_processes=2, spot_watch=True,
            autoscaling_group_name=GROUP, lifecycle_hook_name=HOOK)
        assert "--spot-watch --lifecycle-hook mlm-drain --autoscaling-group mlm-workers" in out["worker_user_data"]
        return out["ventilator_tags"], out["worker_group_tags"]
    common = {"Project": "mlm-pipeline", "Fleet": FLEET, "ManagedBy": "terraform", "MlmVport": "5557",
              "MlmSinkPort": "5558", "MlmWorkerProcesses": "2", "MlmOutput": "s3://shards/mlm", "MlmData": "/data/corpus"}
    return {**common, "Name": f"{FLEET}-ventilator", "Role": "ventilator"}, \
        {**common, "Role": "worker", "MlmLifecycleHook": HOOK}


@pytest.fixture(scope="module")
def group_in_moto(request, moto_endpoint):
    ventilator_tags, group_tags = _group_tags(request)
    assert "Name" not in group_tags and group_tags["Role"] == "worker" and group_tags["MlmLifecycleHook"] == HOOK
    kwargs = dict(region_name="us-east-1", endpoint_url=moto_endpoint, aws_access_key_id="testing",
                  aws_secret_access_key="testing")
    ec2, autoscaling = boto3.client("ec2", **kwargs), boto3.client("autoscaling", **kwargs)
    vpc = ec2.create_vpc(CidrBlock="10.42.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.42.0.0/24")["Subnet"]["SubnetId"]
    ami = ec2.describe_images()["Images"][0]["ImageId"]
    ventilator = ec2.run_instances(
        ImageId=ami, MinCount=1, MaxCount=1, InstanceType="m6i.large",
        NetworkInterfaces=[{"DeviceIndex": 0, "SubnetId": subnet, "AssociatePublicIpAddress": True}],
        TagSpecifications=[{"ResourceType": "instance",
                            "Tags": [{"Key": k, "Value": v} for k, v in ventilator_tags.items()]}])["Instances"][0]
    ec2.create_launch_template(LaunchTemplateName="mlm-worker-template", LaunchTemplateData={
        "ImageId": ami, "InstanceType": "c6i.2xlarge",
        "NetworkInterfaces": [{"DeviceIndex": 0, "SubnetId": subnet, "AssociatePublicIpAddress": True}],
        "TagSpecifications": [{"ResourceType": "instance",
                               "Tags": [{"Key": k, "Value": v} for k, v in group_tags.items()]}]})
    autoscaling.create_auto_scaling_group(
        AutoScalingGroupName=GROUP, MinSize=0, MaxSize=4, DesiredCapacity=2, VPCZoneIdentifier=subnet,
        CapacityRebalance=True,
        MixedInstancesPolicy={
            "LaunchTemplate": {"LaunchTemplateSpecification": {"LaunchTemplateName": "mlm-worker-template"},
                               "Overrides": [{"InstanceType": "c6i.2xlarge"}, {"InstanceType": "c6a.2xlarge"}]},
            "InstancesDistribution": {"OnDemandBaseCapacity": 0, "OnDemandPercentageAboveBaseCapacity": 0,
                                      "SpotAllocationStrategy": "capacity-optimized"}})
    members = [i["InstanceId"] for i in autoscaling.describe_auto_scaling_groups()["AutoScalingGroups"][0]["Instances"]]
    assert len(members) == 2
    return {"ventilator": ventilator, "members": members}


def test_group_workers_are_in_the_worker_group_by_instance_id(group_in_moto, aws_env):
    proc = subprocess.run([ansible_tool("ansible-inventory"), "-i", "inventory/aws_ec2.yml", "--list"],
                          cwd=ANSIBLE_DIR, capture_output=True, text=True, env=aws_env, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    inventory = _plain(json.loads(proc.stdout))
    assert sorted(inventory["worker"]["hosts"]) == sorted(group_in_moto["members"])
    assert inventory["ventilator"]["hosts"] == [f"{FLEET}-ventilator"]
    for member in group_in_moto["members"]:
        hostvars = inventory["_meta"]["hostvars"][member]
        assert hostvars["mlm_autoscaling_group"] == GROUP and hostvars["mlm_lifecycle_hook"] == HOOK
        assert hostvars["mlm_private_address"] and hostvars["ansible_host"]
    ventilator_vars = inventory["_meta"]["hostvars"][f"{FLEET}-ventilator"]
    assert ventilator_vars["mlm_autoscaling_group"] == "" and ventilator_vars["mlm_lifecycle_hook"] == ""


def test_working_yaml_keeps_their_spot_watch_and_drain_hook(group_in_moto, aws_env, tmp_path):
    """The role's worker command line (its own set_fact task, unchanged), evaluated for each group
    instance against the dynamic inventory."""
    tasks = yaml.safe_load((ANSIBLE_DIR / "roles" / "mlm" / "tasks" / "worker.yml").read_text())
    argv_task = next(t for t in tasks if t["name"] == "Worker command line")
    (tmp_path / "argv.yml").write_text(yaml.safe_dump([argv_task, {
        "name": "Show", "ansible.builtin.debug": {"msg": "ARGV={{ mlm_worker_argv | join(' ') }}"}}]))
    playbook = tmp_path / "play.yml"
    # The role is included (its tasks skipped) so its defaults apply.
    playbook.write_text("- name: argv\n  hosts: worker\n  gather_facts: false\n  roles:\n    - role: mlm\n"
                        "      when: false\n  tasks:\n    - name: Command line\n"
                        f"      ansible.builtin.include_tasks: {tmp_path / 'argv.yml'}\n")
    env = dict(aws_env, ANSIBLE_ROLES_PATH=str(ANSIBLE_DIR / "roles"))
    proc = subprocess.run([ansible_tool("ansible-playbook"), "-i", str(ANSIBLE_DIR / "inventory" / "aws_ec2.yml"),
                           "-c", "local", "-e", "ansible_python_interpreter=auto_silent", str(playbook)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = re.findall(r"ARGV=([^\"]+)", proc.stdout)
    assert len(lines) == 2, proc.stdout
    for line in lines:
        assert line.endswith(f"--processes 2 --spot-watch --lifecycle-hook {HOOK} --autoscaling-group {GROUP}"), line
