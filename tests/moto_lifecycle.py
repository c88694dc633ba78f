"""moto in server mode on loopback, with the one Auto Scaling action it lacks.

moto 5 does not implement CompleteLifecycleAction; this adds it to moto's
Auto Scaling responses (in this process, where the threaded server runs):
it checks what AWS checks (the hook exists on the group, the instance is a
member) and records each completion for the test to read.
"""

from __future__ import annotations

import urllib.request

import pytest

moto_server = pytest.importorskip("moto.server", reason="moto[server] is not installed")

from moto.autoscaling import models as _asg_models  # noqa: E402
from moto.autoscaling.exceptions import ValidationError  # noqa: E402
from moto.autoscaling.responses import AutoScalingResponse  # noqa: E402
from moto.core.responses import EmptyResult  # noqa: E402

from tests.helpers import free_ports  # noqa: E402

#: (hook, group, instance id, result) of every accepted CompleteLifecycleAction.
COMPLETED: list[tuple[str, str, str, str]] = []


def _complete_lifecycle_action(self) -> EmptyResult:
    hook, group = self._get_param("LifecycleHookName"), self._get_param("AutoScalingGroupName")
    instance, result = self._get_param("InstanceId"), self._get_param("LifecycleActionResult")
    backend = self.autoscaling_backend
    if f"{group}_{hook}" not in backend.lifecycle_hooks:
        raise ValidationError(f"No Lifecycle Hook found with name {hook} for group {group}")
    members = {state.instance.id for state in backend.autoscaling_groups[group].instance_states}
    if instance not in members or result not in ("CONTINUE", "ABANDON"):
        raise ValidationError(f"No active Lifecycle Action found with instance ID {instance}")
    COMPLETED.append((hook, group, instance, result))
    return EmptyResult()


if not hasattr(AutoScalingResponse, "complete_lifecycle_action"):
    AutoScalingResponse.complete_lifecycle_action = _complete_lifecycle_action
assert _asg_models  # the backend the action reads


def start_moto() -> tuple[object, str]:
    """A threaded moto server on a free loopback port: (server, endpoint URL).

    moto keeps its backends in process-global state, shared by every server
    started in this pytest process: the state is reset first, so instances,
    groups or metrics another test module left behind are not seen here."""
    (port,) = free_ports(1)
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST"), timeout=30).close()
    return server, endpoint


def aws_env(endpoint: str) -> dict[str, str]:
    """Environment for a process that must talk to moto only (fake credentials, no real config)."""
    return {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1", "AWS_CONFIG_FILE": "/dev/null",
            "AWS_SHARED_CREDENTIALS_FILE": "/dev/null", "AWS_EC2_METADATA_DISABLED": "true"}
