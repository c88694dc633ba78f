"""The ventilator's backlog as Google Cloud Monitoring custom metrics, for the workers' managed instance group.

terraform/gcp's regional autoscaler scales the group on ``<prefix>/backlog`` as a per-group metric
(``single_instance_assignment``: tasks one VM should have in hand), so an empty queue scales the group to
its minimum and tasks waiting wake it.  ``backlog`` is published as 0 once, as the ventilator stops: with no
ventilator there is nothing for a worker to do.  Nothing here decides a size.

Off unless ``--backlog-publisher cloud-monitoring --cloud-monitoring-project PROJECT``.  Credentials are
Application Default Credentials, found as Google's clients find them (``google.auth.default``: a key file
named by GOOGLE_APPLICATION_CREDENTIALS, gcloud's, or the VM's service account from the metadata server,
``GCE_METADATA_HOST`` honoured); the REST call goes through google-auth's ``AuthorizedSession``, which
refreshes the token.  A failed publication is logged and retried on the next tick: the job never waits.
Every call is made by the publisher's one thread, the last one too, so close() is bounded by
``min_spacing_seconds + close_seconds`` however slowly the API answers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import click

from common.job.params import param
from ventilator.publishers.base import Backlog, PeriodicPublisher

if TYPE_CHECKING:  # the gcp extra: imported when the first publication needs it
    from google.auth.transport.requests import AuthorizedSession

DEFAULT_ENDPOINT = "https://monitoring.googleapis.com"
DEFAULT_PREFIX = "custom.googleapis.com/mlm-pipeline"
SCOPE = "https://www.googleapis.com/auth/monitoring.write"
#: The metrics and what each counts; terraform/gcp's autoscaler reads ``backlog``.
METRICS = ("backlog", "pending_tasks", "leased_tasks", "workers", "worker_hosts", "job_active")


@dataclass(frozen=True)
class CloudMonitoringOptions:
    project: str
    prefix: str = DEFAULT_PREFIX  # metric types are <prefix>/<metric>: terraform/gcp's is <prefix>/<fleet>
    endpoint: str = DEFAULT_ENDPOINT
    interval_seconds: float = 60.0  # Cloud Monitoring takes a point per series every 5 s at most: keep it above
    #: Google refuses a point closer than this to its series' last one ("written more frequently than the maximum
    #: sampling period"): the last publication waits for it.
    min_spacing_seconds: float = 5.0
    request_seconds: float = 10.0  # one call's connect and read timeouts
    close_seconds: float = 15.0  # close() waits this long at most for the last publication (beyond the spacing)


@dataclass(frozen=True)
class CloudMonitoringParams:
    """Its flags (--backlog-publisher cloud-monitoring, which needs --cloud-monitoring-project)."""

    project: str = param("", "With --backlog-publisher cloud-monitoring: publish the backlog (backlog, pending_tasks, "
                             "leased_tasks, workers, worker_hosts, job_active) to Google Cloud Monitoring as this "
                             "project's custom metrics, for the workers' managed instance group (docs/fleet.md).",
                         flag="--cloud-monitoring-project", cli={"metavar": "PROJECT"}, described="off")
    prefix: str = param(CloudMonitoringOptions.prefix, "The metrics' type prefix: <prefix>/backlog is what the "
                                                       "group's autoscaler reads (terraform/gcp).",
                        flag="--cloud-monitoring-prefix")
    endpoint: str = param(CloudMonitoringOptions.endpoint, "The Cloud Monitoring API's address (a private endpoint, "
                                                           "or a test's).", flag="--cloud-monitoring-endpoint")
    seconds: float = param(CloudMonitoringOptions.interval_seconds, "How often the backlog is published to Cloud "
                                                                    "Monitoring.", flag="--cloud-monitoring-seconds",
                           cli={"type": click.FloatRange(min=0.1)})

    def validate(self) -> None:
        if not self.project:
            raise ValueError("--backlog-publisher cloud-monitoring needs --cloud-monitoring-project")


def _values(backlog: Backlog) -> dict[str, int]:
    return {"backlog": backlog.backlog if backlog.active else 0, "pending_tasks": backlog.pending,
            "leased_tasks": backlog.leased, "workers": backlog.workers, "worker_hosts": backlog.worker_hosts,
            "job_active": int(backlog.active)}


def time_series(backlog: Backlog, options: CloudMonitoringOptions, at: datetime) -> dict:
    """projects.timeSeries.create's request body for one observation (pure).

    Gauge points on the ``global`` resource: a per-group metric (a ``gce_instance`` one would be read as
    one series per VM)."""
    end = at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {"timeSeries": [
        {"metric": {"type": f"{options.prefix}/{name}"},
         "resource": {"type": "global", "labels": {"project_id": options.project}},
         "metricKind": "GAUGE", "valueType": "INT64",
         "points": [{"interval": {"endTime": end}, "value": {"int64Value": str(value)}}]}
        for name, value in _values(backlog).items()]}


class CloudMonitoringPublisher(PeriodicPublisher):
    """Every ``interval_seconds``: observe() and publish; close() publishes the last observation as inactive,
    waiting for Google's spacing between two points of a series."""

    name = "cloud-monitoring"
    Params = CloudMonitoringParams
    label = "cloud monitoring"
    last_word = "job_active=0"

    @staticmethod
    def options_of(params: CloudMonitoringParams) -> CloudMonitoringOptions:
        return CloudMonitoringOptions(params.project, params.prefix, params.endpoint, params.seconds)

    def __init__(self, params: CloudMonitoringParams | None, observe: Callable[[], Backlog],
                 options: CloudMonitoringOptions | None = None):
        if options is None:
            assert params is not None, "a publisher needs its params or its options"
            options = self.options_of(params)
        super().__init__(params, observe, interval_seconds=options.interval_seconds,
                         close_seconds=options.close_seconds, spacing_seconds=options.min_spacing_seconds)
        self.options = options
        # made on the first publication: finding credentials may ask the metadata server
        self._session: AuthorizedSession | None = None

    @property
    def destination(self) -> str:
        return f"project {self.options.project}"

    def _authorized_session(self) -> AuthorizedSession:
        if self._session is None:
            import google.auth  # only when asked for
            from google.auth.transport.requests import AuthorizedSession

            credentials, _project = google.auth.default(scopes=[SCOPE])
            self._session = AuthorizedSession(credentials)
        return self._session

    def failures(self) -> tuple[type[BaseException], ...]:
        import google.auth.exceptions
        import requests

        # google-auth does not wrap every malformed answer (a token without a field)
        return (google.auth.exceptions.GoogleAuthError, requests.RequestException, LookupError, TypeError,
                ValueError)

    def send(self, backlog: Backlog) -> None:
        import requests

        url = f"{self.options.endpoint.rstrip('/')}/v3/projects/{self.options.project}/timeSeries"
        response = self._authorized_session().post(url, json=time_series(backlog, self.options, datetime.now(UTC)),
                                                   timeout=self.options.request_seconds)
        if response.status_code != 200:
            raise requests.HTTPError(f"{response.status_code} {response.text[:300]}")
