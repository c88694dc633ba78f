"""The worker's settings: what ``python -m worker`` takes, and what the ventilator hands workers it starts.

Each field is its option (common/job/cli_settings.py); the defaults are the worker's own (WorkerOptions,
worker/interruption.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import click

from common.job.cli_settings import Address, option
from common.storage import StorageSettings
from common.wire.security import Curve
from common.wire.transport import SINK_PORT, VENTILATOR_PORT
from worker.interruption import DEFAULT_ENDPOINT, DEFAULT_NOTICE_DRAIN_SECONDS
from worker.lifecycle import LifecycleHook
from worker.options import WorkerOptions


class SettingsError(ValueError):
    """A one-line reason these settings cannot run."""


@dataclass(frozen=True)
class WorkerSettings:
    ventilator: str = option("--ventilator", required=True, type=Address(VENTILATOR_PORT), show_envvar=True,
                             help="Where the ventilator listens (its --vport). Everything else, including the "
                                  "tokenizer, comes from it.")
    processes: int = option("--processes", type=click.IntRange(min=1), default=os.cpu_count() or 1,
                            always_written=True, show_envvar=True, described="this host's cores",
                            help="Worker processes on this host (one core each).")
    sink: str = option("--sink", default=WorkerOptions.sink, type=Address(SINK_PORT), show_envvar=True,
                       help="Override the sink address the ventilator hands out.")
    credit: int = option("--credit", type=click.IntRange(min=1), default=WorkerOptions.credit, show_envvar=True,
                         help="Tasks a process holds at once (in progress + queued); 1 balances load best.")
    drain_seconds: float = option("--drain-seconds", type=float, default=WorkerOptions.drain_seconds,
                                  show_envvar=True,
                                  help="On SIGTERM, how long to keep working on the current task before exiting "
                                       "anyway.")
    curve_dir: str | None = option("--curve-dir", type=click.Path(file_okay=False), default=None, show_envvar=True,
                                   help="Encrypt and authenticate with CURVE keys from this directory (made by "
                                        "mlm-keys).")
    idle_exit_seconds: float | None = option(
        "--idle-exit-seconds", type=click.FloatRange(min=0), default=WorkerOptions.idle_exit_seconds,
        show_envvar=True, described="wait for one",
        help="Exit 0 after this long (at least three heartbeats) without hearing from a ventilator (none started "
             "yet, or its job ended before this worker joined).")
    spot_watch: bool = option("--spot-watch/--no-spot-watch", default=False, show_envvar=True,
                              help="On EC2: watch the instance metadata service (IMDSv2) for a spot interruption "
                                   "notice, a rebalance recommendation or the Auto Scaling group's scale-in, and "
                                   "drain on any of them.")
    spot_watch_seconds: float = option("--spot-watch-seconds", type=click.FloatRange(min=0.05), default=5.0,
                                       show_envvar=True,
                                       help="How often --spot-watch asks (AWS updates the notices every 5 s).")
    imds_endpoint: str = option("--imds-endpoint", default=DEFAULT_ENDPOINT, show_envvar=True,
                                help="The instance metadata service --spot-watch asks (1 s timeouts).")
    spot_watch_cloud: str = option("--spot-watch-cloud", type=click.Choice(["ec2", "gce"]), default="ec2",
                                   show_envvar=True,
                                   help="Which cloud --spot-watch asks: EC2's IMDSv2, or Google Compute Engine's "
                                        "metadata server (instance/preempted, a terminating maintenance event).")
    gce_metadata_host: str = option("--gce-metadata-host", default="", metavar="HOST[:PORT]", show_envvar=True,
                                    help="The metadata server --spot-watch-cloud gce asks.",
                                    described="$GCE_METADATA_HOST, else metadata.google.internal, as Google's "
                                              "clients")
    notice_drain_seconds: float = option(
        "--notice-drain-seconds", type=click.FloatRange(min=0), default=DEFAULT_NOTICE_DRAIN_SECONDS,
        show_envvar=True, help="After a notice, how long to finish the current task before handing it back (a spot "
                               "notice's own time, less 15 s, caps it).")
    lifecycle_hook: str = option("--lifecycle-hook", default="", metavar="NAME", show_envvar=True,
                                 help="With --spot-watch and --autoscaling-group: complete this termination "
                                      "lifecycle hook's action once drained, so scale-in waits for the drain and no "
                                      "longer.", described="none")
    autoscaling_group: str = option("--autoscaling-group", default="", metavar="NAME", show_envvar=True,
                                    help="The Auto Scaling group of this instance (for --lifecycle-hook).",
                                    described="none")
    lifecycle_wait_seconds: float = option("--lifecycle-wait-seconds", type=click.FloatRange(min=0),
                                           default=LifecycleHook.wait_seconds, show_envvar=True,
                                           help="After exiting, how long to wait for the group to start terminating "
                                                "this instance.")
    verbose: int = option("-v", "--verbose", count=True, default=0, help="More logging.")
    storage: StorageSettings = field(default_factory=StorageSettings)

    def __post_init__(self):
        if bool(self.lifecycle_hook) != bool(self.autoscaling_group) or (self.lifecycle_hook and not self.spot_watch):
            raise SettingsError("--lifecycle-hook and --autoscaling-group go together, with --spot-watch")
        if self.lifecycle_hook and self.spot_watch_cloud != "ec2":
            raise SettingsError("--lifecycle-hook is an EC2 Auto Scaling hook: it needs --spot-watch-cloud ec2")
        # Accepted and ignored, these would leave a VM undrained while its operator believes it is watched.
        if self.spot_watch_cloud != "ec2" and not self.spot_watch:
            raise SettingsError(f"--spot-watch-cloud {self.spot_watch_cloud} needs --spot-watch")
        if self.gce_metadata_host and not (self.spot_watch and self.spot_watch_cloud == "gce"):
            raise SettingsError("--gce-metadata-host is for --spot-watch --spot-watch-cloud gce")
        if self.imds_endpoint != DEFAULT_ENDPOINT and self.spot_watch_cloud == "gce":
            raise SettingsError("--imds-endpoint is EC2's: with --spot-watch-cloud gce, --gce-metadata-host names "
                                "the metadata server")

    def worker_options(self) -> WorkerOptions:
        return WorkerOptions(ventilator=self.ventilator, sink=self.sink, credit=self.credit,
                             drain_seconds=self.drain_seconds, curve=Curve(self.curve_dir) if self.curve_dir else None,
                             idle_exit_seconds=self.idle_exit_seconds)

    def lifecycle(self) -> LifecycleHook | None:
        if not self.lifecycle_hook:
            return None
        return LifecycleHook(self.lifecycle_hook, self.autoscaling_group, self.lifecycle_wait_seconds)
