"""The ventilator's backlog as CloudWatch metrics, for the workers' Auto Scaling group.

The group scales on these (docs/fleet.md, "A fleet that sizes itself"):
target tracking on ``Backlog`` per in-service instance, a wake-up when tasks
wait and the group is empty, and the group to its minimum when ``JobActive``
drops to 0, which this publishes once as the ventilator stops.  Nothing here
decides a size: it only says how much work there is.

Off unless ``--cloudwatch-namespace`` is given (:class:`CloudWatchParams`, its flags); boto3's standard chain
supplies the credentials (the instance role on EC2).  A failed publication
is logged and retried on the next tick: the job never waits for CloudWatch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import click

from common.job.params import param
from ventilator.publishers.base import Backlog, PeriodicPublisher, PublisherError


@dataclass(frozen=True)
class CloudWatchOptions:
    namespace: str  # e.g. mlm-pipeline/<fleet>: the group's scaling policies read this namespace
    region: str = ""  # "" = boto3's default
    interval_seconds: float = 60.0  # CloudWatch's standard resolution


@dataclass(frozen=True)
class CloudWatchParams:
    """Its flags (--backlog-publisher cloudwatch, the default: on once --cloudwatch-namespace is given)."""

    namespace: str = param("", "Publish the backlog (Backlog, PendingTasks, LeasedTasks, Workers, WorkerHosts, "
                               "JobActive) to CloudWatch under this namespace, for the workers' Auto Scaling group "
                               "(docs/fleet.md).", flag="--cloudwatch-namespace", cli={"metavar": "NAMESPACE"},
                           described="off")
    region: str = param("", "Region of --cloudwatch-namespace.", flag="--cloudwatch-region",
                        described="boto3's (AWS_DEFAULT_REGION, ~/.aws/config)")
    seconds: float = param(CloudWatchOptions.interval_seconds, "How often the backlog is published.",
                           flag="--cloudwatch-seconds", cli={"type": click.FloatRange(min=0.1)})


def metric_data(backlog: Backlog) -> list[dict]:
    """put_metric_data's MetricData for one observation (pure)."""
    values = {"Backlog": backlog.backlog, "PendingTasks": backlog.pending, "LeasedTasks": backlog.leased,
              "Workers": backlog.workers, "WorkerHosts": backlog.worker_hosts, "JobActive": int(backlog.active)}
    return [{"MetricName": name, "Value": float(value), "Unit": "Count"} for name, value in values.items()]


class CloudWatchPublisher(PeriodicPublisher):
    """Every ``interval_seconds``: observe() and publish; close() publishes the last observation as inactive."""

    name = "cloudwatch"
    Params = CloudWatchParams
    label = "cloudwatch"
    last_word = "JobActive=0"

    @classmethod
    def enabled(cls, params: object) -> bool:
        return isinstance(params, CloudWatchParams) and bool(params.namespace)

    @classmethod
    def check(cls, params: object) -> None:
        """A region, from --cloudwatch-region or boto3's chain: botocore refuses a client without one."""
        if not cls.enabled(params) or not isinstance(params, CloudWatchParams) or params.region:
            return
        import boto3  # only when asked for

        if boto3.session.Session().region_name is None:
            raise PublisherError("--cloudwatch-namespace: no AWS region to publish to: give --cloudwatch-region, "
                                 "or set AWS_DEFAULT_REGION")

    @staticmethod
    def options_of(params: CloudWatchParams) -> CloudWatchOptions:
        return CloudWatchOptions(params.namespace, params.region, params.seconds)

    def __init__(self, params: CloudWatchParams | None, observe: Callable[[], Backlog],
                 options: CloudWatchOptions | None = None):
        if options is None:
            assert params is not None, "a publisher needs its params or its options"
            options = self.options_of(params)
        super().__init__(params, observe, interval_seconds=options.interval_seconds)
        self.options = options
        import boto3  # only when asked for
        self._client = boto3.client("cloudwatch", region_name=self.options.region or None)

    @property
    def destination(self) -> str:
        return self.options.namespace

    def failures(self) -> tuple[type[BaseException], ...]:
        from botocore.exceptions import BotoCoreError, ClientError
        from botocore.parsers import ResponseParserError  # an answer botocore cannot parse: not a BotoCoreError
        return (BotoCoreError, ClientError, ResponseParserError)

    def send(self, backlog: Backlog) -> None:
        self._client.put_metric_data(Namespace=self.options.namespace, MetricData=metric_data(backlog))
