"""Hostile but well-formed frames at the roles the other fuzz tests do not
reach: a worker, through a fake ventilator in front of the real one, and a
live loader while a rank pulls an epoch.  The frames are structured msgpack
drawn by hypothesis (types that are lists, maps, floats, None or bytes;
versions that are not ints; deep nesting; ext types; known types with
wrong-typed fields).  Each run must end with the bytes of a clean one."""

from __future__ import annotations

import threading
import time

import msgpack
import pytest
import zmq
from hypothesis import strategies as st

from common.wire import protocol
from loader import messages
from loader.client import LoaderClient, server_status
from tests.faults.test_faults import JOB, assert_same_as_clean, clean  # noqa: F401  (the module's clean run)
from tests.support.cluster import Cluster
from tests.support.helpers import WIKI, drawn_values, free_ports
from tests.support.loader_helpers import LoaderProcess

pytestmark = [pytest.mark.e2e, pytest.mark.faults]

_leaves = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**64 - 1), st.floats(allow_nan=True),
                    st.text(max_size=12), st.binary(max_size=12))
_values = st.recursive(_leaves, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                        st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                       max_leaves=12)


def hostile_frames(version: int, type_names: list[str], count: int, seed: int) -> list[bytes]:
    """``count`` structured frames, drawn by hypothesis, plus the known killers."""
    fields = st.dictionaries(st.sampled_from(["task_id", "peer_id", "config", "reason", "session", "rank",
                                              "world_size", "epoch", "batch", "consumed", "known", "ventilator_id",
                                              "task", "lease_seconds", "content", "features"]),
                             _values, max_size=6)
    frame = st.builds(lambda v, t, f: msgpack.packb({**f, "v": v, "t": t}, use_bin_type=True),
                      st.one_of(st.just(version), _values),
                      st.one_of(st.sampled_from(type_names), _values), fields)
    drawn: list[bytes] = drawn_values(frame, count)
    killers = [msgpack.packb({"v": version, "t": []}), msgpack.packb({"v": version, "t": {}}),
               msgpack.packb({"v": [], "t": type_names[0]}), b"\x91" * 5000 + b"\xc0",
               msgpack.packb({"v": version, "t": msgpack.ExtType(5, b"x")})]
    return killers + drawn


class FakeVentilator:
    """A ROUTER between one worker and the real ventilator: it forwards both
    ways under the worker's own identity, and sends the worker hostile frames
    in between."""

    def __init__(self, upstream_port: int, frames: list[bytes]):
        self.port = free_ports(1)[0]
        self.upstream_port = upstream_port
        self.frames = frames
        self.sent = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        context = zmq.Context()
        front = context.socket(zmq.ROUTER)
        front.bind(f"tcp://127.0.0.1:{self.port}")
        back = None
        identity = None
        poller = zmq.Poller()
        poller.register(front, zmq.POLLIN)
        next_hostile = 0
        try:
            while not self.stop.is_set():
                for sock, _ in poller.poll(20):
                    if sock is front:
                        frames = front.recv_multipart()
                        if back is None:
                            identity = frames[0]
                            back = context.socket(zmq.DEALER)
                            back.setsockopt(zmq.IDENTITY, identity)
                            back.connect(f"tcp://127.0.0.1:{self.upstream_port}")
                            poller.register(back, zmq.POLLIN)
                        back.send_multipart(frames[1:])
                    else:
                        front.send_multipart([identity, *back.recv_multipart()])
                for _ in range(5):
                    if identity is not None and next_hostile < len(self.frames):
                        front.send_multipart([identity, self.frames[next_hostile]])
                        next_hostile += 1
                        self.sent = next_hostile
        finally:
            front.close(linger=0)
            if back is not None:
                back.close(linger=0)
            context.term()


def test_a_worker_fed_hostile_frames_by_its_ventilator_finishes_the_run(clean, tmp_path):
    frames = hostile_frames(protocol.PROTOCOL_VERSION, list(protocol.MESSAGE_TYPES), 600, seed=1)
    c = Cluster(WIKI, tmp_path / "out", JOB, tmp_path)
    c.start_sink()
    c.start_ventilator()
    fake = FakeVentilator(c.vport, frames)
    worker = c._start("worker", "worker", ["--ventilator", f"127.0.0.1:{fake.port}", "--processes", "1"])
    c.workers.append(worker)
    try:
        assert c.wait(timeout=600) == 0, c.tail()
        assert worker.wait(timeout=60) == 0, c.tail()
    finally:
        fake.stop.set()
        c.close()
    assert fake.sent == len(frames), f"only {fake.sent} of {len(frames)} hostile frames were sent"
    assert "Traceback" not in c.log_text() and "dropped a message" in c.log_text()
    assert_same_as_clean(c.output, clean)


def test_a_loader_fed_hostile_frames_serves_the_epoch_of_a_clean_one(loader_dataset):
    frames = hostile_frames(messages.VERSION, list(messages.TYPES), 1500, seed=2)
    with LoaderProcess(loader_dataset, "--batch-size", 128) as server:
        with LoaderClient(server.address, timeout_seconds=60) as client:
            reference = []
            while not (batch := client.next_batch()).last_in_epoch:
                reference.append(batch)
            reference.append(batch)

        context = zmq.Context()
        attacker = context.socket(zmq.DEALER)
        attacker.connect(f"tcp://{server.address}")
        done = threading.Event()

        def attack():
            for frame in frames:
                attacker.send(frame)
                time.sleep(0.0005)
            done.set()

        thread = threading.Thread(target=attack)
        thread.start()
        try:
            with LoaderClient(server.address, timeout_seconds=60) as client:
                got = []
                while not (batch := client.next_batch()).last_in_epoch:
                    got.append(batch)
                got.append(batch)
        finally:
            thread.join()
            attacker.close(linger=0)
            context.term()
        assert done.is_set() and server.process.poll() is None, "the loader ended"
        status = server_status(server.address)
        assert status.dropped > 100
    assert len(got) == len(reference)
    for ours, theirs in zip(got, reference):
        assert (ours.record_ids == theirs.record_ids).all()
        for name, array in theirs.features.items():
            assert (ours.features[name] == array).all(), name
