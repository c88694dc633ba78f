"""Notice that this Google Compute Engine VM is about to go: the metadata server.

A Spot (or preemptible) VM is told it is being preempted about 30 seconds ahead: the metadata server's
``instance/preempted`` turns ``TRUE`` as the guest gets its ACPI soft-off, and the shutdown script runs.
A host maintenance event that will stop the VM (``instance/maintenance-event`` =
``TERMINATE_ON_HOST_MAINTENANCE``) comes 60 seconds ahead.  Either starts the same drain as an EC2 spot
notice (worker/interruption.py): stop taking tasks, hand back what is not done before the deadline, exit 0.
A managed instance group's scale-in deletes the VM, which runs the shutdown script: terraform/gcp's
shutdown script stops the worker service, and SIGTERM drains the same way.

The server is found as Google's own clients find it: ``GCE_METADATA_HOST`` (host[:port]), else
``metadata.google.internal``; every request carries ``Metadata-Flavor: Google`` and an answer without
that header is not the metadata server's (google-auth checks the same).
"""

from __future__ import annotations

import os

from worker.interruption import MetadataError, Notice

DEFAULT_HOST = "metadata.google.internal"
#: Google's variable for the metadata server's address (google-auth and the Cloud SDKs read it).
HOST_VARIABLE = "GCE_METADATA_HOST"
PREEMPTED = "instance/preempted"
MAINTENANCE_EVENT = "instance/maintenance-event"
#: A preemption's ACPI soft-off comes ~30 s before the VM stops; keep 5 s for the hand-back to arrive.
PREEMPTION_NOTICE_SECONDS = 30.0
#: A terminating host maintenance event is announced 60 s ahead.
MAINTENANCE_NOTICE_SECONDS = 60.0
SAFETY_SECONDS = 5.0


def metadata_host(explicit: str = "") -> str:
    """The metadata server's host[:port]: the one given, else GCE_METADATA_HOST, else Google's name."""
    return explicit or os.environ.get(HOST_VARIABLE, "") or DEFAULT_HOST


class GceMetadata:
    """A minimal metadata-server client: GETs with ``Metadata-Flavor: Google``, short timeouts."""

    def __init__(self, host: str = "", timeout: float = 1.0):
        self.host = metadata_host(host)
        self.timeout = timeout

    def get(self, path: str) -> str | None:
        """The value at ``computeMetadata/v1/<path>``, or None where the server has none (404)."""
        import urllib.error  # here: urllib.request costs every worker ~15 ms to import, and few watch GCE
        import urllib.request

        request = urllib.request.Request(f"http://{self.host}/computeMetadata/v1/{path}",
                                         headers={"Metadata-Flavor": "Google"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                if response.headers.get("Metadata-Flavor") != "Google":
                    raise MetadataError(f"{self.host} answered {path} without Metadata-Flavor: Google: "
                                        "not a metadata server")
                return response.read(4096).decode("utf-8", "replace")
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return None
            raise MetadataError(f"metadata server {self.host}: {path} answered {error.code}") from None
        except (OSError, ValueError) as error:  # unreachable, timed out, refused
            raise MetadataError(f"metadata server {self.host}: {error}") from None


def classify(preempted: str | None, maintenance_event: str | None, now: float, drain_seconds: float) -> Notice | None:
    """The most urgent notice among the metadata server's answers (pure)."""
    if preempted is not None and preempted.strip().upper() == "TRUE":
        ends = now + PREEMPTION_NOTICE_SECONDS - SAFETY_SECONDS
        return Notice("spot-preemption", min(now + drain_seconds, ends), "instance/preempted is TRUE")
    if maintenance_event is not None and maintenance_event.strip().upper().startswith("TERMINATE"):
        ends = now + MAINTENANCE_NOTICE_SECONDS - SAFETY_SECONDS
        return Notice("host-maintenance", min(now + drain_seconds, ends), maintenance_event.strip()[:200])
    return None


class GceNotices:
    """Google Compute Engine's notices, for the interruption watcher (worker/interruption.py)."""

    def __init__(self, metadata: GceMetadata):
        self.metadata = metadata

    def check(self, now: float, drain_seconds: float) -> Notice | None:
        return classify(self.metadata.get(PREEMPTED), self.metadata.get(MAINTENANCE_EVENT), now, drain_seconds)
