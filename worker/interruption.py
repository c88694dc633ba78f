"""Notice that this instance is about to go: the EC2 instance metadata service.

A spot worker learns from IMDSv2 that it will be taken away: a spot
interruption notice (``spot/instance-action``, two minutes ahead), a
rebalance recommendation (``events/recommendations/rebalance``, earlier and
softer), or the Auto Scaling group's scale-in (``autoscaling/target-lifecycle-state``
becomes ``Terminated`` while its termination lifecycle hook waits for us).
Any of them means: stop taking tasks, finish or hand back what is held
before the deadline, exit 0.

Off EC2 nothing here runs unless asked (``--spot-watch``), and every request
has a short timeout, so a worker elsewhere is never slowed.  The endpoint is
an option so tests serve a fake IMDSv2 on loopback.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # imported where a request is made: urllib.request costs every worker ~15 ms to import
    import urllib.request

log = logging.getLogger("worker")

DEFAULT_ENDPOINT = "http://169.254.169.254"
TOKEN_TTL_SECONDS = 21600
#: Drain deadline for a notice that names no time (rebalance, scale-in): inside a spot notice's two minutes.
DEFAULT_NOTICE_DRAIN_SECONDS = 90.0
#: Seconds kept in hand before a spot notice's termination time: the release must reach the ventilator.
SPOT_SAFETY_SECONDS = 15.0

SPOT_ACTION = "/latest/meta-data/spot/instance-action"
REBALANCE = "/latest/meta-data/events/recommendations/rebalance"
LIFECYCLE_STATE = "/latest/meta-data/autoscaling/target-lifecycle-state"
INSTANCE_ID = "/latest/meta-data/instance-id"
IDENTITY = "/latest/dynamic/instance-identity/document"


class MetadataError(Exception):
    """A cloud's metadata service could not be asked (unreachable, timed out, an unexpected answer)."""


class ImdsError(MetadataError):
    """EC2's instance metadata service could not be asked."""


@dataclass(frozen=True)
class Notice:
    """Why this instance goes, and by when (wall-clock seconds) what it holds must be handed back."""

    kind: str  # "spot-interruption", "rebalance-recommendation", "scale-in"
    release_at: float
    detail: str = ""


class Imds:
    """A minimal IMDSv2 client: a session token, then GETs that carry it."""

    def __init__(self, endpoint: str = DEFAULT_ENDPOINT, timeout: float = 1.0):
        self.endpoint = endpoint.rstrip("/")
        self.timeout = timeout
        self._token = ""
        self._token_expires = 0.0

    def _request(self, request: urllib.request.Request) -> tuple[int, str]:
        import urllib.error
        import urllib.request

        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return response.status, response.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as error:
            return error.code, ""
        except (OSError, ValueError) as error:  # unreachable, timed out, refused
            raise ImdsError(f"instance metadata service at {self.endpoint}: {error}") from None

    def token(self) -> str:
        import urllib.request

        if not self._token or time.monotonic() > self._token_expires:
            status, body = self._request(urllib.request.Request(
                f"{self.endpoint}/latest/api/token", method="PUT",
                headers={"X-aws-ec2-metadata-token-ttl-seconds": str(TOKEN_TTL_SECONDS)}))
            if status != 200 or not body:
                raise ImdsError(f"instance metadata service at {self.endpoint}: token request answered {status}")
            self._token, self._token_expires = body, time.monotonic() + TOKEN_TTL_SECONDS / 2
        return self._token

    def get(self, path: str) -> str | None:
        """The value at ``path``, or None where IMDS has none (404)."""
        import urllib.request

        status, body = self._request(urllib.request.Request(
            f"{self.endpoint}{path}", headers={"X-aws-ec2-metadata-token": self.token()}))
        if status == 401:  # token expired early (instance stopped and started): once more with a new one
            self._token = ""
            status, body = self._request(urllib.request.Request(
                f"{self.endpoint}{path}", headers={"X-aws-ec2-metadata-token": self.token()}))
        if status == 404:
            return None
        if status != 200:
            raise ImdsError(f"instance metadata service: {path} answered {status}")
        return body

    def identity(self) -> dict:
        """instance id, region, ... from the instance identity document."""
        body = self.get(IDENTITY)
        try:
            return json.loads(body or "{}")
        except json.JSONDecodeError:
            raise ImdsError("instance metadata service: the identity document is not JSON") from None


def _parse_time(text: str) -> float | None:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC).timestamp()
    except (TypeError, ValueError):
        return None


def classify(spot_action: str | None, rebalance: str | None, lifecycle_state: str | None, now: float,
             drain_seconds: float = DEFAULT_NOTICE_DRAIN_SECONDS) -> Notice | None:
    """The most urgent notice among IMDS's answers (pure: tests and the watcher share it).

    A spot notice's own termination time caps the drain (less a safety
    margin); the others name no time, so ``drain_seconds`` applies."""
    default = now + drain_seconds
    if spot_action is not None:
        try:
            action = json.loads(spot_action)
        except json.JSONDecodeError:
            action = {}
        action = action if isinstance(action, dict) else {}
        ends = _parse_time(action.get("time", ""))
        release_at = default if ends is None else min(default, max(now, ends - SPOT_SAFETY_SECONDS))
        return Notice("spot-interruption", release_at, f"{action.get('action', '?')} at {action.get('time', '?')}")
    if lifecycle_state is not None and lifecycle_state.strip() == "Terminated":
        return Notice("scale-in", default, "the Auto Scaling group is terminating this instance")
    if rebalance is not None:
        return Notice("rebalance-recommendation", default, rebalance.strip()[:200])
    return None


class NoticeSource(Protocol):
    """Where a cloud says this instance is about to go (EC2's IMDS here, Google's metadata server in
    worker/gce_metadata.py): the watcher asks it, and drains the same way whichever cloud answered."""

    def check(self, now: float, drain_seconds: float) -> Notice | None:
        """The most urgent notice now, or None; raises MetadataError when the service cannot be asked."""


class Ec2Notices:
    """EC2's notices: a spot interruption, a rebalance recommendation, the Auto Scaling group's scale-in."""

    def __init__(self, imds: Imds):
        self.imds = imds

    def check(self, now: float, drain_seconds: float) -> Notice | None:
        return classify(self.imds.get(SPOT_ACTION), self.imds.get(REBALANCE), self.imds.get(LIFECYCLE_STATE),
                        now, drain_seconds)


class InterruptionWatcher(threading.Thread):
    """Asks ``source`` every ``interval`` seconds; calls ``on_notice`` once, with the first notice.

    A metadata service unreachable is logged once and asked again: the
    watcher never stops the worker it watches for."""

    def __init__(self, source: NoticeSource | Imds, on_notice: Callable[[Notice], None], interval: float = 5.0,
                 drain_seconds: float = DEFAULT_NOTICE_DRAIN_SECONDS):
        super().__init__(name="interruption-watcher", daemon=True)
        self.source: NoticeSource = Ec2Notices(source) if isinstance(source, Imds) else source
        self.on_notice = on_notice
        self.interval = interval
        self.drain_seconds = drain_seconds
        self.notice: Notice | None = None
        self._stopped = threading.Event()
        self._warned = False

    def check(self) -> Notice | None:
        return self.source.check(time.time(), self.drain_seconds)

    def run(self) -> None:
        while not self._stopped.is_set():
            try:
                notice = self.check()
            except MetadataError as error:
                if not self._warned:
                    log.warning("interruption watch: %s (watching on)", error)
                    self._warned = True
                notice = None
            if notice is not None:
                self.notice = notice
                log.warning("interruption watch: %s (%s): draining, handing back what is not done in %.0fs",
                            notice.kind, notice.detail, max(0.0, notice.release_at - time.time()))
                self.on_notice(notice)
                return
            self._stopped.wait(self.interval)

    def stop(self) -> None:
        self._stopped.set()
