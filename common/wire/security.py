"""Optional CURVE encryption and authentication for every socket (zmq.auth).

``mlm-keys DIR`` writes one key layout that all roles read with ``--curve-dir DIR``:

  DIR/server.key, DIR/server.key_secret   the ventilator and the sink serve with it
  DIR/client.key, DIR/client.key_secret   workers (and the sink, towards the ventilator)
  DIR/authorized/*.key                    public keys allowed to connect

Workers need only ``server.key`` and ``client.key_secret`` (copy those two to
worker hosts, mode 0600); ``server.key_secret`` stays on the ventilator/sink
host.  A peer whose public key is not in ``authorized/`` fails the CURVE
handshake: it receives no task, no configuration, and nothing it sends is
delivered.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from typing import TYPE_CHECKING

import click
import zmq
import zmq.auth
from zmq.utils import z85

if TYPE_CHECKING:  # imported where started: zmq.auth.thread imports asyncio (~15 ms in every role)
    from zmq.auth.thread import ThreadAuthenticator


class SecurityError(Exception):
    pass


@dataclass(frozen=True)
class Curve:
    directory: str

    def _path(self, *parts: str) -> str:
        path = os.path.join(self.directory, *parts)
        if not os.path.exists(path):
            raise SecurityError(f"--curve-dir {self.directory}: {os.path.join(*parts)} is missing "
                                f"(make the keys with: mlm-keys {self.directory})")
        return path

    def _load(self, name: str, secret: bool = False) -> tuple[bytes, bytes]:
        """The key pair in ``name`` (its secret key only where ``secret``), each checked to be a CURVE key:
        an unreadable or corrupt file is one line naming it, not a traceback in every process that reads it."""
        path = self._path(name)
        try:
            public, secret_key = zmq.auth.load_certificate(path)
        except (OSError, ValueError, UnicodeError) as error:
            raise SecurityError(f"--curve-dir {self.directory}: {name} cannot be read ({error}); make the keys "
                                f"with: mlm-keys {self.directory}") from None
        for kind, key in [("public", public), *([("secret", secret_key)] if secret else [])]:
            if key is None or not _is_key(key):
                raise SecurityError(f"--curve-dir {self.directory}: {name} holds no valid {kind} key (corrupt?); "
                                    f"make the keys with: mlm-keys {self.directory}")
        return public, secret_key or b""

    def check_client(self) -> None:
        """Raise :class:`SecurityError` unless a client's keys (``server.key``, ``client.key_secret``) load:
        called before any work, so a worker without them refuses in one line instead of restarting for ever."""
        self._load("client.key_secret", secret=True)
        self._load("server.key")

    def check_server(self) -> None:
        """Raise :class:`SecurityError` unless a server's keys (``server.key_secret``, ``authorized/``) load: the
        ventilator and the sink check them before any work."""
        self._load("server.key_secret", secret=True)
        self._path("authorized")

    def serve(self, sock: zmq.Socket) -> None:
        public, secret = self._load("server.key_secret", secret=True)
        sock.curve_secretkey = secret
        sock.curve_publickey = public
        sock.curve_server = True

    def connect_as_client(self, sock: zmq.Socket) -> None:
        """``sock`` authenticates with the client key pair and accepts only the server's key."""
        public, secret = self._load("client.key_secret", secret=True)
        server_public, _ = self._load("server.key")
        sock.curve_secretkey = secret
        sock.curve_publickey = public
        sock.curve_serverkey = server_public

    def start_authenticator(self, context: zmq.Context) -> ThreadAuthenticator:
        """ZAP handler for the context's server sockets: only authorized keys."""
        from zmq.auth.thread import ThreadAuthenticator

        authenticator = ThreadAuthenticator(context)
        authenticator.start()
        authenticator.configure_curve(domain="*", location=self._path("authorized"))
        return authenticator


def _is_key(key: bytes) -> bool:
    """A CURVE key as a certificate holds it: 40 Z85 characters, 32 bytes."""
    try:
        return len(key) == 40 and len(z85.decode(key)) == 32
    except (ValueError, KeyError):  # z85 raises KeyError on a character outside its alphabet
        return False


def generate(directory: str) -> None:
    os.makedirs(directory, exist_ok=True)
    authorized = os.path.join(directory, "authorized")
    os.makedirs(authorized, exist_ok=True)
    for name in ("server", "client"):
        if not os.path.exists(os.path.join(directory, f"{name}.key_secret")):
            zmq.auth.create_certificates(directory, name)
        os.chmod(os.path.join(directory, f"{name}.key_secret"), 0o600)
    shutil.copy(os.path.join(directory, "client.key"), os.path.join(authorized, "client.key"))


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("directory", type=click.Path(file_okay=False))
def main(directory: str) -> None:
    """Generate CURVE key pairs for --curve-dir DIRECTORY (kept if present)."""
    generate(directory)
    click.echo(f"keys in {directory}: give workers server.key and client.key_secret; "
               f"keep server.key_secret on the ventilator/sink host", err=True)


if __name__ == "__main__":
    main()
