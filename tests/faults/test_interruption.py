"""A worker told by (fake) IMDS that its instance is going, mid-job: it stops
taking tasks, finishes or hands back (lease released, never left to expire)
what it holds, exits 0, and the job's output is byte-identical to a clean
run.  The scale-in case also completes the group's lifecycle action, against
moto's Auto Scaling."""

import time
from datetime import UTC, datetime, timedelta

import boto3
import pytest

from tests.faults.test_faults import assert_same_as_clean
from tests.support.cluster import Cluster
from tests.support.factories import finished_job
from tests.support.fake_gcp import FakeGceMetadata
from tests.support.fake_imds import FakeImds
from tests.support.helpers import VOCAB, WIKI, manifest
from tests.support.moto_lifecycle import aws_env

pytestmark = [pytest.mark.e2e, pytest.mark.faults]

# Six tasks, four of them of ~1 s (512K at dupe 40), so a notice lands mid-task.
JOB = ["--vocab-file", VOCAB, "--dupe-factor", "40", "--task-size", "512K"]
WATCH = ["--spot-watch", "--spot-watch-seconds", "0.1"]
# The replacement worker: when the drained worker finished the last tasks itself, the job can end before the
# replacement (slow to start on a loaded machine) says hello; without a limit it would wait for the next
# ventilator forever, as the README says of any worker that joins after the end.
REPLACEMENT = ["--idle-exit-seconds", "5"]


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    return finished_job(tmp_path_factory.mktemp("clean"), *JOB, "--workers", "2")


@pytest.fixture
def cluster(tmp_path):
    made = []

    def make(env=None):
        c = Cluster(WIKI, tmp_path / "out", JOB, tmp_path, env=env)
        made.append(c)
        c.start_sink()
        c.start_ventilator()
        return c

    yield make
    for c in made:
        c.close()


def _exits_zero_soon(process, within: float) -> float:
    started = time.monotonic()
    assert process.wait(timeout=within + 30) == 0
    took = time.monotonic() - started
    assert took < within, f"took {took:.1f}s"
    return took


def test_spot_notice_releases_the_task_and_exits_0(clean, cluster):
    """Out of drain time at once (--notice-drain-seconds 0): the task being
    computed is handed back; a worker that joins later finishes the job."""
    c = cluster()
    with FakeImds() as imds:
        watched = c.start_worker(*WATCH, "--imds-endpoint", imds.endpoint, "--notice-drain-seconds", "0")
        c.wait_for_progress(1)  # it computes the next big task now
        imds.spot_action = {"action": "terminate",
                            "time": (datetime.now(UTC) + timedelta(minutes=2)).strftime("%Y-%m-%dT%H:%M:%SZ")}
        _exits_zero_soon(watched, within=10)
        done_at_notice = c.progress()
        c.start_worker(*REPLACEMENT)
        assert c.wait() == 0, c.tail()
    text = c.log_text()
    assert "spot-interruption" in text and "released 1 task(s) unfinished" in text, c.tail()
    assert "lease expired" not in text, "a held task was left to expire instead of being handed back"
    assert done_at_notice < len(manifest(clean)), "the job ended before the notice"
    assert_same_as_clean(c.output, clean)


def test_gce_preemption_releases_the_task_and_exits_0(clean, cluster):
    """Google Compute Engine: the metadata server's instance/preempted turns TRUE mid-task (a Spot VM's
    30-second notice); the same drain as EC2's spot notice, the same output as a clean run."""
    c = cluster()
    with FakeGceMetadata() as metadata:
        watched = c.start_worker(*WATCH, "--spot-watch-cloud", "gce", "--gce-metadata-host", metadata.host,
                                 "--notice-drain-seconds", "0")
        c.wait_for_progress(1)
        metadata.preempted = True
        _exits_zero_soon(watched, within=10)
        done_at_notice = c.progress()
        c.start_worker(*REPLACEMENT)
        assert c.wait() == 0, c.tail()
        asked = [path for path in metadata.requests if path.endswith("instance/preempted")]
    text = c.log_text()
    assert asked, "the watcher never asked the metadata server"
    assert "spot-preemption" in text and "released 1 task(s) unfinished" in text, c.tail()
    assert "lease expired" not in text, "a held task was left to expire instead of being handed back"
    assert done_at_notice < len(manifest(clean)), "the job ended before the notice"
    assert_same_as_clean(c.output, clean)


def test_sigusr1_from_a_shutdown_script_drains_like_a_notice(clean, cluster):
    """terraform/gcp's shutdown script (a managed instance group's scale-in deletes the VM) sends SIGUSR1 to the
    worker service: the supervisor passes the same drain to its processes, which hand their tasks back."""
    import signal

    c = cluster()
    watched = c.start_worker("--processes", "2", "--notice-drain-seconds", "0")
    c.wait_for_progress(1)
    watched.send_signal(signal.SIGUSR1)
    _exits_zero_soon(watched, within=15)
    c.start_worker(*REPLACEMENT)
    assert c.wait() == 0, c.tail()
    text = c.log_text()
    assert "lease expired" not in text, "a held task was left to expire instead of being handed back"
    assert_same_as_clean(c.output, clean)


def worker_group(endpoint: str):
    """A workers' group of two (moto) with the drain hook on termination: its client and one instance's id."""
    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=endpoint, aws_access_key_id="testing",
                       aws_secret_access_key="testing")
    autoscaling = boto3.client("autoscaling", region_name="us-east-1", endpoint_url=endpoint,
                               aws_access_key_id="testing", aws_secret_access_key="testing")
    ami = ec2.describe_images()["Images"][0]["ImageId"]
    ec2.create_launch_template(LaunchTemplateName="mlm-worker",
                               LaunchTemplateData={"ImageId": ami, "InstanceType": "c6i.large"})
    autoscaling.create_auto_scaling_group(AutoScalingGroupName="mlm-workers", MinSize=0, MaxSize=4,
                                          DesiredCapacity=2, AvailabilityZones=["us-east-1a"],
                                          LaunchTemplate={"LaunchTemplateName": "mlm-worker"})
    autoscaling.put_lifecycle_hook(LifecycleHookName="mlm-drain", AutoScalingGroupName="mlm-workers",
                                   LifecycleTransition="autoscaling:EC2_INSTANCE_TERMINATING",
                                   HeartbeatTimeout=300, DefaultResult="CONTINUE")
    group = autoscaling.describe_auto_scaling_groups()["AutoScalingGroups"][0]
    return autoscaling, group["Instances"][0]["InstanceId"]


def test_scale_in_drains_and_completes_the_lifecycle_action(clean, cluster, moto):
    """Two processes under one supervisor, the group's scale-in seen in IMDS:
    both finish their tasks, exit 0, and the lifecycle action is completed
    with CONTINUE for this instance (moto)."""
    server, endpoint = moto, moto.endpoint
    env = aws_env(endpoint)
    autoscaling, instance_id = worker_group(endpoint)

    c = cluster(env=env)
    with FakeImds(instance_id=instance_id) as imds:
        watched = c.start_worker(*WATCH, "--processes", "2", "--imds-endpoint", imds.endpoint,
                                 "--lifecycle-hook", "mlm-drain", "--autoscaling-group", "mlm-workers")
        c.wait_for_progress(2)
        imds.lifecycle_state = "Terminated"
        _exits_zero_soon(watched, within=20)
        c.start_worker(*REPLACEMENT)
        assert c.wait() == 0, c.tail()
    text = c.log_text()
    assert "scale-in" in text and "completed mlm-drain for " + instance_id in text, c.tail()
    assert ("mlm-drain", "mlm-workers", instance_id, "CONTINUE") in server.completed()
    assert "lease expired" not in text
    assert_same_as_clean(c.output, clean)


def test_rebalance_drains_and_leaves_the_group(clean, cluster, moto):
    """A rebalance recommendation: the worker drains, then asks the group to terminate its instance
    (TerminateInstanceInAutoScalingGroup, desired size kept) instead of idling until a spot notice, and
    completes the drain hook the group then runs (moto, with AWS's Terminating:Wait modelled)."""
    server, endpoint = moto, moto.endpoint
    env = aws_env(endpoint)
    autoscaling, instance_id = worker_group(endpoint)

    c = cluster(env=env)
    with FakeImds(instance_id=instance_id) as imds:
        watched = c.start_worker(*WATCH, "--processes", "1", "--imds-endpoint", imds.endpoint,
                                 "--lifecycle-hook", "mlm-drain", "--autoscaling-group", "mlm-workers",
                                 "--lifecycle-wait-seconds", "60")
        c.wait_for_progress(2)
        imds.rebalance = {"noticeTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
        deadline = time.monotonic() + 60
        while not server.terminated():  # the drained worker asks to leave...
            assert time.monotonic() < deadline and watched.poll() is None, c.tail()
            time.sleep(0.1)
        imds.lifecycle_state = "Terminated"  # ...and the group's drain hook holds it, as IMDS then says
        _exits_zero_soon(watched, within=20)
        c.start_worker(*REPLACEMENT)
        assert c.wait() == 0, c.tail()
    text = c.log_text()
    assert "rebalance-recommendation" in text and f"{instance_id} leaves mlm-workers" in text, c.tail()
    assert server.terminated() == [(instance_id, "false")]  # the desired size kept: the group replaces it
    group = autoscaling.describe_auto_scaling_groups()["AutoScalingGroups"][0]
    assert group["DesiredCapacity"] == 2 and instance_id not in {i["InstanceId"] for i in group["Instances"]}
    assert ("mlm-drain", "mlm-workers", instance_id, "CONTINUE") in server.completed()
    assert "lease expired" not in text
    assert_same_as_clean(c.output, clean)
