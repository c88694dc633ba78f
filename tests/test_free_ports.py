"""The ports tests and benchmarks hand to the roles they start (bench/procs.py ``free_ports``)."""

import socket
import subprocess
import sys

from bench import procs
from tests.support.helpers import REPO


def test_ports_are_distinct_free_and_below_the_kernels_ephemeral_range():
    """Below the range the kernel gives outgoing connections and binds to port 0 their ports, a port found free
    cannot be taken by one of the suite's thousands of connections before the role binds it."""
    ports = procs.free_ports(5) + procs.free_ports(3)
    assert len(set(ports)) == 8
    assert all(procs._PORTS_LOW <= port < procs._ephemeral_low() for port in ports), ports
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_port_in_use_is_passed_over():
    cursor = procs._cursor or procs._PortCursor()
    procs._cursor = cursor
    taken = cursor.start + cursor.offset  # the next port it would try
    with socket.socket() as held:
        held.bind(("127.0.0.1", taken))
        held.listen()
        ports = procs.free_ports(2)
    assert taken not in ports and len(set(ports)) == 2


def test_each_xdist_worker_has_its_own_block():
    """Two xdist workers never try the same port: their blocks are disjoint."""
    code = ("import bench.procs as p; p.free_ports(1); c = p._cursor; print(c.start, c.start + c.size)")
    blocks = []
    for worker in ("gw0", "gw1", "gw2"):
        ran = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60,
                             env={"PYTEST_XDIST_WORKER": worker, "PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
        assert ran.returncode == 0, ran.stderr
        blocks.append(tuple(map(int, ran.stdout.split())))
    for (low, high), (other_low, other_high) in zip(blocks, blocks[1:]):
        assert high <= other_low or other_high <= low, blocks
