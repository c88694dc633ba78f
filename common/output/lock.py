"""One run per output at a time: a lock object in the output, held under a lease its holder renews.

Two runs on one output (a Slurm requeue beside a manual resubmit, two operators, a retried CI job) would
both hand out its tasks and list them twice.  The ventilator takes the lock before it plans anything and
keeps it to its end; a second run is refused in one line naming the holder (host, pid, job).

The lock is ``.mlm-pipeline.lock`` in the output, made with the storage's one conditional primitive,
``create_if_absent`` (an exclusive hard link locally; a PUT with ``If-None-Match: *`` on S3, which AWS and
Ceph radosgw honour): of two runs starting together exactly one creates it.  Its holder rewrites it every
``RENEW_SECONDS`` with a new expiry.  A holder that died is taken over:

- at once when it ran on this host, in this pid namespace, and its process is gone (the same pid and start
  time: a reused pid is another process);
- otherwise once its lease has expired by ``SKEW_SECONDS`` more (hosts' clocks differ).

Taking over is itself exclusive: the taker first creates ``.mlm-pipeline.lock.takeover-<holder's token>``
(only one taker of a given dead holder wins it), then checks the lock still holds what it judged dead, and
only then writes its own.  A holder that was only paused past its lease finds that marker (or another
token in the lock) at its next renewal, and its run stops with an error instead of going on beside the
new one (for at most one renewal period both may run: a pause longer than the lease is a broken host).

A marker names its taker as a lock does.  A taker that died mid-takeover (killed, or its write of the lock
failed and it exited) leaves it behind; judged as a holder is (its process gone, or its lease expired), it
is passed: the next taker creates the marker that follows it, named after the marker and its dead taker
(``...takeover-<holder's token>-<sha256>``).  Every taker that finds the same dead one goes for the same next
name, so that step is exclusive too, and a live taker's marker still turns every other taker away (the
message names the file).  The winner removes the markers it passed once its lock is written; a taker whose
write fails removes its own.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

log = logging.getLogger(__name__)

LOCK_NAME = ".mlm-pipeline.lock"
LEASE_SECONDS = 60.0
RENEW_SECONDS = 15.0
#: How long past its expiry another host's lock is still respected (clocks of two hosts differ).
SKEW_SECONDS = 30.0
#: Markers of takers that died mid-takeover passed in one takeover, at most (more is another fault: refused).
MAX_DEAD_TAKERS = 8


class OutputLocked(Exception):
    """Another run holds the output (the message says who, in one line)."""


def _process_identity(pid: int) -> str | None:
    """The boot, the pid namespace and the start time of a live process: a pid reused later is another
    process.  None if there is no such process (or it is a zombie: killed, not yet reaped)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read().decode(errors="replace")
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] in ("Z", "X"):
            return None
        with open("/proc/sys/kernel/random/boot_id") as handle:
            boot = handle.read().strip()
        namespace = os.readlink("/proc/self/ns/pid")
        return f"{boot}/{namespace}/{fields[19]}"
    except (OSError, ValueError, IndexError):
        return None


@dataclass(frozen=True)
class Holder:
    """Who holds the lock, as its file says."""

    host: str
    pid: int
    job: str
    token: str  # this holding's own name: a takeover names the holding it ends
    process: str  # _process_identity of the holder, "" when it could not be read
    started: float
    expires: float

    def encode(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode() + b"\n"

    @classmethod
    def decode(cls, data: bytes) -> Holder:
        """ValueError for a file that is not a lock of ours (any other bytes: the file is hostile)."""
        try:
            fields = json.loads(data)
        except ValueError:
            raise ValueError("not JSON") from None
        if not isinstance(fields, dict):
            raise ValueError("not a JSON object")
        kinds = {"host": str, "pid": int, "job": str, "token": str, "process": str, "started": float,
                 "expires": float}
        values: dict[str, Any] = {}
        for name, kind in kinds.items():
            value = fields.get(name)
            if kind is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            if not isinstance(value, kind) or isinstance(value, bool):
                raise ValueError(f"its {name} is missing or not a {kind.__name__}")
            values[name] = value
        if values["expires"] != values["expires"] or values["started"] != values["started"]:
            raise ValueError("its times are not numbers")
        return cls(**values)

    def describe(self) -> str:
        return f"host {self.host}, pid {self.pid}, job {self.job}"

    def gone(self, now: float) -> str | None:
        """Why the holder can be taken over (None: it may still be running)."""
        if self.host == socket.gethostname() and self.process and self.process.split("/")[:2] == (
                (_process_identity(os.getpid()) or "").split("/")[:2]):
            if _process_identity(self.pid) != self.process:
                return "its process is gone"
            return None
        if now > self.expires + SKEW_SECONDS:
            return f"its lease expired {now - self.expires:.0f} s ago"
        return None


class OutputLock:
    """The lock of one output, for one run: :meth:`acquire`, renewed by a thread until :meth:`release`."""

    def __init__(self, storage, job_id: str, lease_seconds: float = LEASE_SECONDS,
                 renew_seconds: float = RENEW_SECONDS, clock=time.time):
        self.storage = storage
        self.job_id = job_id
        self.lease_seconds = lease_seconds
        self.renew_seconds = renew_seconds
        self.clock = clock
        self.holder: Holder | None = None
        self.lost: str | None = None  # why the lock was lost while held (the run must stop)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _me(self, token: str, started: float) -> Holder:
        return Holder(socket.gethostname(), os.getpid(), self.job_id, token, _process_identity(os.getpid()) or "",
                      started, self.clock() + self.lease_seconds)

    def acquire(self) -> None:
        """Hold the output, or OutputLocked naming who does."""
        me = self._me(uuid.uuid4().hex, self.clock())
        where = self.storage.uri("").rstrip("/")
        for _attempt in range(5):
            if self.storage.create_if_absent(LOCK_NAME, me.encode()):
                self.holder = me
                return
            data = self.storage.get_bytes(LOCK_NAME)
            if data is None:
                continue  # released meanwhile
            try:
                holder = Holder.decode(data)
            except ValueError as error:
                raise OutputLocked(f"--output {where} holds a lock file mlm-pipeline cannot read ({LOCK_NAME}: "
                                   f"{error}); remove it if no run uses this output") from None
            if holder.token == me.token:  # our own create, whose answer was lost and retried
                self.holder = me
                return
            why = holder.gone(self.clock())
            if why is None:
                raise OutputLocked(
                    f"--output {where} is in use by another run ({holder.describe()}, its lease renewed until "
                    f"{time.strftime('%H:%M:%S', time.localtime(holder.expires))}): wait for it to end or stop "
                    f"it; a holder that died is taken over once its lease expires")
            marker, passed = self._takeover_marker(holder, me)
            if self.storage.get_bytes(LOCK_NAME) != data:  # renewed or released meanwhile: judge again
                self.storage.remove(marker)
                continue
            try:
                self.storage.put_bytes(LOCK_NAME, me.encode())
            except BaseException:
                self.storage.remove(marker)  # left behind, it would turn every later run away
                raise
            for name in [marker, *passed]:
                self.storage.remove(name)
            log.warning("output %s: took over the lock of %s (%s)", where, holder.describe(), why)
            self.holder = me
            return
        raise OutputLocked(f"--output {where}: its lock changed hands five times while this run tried to take it")

    def _takeover_marker(self, holder: Holder, me: Holder) -> tuple[str, list[str]]:
        """The takeover marker of ``holder`` this run created, and the markers of dead takers it passed on the
        way; OutputLocked when a live run is taking over (naming its marker, to remove if no run is)."""
        where = self.storage.uri("").rstrip("/")
        marker = f"{LOCK_NAME}.takeover-{holder.token}"
        passed: list[str] = []
        for _attempt in range(4 * MAX_DEAD_TAKERS):
            if len(passed) > MAX_DEAD_TAKERS:
                break
            if self.storage.create_if_absent(marker, me.encode()):
                return marker, passed
            found = self.storage.get_bytes(marker)
            if found is None:
                continue  # removed meanwhile (its taker is done, or gave up): try the same name again
            try:
                taker = Holder.decode(found)
            except ValueError as error:
                raise OutputLocked(f"--output {where}: {self.storage.uri(marker)} is not a takeover marker "
                                   f"mlm-pipeline can read ({error}); remove it if no run uses this output") from None
            if taker.token == me.token:  # our own create, whose answer was lost and retried
                return marker, passed
            dead = taker.gone(self.clock())
            if dead is None:
                raise OutputLocked(f"--output {where}: another run ({taker.describe()}) is taking over the lock of a "
                                   f"dead run ({holder.describe()}) at this moment; if no run is, remove "
                                   f"{self.storage.uri(marker)}")
            log.warning("output %s: passing %s, left by a run that died taking over the lock (%s, %s)", where,
                        self.storage.uri(marker), taker.describe(), dead)
            passed.append(marker)
            step = hashlib.sha256(f"{marker}\n{taker.token}".encode()).hexdigest()[:16]
            marker = f"{LOCK_NAME}.takeover-{holder.token}-{step}"
        raise OutputLocked(f"--output {where}: {len(passed)} runs died taking over its lock, or its takeover markers "
                           f"keep changing; remove the files "
                           f"{self.storage.uri(LOCK_NAME)}.takeover-* if no run uses this output")

    def renew(self) -> bool:
        """Push the expiry on; False (and ``lost`` says why) if the lock is no longer ours."""
        if self.holder is None or self.lost:
            return False
        data = self.storage.get_bytes(LOCK_NAME)
        try:
            current = Holder.decode(data) if data is not None else None
        except ValueError:
            current = None
        if current is None or current.token != self.holder.token:
            self.lost = (f"the lock of --output {self.storage.uri('')} was taken by another run "
                         f"({current.describe() if current else 'the lock file is gone'})")
            return False
        marker = f"{LOCK_NAME}.takeover-{self.holder.token}"
        if self.storage.get_bytes(marker) is not None:
            self.lost = (f"another run is taking over the lock of --output {self.storage.uri('')} (this run's lease "
                         f"had expired; its marker: {self.storage.uri(marker)})")
            return False
        self.holder = self._me(self.holder.token, self.holder.started)
        self.storage.put_bytes(LOCK_NAME, self.holder.encode())
        return True

    def start_renewing(self) -> None:
        def loop() -> None:
            while not self._stop.wait(self.renew_seconds):
                try:
                    if not self.renew():
                        log.error("%s", self.lost)
                        return
                except Exception as error:  # a store down for a while: try again next time
                    log.warning("could not renew the lock of %s: %s", self.storage.uri(""), error)

        self._thread = threading.Thread(target=loop, name="output-lock", daemon=True)
        self._thread.start()

    def release(self) -> None:
        """Stop renewing and remove the lock if it is still ours."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        if self.holder is None or self.lost:
            return
        try:
            data = self.storage.get_bytes(LOCK_NAME)
            if data is not None and Holder.decode(data).token == self.holder.token:
                self.storage.remove(LOCK_NAME)
        except Exception as error:  # the lease ends it anyway
            log.warning("could not release the lock of %s (%s): it expires in %.0f s", self.storage.uri(""), error,
                        self.lease_seconds)
        self.holder = None

    def __enter__(self) -> OutputLock:
        self.acquire()
        self.start_renewing()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
