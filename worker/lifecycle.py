"""Tell the Auto Scaling group a drained worker may go: complete its lifecycle action.

Scale-in (and a spot interruption of a group member) holds the instance in
``Terminating:Wait`` while the termination lifecycle hook waits; the worker
completes the action once it has drained, so the instance goes at once
instead of at the hook's timeout, and never before its work is finished or
handed back.  The instance role's credentials sign the call (boto3's
standard chain); ``AWS_ENDPOINT_URL`` points it elsewhere (tests: moto).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from worker.interruption import LIFECYCLE_STATE, Imds, ImdsError

log = logging.getLogger("worker")


@dataclass(frozen=True)
class LifecycleHook:
    name: str  # the hook on autoscaling:EC2_INSTANCE_TERMINATING
    group: str  # its Auto Scaling group
    wait_seconds: float = 300.0  # after draining, how long to wait for the group to start terminating us
    poll_seconds: float = 5.0


def complete_after_drain(imds: Imds, hook: LifecycleHook, leave: bool = False) -> bool:
    """Once IMDS says the group is terminating this instance, complete the
    hook's action with CONTINUE.  True if the group accepted it.

    With ``leave`` (the worker drained on a rebalance recommendation) the
    instance first asks the group to terminate it
    (TerminateInstanceInAutoScalingGroup, the desired size kept, so the group
    starts a replacement if capacity rebalancing has not yet): drained, it
    would otherwise sit idle and billed until the spot notice or a scale-in.
    One that drained on a spot notice may be gone before; either way the
    hook's timeout is the fallback, so failing here costs minutes of an idle
    instance, not data."""
    deadline = time.monotonic() + hook.wait_seconds
    if leave and not _leave_group(imds, hook):
        return False
    try:
        while imds.get(LIFECYCLE_STATE) != "Terminated":
            if time.monotonic() > deadline:
                log.info("lifecycle: the group did not start terminating this instance within %.0fs; "
                         "nothing to complete", hook.wait_seconds)
                return False
            time.sleep(hook.poll_seconds)
        identity = imds.identity()
    except ImdsError as error:
        log.warning("lifecycle: %s; the hook %s will time out instead", error, hook.name)
        return False
    instance_id, region = identity.get("instanceId", ""), identity.get("region", "")
    import boto3  # only on EC2, when a hook is configured
    from botocore.exceptions import BotoCoreError, ClientError

    # an answer botocore cannot parse (an HTML 500): not a BotoCoreError
    from botocore.parsers import ResponseParserError
    try:
        boto3.client("autoscaling", region_name=region or None).complete_lifecycle_action(
            LifecycleHookName=hook.name, AutoScalingGroupName=hook.group, InstanceId=instance_id,
            LifecycleActionResult="CONTINUE")
    except (BotoCoreError, ClientError, ResponseParserError) as error:
        log.warning("lifecycle: could not complete %s for %s: %s; the hook will time out instead", hook.name,
                    instance_id, error)
        return False
    log.info("lifecycle: completed %s for %s in %s: the group may terminate it", hook.name, instance_id, hook.group)
    return True


def _leave_group(imds: Imds, hook: LifecycleHook) -> bool:
    """Ask the group to terminate this instance (through the drain hook, as a scale-in)."""
    try:
        identity = imds.identity()
    except ImdsError as error:
        log.warning("lifecycle: %s; cannot leave %s, the instance stays until the group removes it", error,
                    hook.group)
        return False
    instance_id, region = identity.get("instanceId", ""), identity.get("region", "")
    import boto3  # only on EC2, when a hook is configured
    from botocore.exceptions import BotoCoreError, ClientError

    # an answer botocore cannot parse (an HTML 500): not a BotoCoreError
    from botocore.parsers import ResponseParserError
    try:
        boto3.client("autoscaling", region_name=region or None).terminate_instance_in_auto_scaling_group(
            InstanceId=instance_id, ShouldDecrementDesiredCapacity=False)
    except (BotoCoreError, ClientError, ResponseParserError) as error:
        log.warning("lifecycle: could not leave %s (%s): %s; the instance stays until the group removes it",
                    hook.group, instance_id, error)
        return False
    log.info("lifecycle: drained after a rebalance recommendation: %s leaves %s (a replacement keeps its size)",
             instance_id, hook.group)
    return True
