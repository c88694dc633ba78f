#!/usr/bin/env python3
"""Test hosts on a real network: network namespaces on a bridge, each with its own sshd.

Each "host" is a network namespace with its own address on a bridge in the
project's range 10.213.0.0/24 (one /28 per fleet, so several fleets can live
side by side) and an sshd of its own (config, host key, pidfile and log in the
fleet directory, not /etc/ssh) listening only on that address, key-only, with
a key generated for the fleet. The hosts share this machine's filesystem and
PID space, nothing else: they reach each other over the bridge only, and have
no route anywhere else (no default route, no forwarding).

Ansible runs from the root namespace and reaches them over ssh, with the
inventory written to DIR/inventory.yml: the same shape as Terraform's static
inventory (groups ventilator and worker, ansible_host, mlm_private_address),
plus the ssh settings and a per-host mlm_install_dir (DIR/hostN), since the
hosts share one filesystem.

    sudo python3 tests/fleet/fleetnet.py up --dir /tmp/mlm-fleet --hosts 4
    ansible-playbook -i /tmp/mlm-fleet/inventory.yml ansible/ping.yaml
    sudo python3 tests/fleet/fleetnet.py down --dir /tmp/mlm-fleet
    sudo python3 tests/fleet/fleetnet.py cleanup        # leftovers of dead runs

(scripts/fleet-setup.sh wraps this.) Needs root, iproute2 and openssh-server.
Every fleet is recorded in /run/mlm-fleet/TAG.json with the pid that owns it;
`cleanup` (and every `up`) removes the fleets whose owner has died, plus any
namespace or bridge with this tool's naming pattern that no record claims.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import ipaddress
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field

NETWORK = ipaddress.ip_network("10.213.0.0/24")
SLOT_PREFIX = 28  # 16 fleets of up to 13 hosts
REGISTRY = "/run/mlm-fleet"
SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
TAG_RE = re.compile(r"^mf[0-9a-f]{4}$")
NS_RE = re.compile(r"^(mf[0-9a-f]{4})h[0-9]+$")
BRIDGE_RE = re.compile(r"^(mf[0-9a-f]{4})br$")


class FleetError(RuntimeError):
    pass


def run(*argv: str, check: bool = True, capture: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, capture_output=capture, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise FleetError(f"{' '.join(argv)} failed ({proc.returncode}): {(proc.stderr or proc.stdout).strip()}")
    return proc


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is not alive.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def preflight() -> str | None:
    """None if this machine can host a fleet, else the reason it cannot."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, veth, a bridge)"
    if not shutil.which("ip"):
        return "needs iproute2 (`ip`)"
    if not os.path.exists(SSHD):
        return "needs openssh-server (sshd): apt-get install -y openssh-server"
    if not shutil.which("ssh-keygen"):
        return "needs ssh-keygen (openssh-client)"
    probe = f"mfprobe{os.getpid() % 100000}"
    proc = run("ip", "netns", "add", probe, check=False)
    if proc.returncode != 0:
        return f"`ip netns add` failed: {(proc.stderr or proc.stdout).strip()}"
    run("ip", "netns", "del", probe, check=False)
    return None


@dataclass
class Host:
    name: str  # inventory name
    netns: str
    veth: str
    address: str
    dir: str


@dataclass
class Fleet:
    tag: str
    dir: str
    slot: int
    bridge: str
    bridge_address: str
    prefixlen: int
    owner_pid: int | None
    hosts: list[Host] = field(default_factory=list)

    # ------------------------------------------------------------ files
    @property
    def key(self) -> str:
        return os.path.join(self.dir, "id_ed25519")

    @property
    def known_hosts(self) -> str:
        return os.path.join(self.dir, "known_hosts")

    @property
    def inventory_path(self) -> str:
        return os.path.join(self.dir, "inventory.yml")

    def save(self) -> None:
        data = json.dumps(asdict(self), indent=2)
        with open(os.path.join(self.dir, "fleet.json"), "w") as f:
            f.write(data)
        os.makedirs(REGISTRY, exist_ok=True)
        with open(os.path.join(REGISTRY, f"{self.tag}.json"), "w") as f:
            f.write(data)

    @classmethod
    def from_dict(cls, data: dict) -> Fleet:
        hosts = [Host(**h) for h in data.pop("hosts", [])]
        return cls(**data, hosts=hosts)

    @classmethod
    def load(cls, directory: str) -> Fleet:
        with open(os.path.join(directory, "fleet.json")) as f:
            return cls.from_dict(json.load(f))

    # ------------------------------------------------------------ inventory
    def inventory(self, ventilators: int = 1, python: str | None = None) -> dict:
        """The Terraform static inventory's shape, plus ssh settings and per-host install dirs."""
        ssh_args = (f"-F /dev/null -o UserKnownHostsFile={self.known_hosts} -o StrictHostKeyChecking=yes "
                    f"-o IdentitiesOnly=yes -o ConnectTimeout=10")
        def host_vars(h: Host) -> dict:
            return {"ansible_host": h.address, "mlm_private_address": h.address, "mlm_install_dir": h.dir}
        all_vars = {
            "ansible_user": "root",
            "ansible_ssh_private_key_file": self.key,
            "ansible_ssh_common_args": ssh_args,
            # These hosts have no systemd and share this machine's filesystem:
            "mlm_process_manager": "pidfile",
            "mlm_install_system_packages": False,
        }
        # The interpreter for Ansible's modules and for the venvs: explicit, so
        # discovery does not wander into shims (pyenv) of the login environment.
        all_vars["ansible_python_interpreter"] = python or "/usr/bin/python3"
        if python:
            all_vars["mlm_python"] = python
        return {"all": {
            "vars": all_vars,
            "children": {
                "ventilator": {"hosts": {h.name: host_vars(h) for h in self.hosts[:ventilators]}},
                "worker": {"hosts": {h.name: host_vars(h) for h in self.hosts[ventilators:]}},
            },
        }}

    def write_inventory(self, python: str | None = None) -> str:
        # JSON is YAML: no PyYAML needed here.
        with open(self.inventory_path, "w") as f:
            json.dump(self.inventory(python=python), f, indent=2)
        return self.inventory_path

    # ------------------------------------------------------------ lifecycle
    def create(self, count: int) -> None:
        slot_net = list(NETWORK.subnets(new_prefix=SLOT_PREFIX))[self.slot]
        addresses = list(slot_net.hosts())
        if count + 1 > len(addresses):
            raise FleetError(f"at most {len(addresses) - 1} hosts per fleet")
        self.bridge_address = str(addresses[0])
        self.prefixlen = slot_net.prefixlen
        self.save()  # recorded before anything exists, so a crash half-way is cleaned up
        run("ip", "link", "add", self.bridge, "type", "bridge")
        run("ip", "addr", "add", f"{self.bridge_address}/{self.prefixlen}", "dev", self.bridge)
        run("ip", "link", "set", self.bridge, "up")
        for i in range(count):
            host = Host(name=f"{self.tag}-host{i}", netns=f"{self.tag}h{i}", veth=f"{self.tag}v{i}",
                        address=str(addresses[i + 1]), dir=os.path.join(self.dir, f"host{i}"))
            self.hosts.append(host)
            self.save()
            os.makedirs(host.dir, exist_ok=True)
            run("ip", "netns", "add", host.netns)
            run("ip", "link", "add", host.veth, "type", "veth", "peer", "name", "eth0", "netns", host.netns)
            run("ip", "link", "set", host.veth, "master", self.bridge)
            run("ip", "link", "set", host.veth, "up")
            run("ip", "-n", host.netns, "addr", "add", f"{host.address}/{self.prefixlen}", "dev", "eth0")
            run("ip", "-n", host.netns, "link", "set", "eth0", "up")
            run("ip", "-n", host.netns, "link", "set", "lo", "up")
        self._start_sshds()
        self.save()

    def _start_sshds(self) -> None:
        run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"mlm-fleet-{self.tag}", "-f", self.key)
        authorized = os.path.join(self.dir, "authorized_keys")
        shutil.copy(self.key + ".pub", authorized)
        os.chmod(authorized, 0o600)
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation directory
        known = []
        for host in self.hosts:
            ssh_dir = os.path.join(host.dir, "ssh")
            os.makedirs(ssh_dir, exist_ok=True)
            host_key = os.path.join(ssh_dir, "ssh_host_ed25519_key")
            run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", host_key)
            with open(host_key + ".pub") as f:
                known.append(f"{host.address} {' '.join(f.read().split()[:2])}")
            config = os.path.join(ssh_dir, "sshd_config")
            with open(config, "w") as f:
                f.write("\n".join([
                    "# sshd of a test host (tests/fleet/fleetnet.py): this namespace's address only, key only.",
                    "Port 22",
                    f"ListenAddress {host.address}",
                    f"HostKey {host_key}",
                    f"PidFile {os.path.join(ssh_dir, 'sshd.pid')}",
                    f"AuthorizedKeysFile {authorized}",
                    "PermitRootLogin prohibit-password",
                    "PubkeyAuthentication yes",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "UsePAM no",
                    "StrictModes no",
                    "PrintMotd no",
                    "X11Forwarding no",
                    "AllowTcpForwarding no",
                    "MaxSessions 50",
                    "MaxStartups 50:30:100",
                    "Subsystem sftp internal-sftp",
                    "",
                ]))
            run("ip", "netns", "exec", host.netns, SSHD, "-t", "-f", config)
            argv = ["ip", "netns", "exec", host.netns, SSHD, "-f", config, "-E", os.path.join(ssh_dir, "sshd.log")]
            if self.owner_pid == os.getpid():
                # In-process owner (the test): sshd stays our child (-D), so it and everything
                # orphaned below it is reaped by us, not left as zombies under a PID 1 that may not reap.
                become_subreaper()
                subprocess.Popen([*argv, "-D"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, start_new_session=True)
            else:
                run(*argv)
        with open(self.known_hosts, "w") as f:
            f.write("\n".join(known) + "\n")
        deadline = time.monotonic() + 20
        for host in self.hosts:
            while True:
                with contextlib.suppress(OSError), socket.create_connection((host.address, 22), timeout=1) as s:
                    if s.recv(64).startswith(b"SSH-"):
                        break
                if time.monotonic() > deadline:
                    raise FleetError(f"sshd on {host.netns} ({host.address}) does not answer; see "
                                     f"{os.path.join(host.dir, 'ssh', 'sshd.log')}")
                time.sleep(0.1)

    def ssh(self, host: Host, command: str, timeout: float = 30) -> subprocess.CompletedProcess:
        return run("ssh", "-F", "/dev/null", "-i", self.key, "-o", f"UserKnownHostsFile={self.known_hosts}",
                   "-o", "StrictHostKeyChecking=yes", "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
                   f"root@{host.address}", command, check=False, timeout=timeout)

    def destroy(self) -> list[str]:
        """Kill every process in the namespaces, delete them and the bridge. Never raises."""
        problems: list[str] = []
        netns_names = {h.netns for h in self.hosts} | {
            n for n in list_netns() if (m := NS_RE.match(n)) and m.group(1) == self.tag}
        for netns in sorted(netns_names):
            problems += kill_netns_processes(netns)
            proc = run("ip", "netns", "del", netns, check=False)
            if proc.returncode != 0 and netns in list_netns():
                problems.append(f"ip netns del {netns}: {proc.stderr.strip()}")
        for host in self.hosts:
            run("ip", "link", "del", host.veth, check=False)
        if bridge_exists(self.bridge):
            proc = run("ip", "link", "del", self.bridge, check=False)
            if proc.returncode != 0:
                problems.append(f"ip link del {self.bridge}: {proc.stderr.strip()}")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(REGISTRY, f"{self.tag}.json"))
        reap_children()
        return problems


def become_subreaper() -> None:
    """Orphans of our descendants become our children (Linux prctl PR_SET_CHILD_SUBREAPER)."""
    with contextlib.suppress(Exception):
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)


def reap_children() -> None:
    """Collect every child that has ended (sshd, orphaned supervisors) without blocking."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def list_netns() -> list[str]:
    proc = run("ip", "netns", "list", check=False)
    return [line.split()[0] for line in proc.stdout.splitlines() if line.strip()]


def list_bridges() -> list[str]:
    proc = run("ip", "-o", "link", "show", "type", "bridge", check=False)
    return [line.split(":")[1].strip().split("@")[0] for line in proc.stdout.splitlines() if ":" in line]


def bridge_exists(name: str) -> bool:
    return name in list_bridges()


def kill_netns_processes(netns: str, grace: float = 5.0) -> list[str]:
    """SIGTERM every process whose network namespace is netns (all started by us), then SIGKILL."""
    def pids() -> list[int]:
        proc = run("ip", "netns", "pids", netns, check=False)
        return [int(p) for p in proc.stdout.split() if p.isdigit() and int(p) != os.getpid()]
    found = pids()
    for pid in found:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(pid_alive(p) for p in found):
        time.sleep(0.1)
    for pid in pids():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    time.sleep(0.1)
    left = [p for p in pids() if pid_alive(p)]
    return [f"processes left in {netns}: {left}"] if left else []


@contextlib.contextmanager
def registry_lock():
    os.makedirs(REGISTRY, exist_ok=True)
    with open(os.path.join(REGISTRY, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def registered() -> list[Fleet]:
    fleets = []
    with contextlib.suppress(FileNotFoundError):
        for name in sorted(os.listdir(REGISTRY)):
            if name.endswith(".json"):
                with contextlib.suppress(OSError, ValueError, TypeError):
                    with open(os.path.join(REGISTRY, name)) as f:
                        fleets.append(Fleet.from_dict(json.load(f)))
    return fleets


def cleanup(everything: bool = False) -> list[str]:
    """Remove fleets whose owner died (all fleets if everything), and unclaimed leftovers."""
    removed = []
    live_tags = set()
    for fleet in registered():
        if everything or not pid_alive(fleet.owner_pid) and fleet.owner_pid is not None:
            fleet.destroy()
            removed.append(fleet.tag)
        else:
            live_tags.add(fleet.tag)
    for netns in list_netns():
        m = NS_RE.match(netns)
        if m and m.group(1) not in live_tags:
            kill_netns_processes(netns)
            run("ip", "netns", "del", netns, check=False)
            removed.append(netns)
    for bridge in list_bridges():
        m = BRIDGE_RE.match(bridge)
        if m and m.group(1) not in live_tags:
            run("ip", "link", "del", bridge, check=False)
            removed.append(bridge)
    return removed


def used_slots() -> set[int]:
    """/28 slots of 10.213.0.0/24 already holding an address on this machine or claimed by a fleet."""
    used = {f.slot for f in registered()}
    proc = run("ip", "-o", "-4", "addr", "show", check=False)
    for match in re.finditer(r"inet (\d+\.\d+\.\d+\.\d+)/", proc.stdout):
        address = ipaddress.ip_address(match.group(1))
        if address in NETWORK:
            used.add((int(address) - int(NETWORK.network_address)) >> (32 - SLOT_PREFIX))
    return used


def up(directory: str, count: int = 4, owner_pid: int | None = None, python: str | None = None) -> Fleet:
    """Create a fleet of count hosts in directory (created); host 0 is the ventilator."""
    reason = preflight()
    if reason:
        raise FleetError(reason)
    directory = os.path.abspath(directory)
    os.makedirs(directory, exist_ok=True)
    with registry_lock():
        cleanup()
        free = [s for s in range(2 ** (SLOT_PREFIX - NETWORK.prefixlen)) if s not in used_slots()]
        if not free:
            raise FleetError("no free /28 left in 10.213.0.0/24 (run `fleetnet.py cleanup --all`?)")
        existing = {f.tag for f in registered()} | {m.group(1) for n in list_netns() if (m := NS_RE.match(n))}
        while (tag := "mf" + secrets.token_hex(2)) in existing:
            pass
        fleet = Fleet(tag=tag, dir=directory, slot=free[0], bridge=f"{tag}br", bridge_address="",
                      prefixlen=SLOT_PREFIX, owner_pid=owner_pid)
        try:
            fleet.create(count)
        except BaseException:
            fleet.destroy()
            raise
    fleet.write_inventory(python=python)
    return fleet


def down(directory: str) -> list[str]:
    fleet = Fleet.load(os.path.abspath(directory))
    with registry_lock():
        return fleet.destroy()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("up", help="create hosts (namespaces + sshd) and DIR/inventory.yml")
    p.add_argument("--dir", required=True)
    p.add_argument("--hosts", type=int, default=4, help="host 0 is the ventilator, the others workers")
    p.add_argument("--python", default=None,
                   help="interpreter the playbooks build the venvs from (mlm_python); default: python3 on the hosts")
    p.add_argument("--owner-pid", type=int, default=None,
                   help="remove this fleet at the next cleanup once that process has died (default: keep until `down`)")
    p = sub.add_parser("down", help="kill everything in the hosts and remove them")
    p.add_argument("--dir", required=True)
    p = sub.add_parser("cleanup", help="remove fleets whose owner died and unclaimed leftovers")
    p.add_argument("--all", action="store_true", help="remove every fleet, owned or not")
    sub.add_parser("list", help="fleets on this machine")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "up":
            fleet = up(args.dir, args.hosts, owner_pid=args.owner_pid, python=args.python)
            print(f"fleet {fleet.tag}: bridge {fleet.bridge} {fleet.bridge_address}/{fleet.prefixlen}")
            for host in fleet.hosts:
                print(f"  {host.name}  netns {host.netns}  {host.address}  dir {host.dir}")
            print(f"inventory: {fleet.inventory_path}")
            print(f"ssh: ssh -i {fleet.key} -o UserKnownHostsFile={fleet.known_hosts} root@{fleet.hosts[0].address}")
        elif args.cmd == "down":
            problems = down(args.dir)
            for problem in problems:
                print(problem, file=sys.stderr)
            return 1 if problems else 0
        elif args.cmd == "cleanup":
            if preflight() == "needs root (network namespaces, veth, a bridge)":
                raise FleetError("needs root")
            with registry_lock():
                for name in cleanup(everything=args.all):
                    print(f"removed {name}")
        elif args.cmd == "list":
            for fleet in registered():
                state = "owner alive" if pid_alive(fleet.owner_pid) else (
                    "kept until down" if fleet.owner_pid is None else "owner dead")
                print(f"{fleet.tag} {fleet.dir} {len(fleet.hosts)} hosts ({state})")
    except FleetError as error:
        print(f"fleetnet: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
