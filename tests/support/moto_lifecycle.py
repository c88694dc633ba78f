"""moto in server mode on loopback, in a process of its own, with the one
Auto Scaling action it lacks.

Each server is a separate process (``python -m tests.support.moto_lifecycle PORT
RECORD``): moto keeps its backends in process-global state, and a threaded
server inside the pytest process shared that state, and the interpreter, with
every other test: one request stuck behind the GIL or a lock poisoned every
later moto user (a botocore ReadTimeoutError, then 30 s hangs in the next
module's reset). A process starts empty, so no reset is needed, and a stuck
one is killed at ``stop()`` without touching any other test.

moto 5 does not implement CompleteLifecycleAction; the server process adds it
to moto's Auto Scaling responses: it checks what AWS checks (the hook exists
on the group, the instance is a member) and appends each completion, as a
JSON line, to the RECORD file that :meth:`MotoServer.completed` reads.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from tempfile import mkdtemp

import pytest

pytest.importorskip("moto.server", reason="moto[server] is not installed")

from tests.support.helpers import REPO, free_ports

#: How long a fresh server process may take to answer (it imports all of moto).
START_SECONDS = 60


class MotoServer:
    """One moto server process; ``endpoint`` is its URL."""

    def __init__(self) -> None:
        (self.port,) = free_ports(1)
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._dir = Path(mkdtemp(prefix="moto-"))
        self._record = self._dir / "completed.jsonl"
        self._log = open(self._dir / "server.log", "w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.moto_lifecycle", str(self.port), str(self._record)],
            cwd=REPO, stdout=self._log, stderr=subprocess.STDOUT)
        self._wait_until_serving()

    def _wait_until_serving(self) -> None:
        deadline = time.monotonic() + START_SECONDS
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"moto server exited with {self.process.returncode}: {self.log()[-2000:]}")
            try:
                urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=2).close()
                return
            except (urllib.error.URLError, OSError):
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"moto server did not answer within {START_SECONDS}s: "
                                       f"{self.log()[-2000:]}") from None
                time.sleep(0.1)

    def reset(self) -> None:
        """Empty state, as a fresh server has: moto's own reset, and the record of lifecycle calls."""
        request = urllib.request.Request(f"{self.endpoint}/moto-api/reset", method="POST")
        urllib.request.urlopen(request, timeout=30).close()
        self._record.unlink(missing_ok=True)

    def completed(self) -> list[tuple[str, str, str, str]]:
        """(hook, group, instance id, result) of every accepted CompleteLifecycleAction."""
        if not self._record.exists():
            return []
        return [tuple(entry) for entry in self._entries() if entry[0] != "TERMINATED"]

    def terminated(self) -> list[tuple[str, str]]:
        """(instance id, ShouldDecrementDesiredCapacity) of every TerminateInstanceInAutoScalingGroup."""
        return [tuple(entry[1:]) for entry in self._entries() if entry[0] == "TERMINATED"]

    def _entries(self) -> list[list]:
        if not self._record.exists():
            return []
        return [json.loads(line) for line in self._record.read_text().splitlines() if line]

    def log(self) -> str:
        return (self._dir / "server.log").read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)
        self._log.close()
        shutil.rmtree(self._dir, ignore_errors=True)


def start_moto() -> tuple[MotoServer, str]:
    """A moto server process on a free loopback port, with empty state: (server, endpoint URL)."""
    server = MotoServer()
    return server, server.endpoint


def aws_env(endpoint: str) -> dict[str, str]:
    """Environment for a process that must talk to moto only (fake credentials, no real config)."""
    return {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1", "AWS_CONFIG_FILE": "/dev/null",
            "AWS_SHARED_CREDENTIALS_FILE": "/dev/null", "AWS_EC2_METADATA_DISABLED": "true"}


def _serve(port: int, record: Path) -> None:
    """The server process: moto's Werkzeug app with CompleteLifecycleAction added."""
    from moto import server as moto_server
    from moto.autoscaling.exceptions import ValidationError
    from moto.autoscaling.responses import AutoScalingResponse
    from moto.core.responses import EmptyResult

    left_through_the_hook: set[str] = set()  # terminated by request while a termination hook exists

    def complete_lifecycle_action(self) -> EmptyResult:
        hook, group = self._get_param("LifecycleHookName"), self._get_param("AutoScalingGroupName")
        instance, result = self._get_param("InstanceId"), self._get_param("LifecycleActionResult")
        backend = self.autoscaling_backend
        if f"{group}_{hook}" not in backend.lifecycle_hooks:
            raise ValidationError(f"No Lifecycle Hook found with name {hook} for group {group}")
        members = {state.instance.id for state in backend.autoscaling_groups[group].instance_states}
        members |= left_through_the_hook
        if instance not in members or result not in ("CONTINUE", "ABANDON"):
            raise ValidationError(f"No active Lifecycle Action found with instance ID {instance}")
        with open(record, "a") as out:
            out.write(json.dumps([hook, group, instance, result]) + "\n")
        return EmptyResult()

    if not hasattr(AutoScalingResponse, "complete_lifecycle_action"):
        AutoScalingResponse.complete_lifecycle_action = complete_lifecycle_action
    # moto terminates at once where AWS holds the instance in Terminating:Wait for the termination hook (which
    # then accepts CompleteLifecycleAction for it): remember it, and record the call (TERMINATED lines).
    terminate = AutoScalingResponse.terminate_instance_in_auto_scaling_group

    def terminate_instance_in_auto_scaling_group(self):
        instance = self._get_param("InstanceId")
        decrement = self._get_param("ShouldDecrementDesiredCapacity")
        left_through_the_hook.add(instance)
        with open(record, "a") as out:
            out.write(json.dumps(["TERMINATED", instance, str(decrement).lower()]) + "\n")
        return terminate(self)

    AutoScalingResponse.terminate_instance_in_auto_scaling_group = terminate_instance_in_auto_scaling_group
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        while True:
            time.sleep(3600)
    finally:
        server.stop()


if __name__ == "__main__":
    _serve(int(sys.argv[1]), Path(sys.argv[2]))
