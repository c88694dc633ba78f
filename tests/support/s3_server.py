"""A throwaway, loopback-only S3 server (Ceph radosgw) for tests.

Thin wrapper around ``scripts/s3-server.sh``::

    from s3_server import S3Server, available

    reason = available()          # None, or why the server can't run here
    with S3Server() as s3:
        s3.client().create_bucket(Bucket="b")
        subprocess.run([...], env={**os.environ, **s3.env()})

Needs the Debian packages ``radosgw ceph-mon ceph-osd curl`` (see the script).
"""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "s3-server.sh"
REQUIRED_TOOLS = ("bash", "ceph", "ceph-mon", "ceph-osd", "monmaptool", "radosgw", "radosgw-admin", "curl")
INSTALL_HINT = "apt-get install -y radosgw ceph-mon ceph-osd curl"
# The script gives each daemon 60 s; this only guards against a hung script.
SCRIPT_TIMEOUT = 240
# How often to retry start when the ports we picked were taken in the meantime.
PORT_RETRIES = 3


def available() -> str | None:
    """None if the local S3 server can run here, else a reason to skip."""
    missing = [tool for tool in REQUIRED_TOOLS if shutil.which(tool) is None]
    if missing:
        return f"local S3 server needs {', '.join(missing)} ({INSTALL_HINT})"
    if not SCRIPT.is_file():
        return f"{SCRIPT} is missing"
    try:
        import boto3  # noqa: F401
    except ImportError:
        return "boto3 is not installed"
    return None


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_port_pair() -> int:
    """A loopback port P such that P (radosgw) and P+1 (monitor) are free."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port < 65535 and _port_is_free(port + 1):
            return port
    raise RuntimeError("could not find two consecutive free loopback ports")


class S3Server:
    """Context manager: starts the server on enter, stops it (and deletes its data) on exit."""

    def __init__(self, port: int | None = None):
        self._requested_port = port
        self.port: int | None = None
        self.workdir: Path | None = None
        self.endpoint_url = ""
        self.access_key = ""
        self.secret_key = ""
        self.region = ""

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> S3Server:
        attempts = 1 if self._requested_port else PORT_RETRIES
        for attempt in range(attempts):
            self.port = self._requested_port or _free_port_pair()
            self.workdir = Path(tempfile.mkdtemp(prefix="s3-server-"))
            try:
                proc = subprocess.run(
                    [str(SCRIPT), "start", str(self.workdir), str(self.port)],
                    capture_output=True, text=True, timeout=SCRIPT_TIMEOUT,
                )
                if proc.returncode == 0:
                    self._parse_exports(proc.stdout)
                    return self
            except BaseException:  # timeout, Ctrl-C, unparsable output: no orphans
                self._stop_quietly()
                raise
            self._stop_quietly()
            # Another process grabbed a port between our check and the start.
            if "already in use" in proc.stderr and attempt + 1 < attempts:
                continue
            raise RuntimeError(f"s3-server.sh start failed (exit {proc.returncode}):\n{proc.stderr}")
        raise AssertionError("unreachable")

    def stop(self) -> None:
        if self.workdir is None:
            return
        proc = subprocess.run(
            [str(SCRIPT), "stop", str(self.workdir)],
            capture_output=True, text=True, timeout=SCRIPT_TIMEOUT,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"s3-server.sh stop failed (exit {proc.returncode}):\n{proc.stderr}")
        # stop deletes the directory it created; mkdtemp's empty dir remains if start never got going
        shutil.rmtree(self.workdir, ignore_errors=True)
        self.workdir = None

    def new_bucket(self, prefix: str) -> str:
        """Create a bucket with a unique name (tests share one server)."""
        import uuid

        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.client().create_bucket(Bucket=name)
        return name

    def gateway(self, action: str) -> None:
        """'stop' or 'start' the S3 endpoint alone (an outage; data is kept)."""
        proc = subprocess.run([str(SCRIPT), f"gateway-{action}", str(self.workdir)],
                              capture_output=True, text=True, timeout=SCRIPT_TIMEOUT)
        if proc.returncode != 0:
            raise RuntimeError(f"s3-server.sh gateway-{action} failed:\n{proc.stderr}")

    def _stop_quietly(self) -> None:
        """stop() while another error is being reported: don't mask it."""
        try:
            self.stop()
        except Exception:
            pass

    def __enter__(self) -> S3Server:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def _parse_exports(self, stdout: str) -> None:
        exported = {}
        for line in stdout.splitlines():
            words = shlex.split(line)
            if len(words) == 2 and words[0] == "export" and "=" in words[1]:
                name, value = words[1].split("=", 1)
                exported[name] = value
        try:
            self.access_key = exported["AWS_ACCESS_KEY_ID"]
            self.secret_key = exported["AWS_SECRET_ACCESS_KEY"]
            self.region = exported["AWS_DEFAULT_REGION"]
            self.endpoint_url = exported["S3_ENDPOINT_URL"]
        except KeyError as missing:
            raise RuntimeError(f"s3-server.sh start printed no {missing}:\n{stdout}") from None

    # -- using it ----------------------------------------------------------

    def env(self) -> dict[str, str]:
        """Variables to merge into a subprocess environment to talk to this server."""
        no_proxy = ",".join(filter(None, [os.environ.get("NO_PROXY") or os.environ.get("no_proxy"), "127.0.0.1"]))
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": self.region,
            "S3_ENDPOINT_URL": self.endpoint_url,
            # A CI-wide HTTP(S)_PROXY must not swallow loopback traffic.
            "NO_PROXY": no_proxy,
            "no_proxy": no_proxy,
        }

    def client(self):
        """A boto3 S3 client for this server."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.region,
            config=Config(
                s3={"addressing_style": "path"},  # buckets can't be subdomains of 127.0.0.1
                proxies={},  # never via an environment proxy (HTTP_PROXY etc.)
            ),
        )
