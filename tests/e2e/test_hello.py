"""A Hello repeated before the ventilator's Welcome arrived is not answered again: the Welcome carries the
job's config with its tokenizer (~0.5 MB for BERT's), and a fleet of thousands joining at once, each
repeating its Hello while the ventilator works through the others, made a storm of Welcomes that starved
the grants (the scale simulation).  A Hello repeated later (a lost Welcome) is answered."""

from __future__ import annotations

import socket
import time

import pytest
import zmq

from common import protocol
from tests.helpers import VOCAB, WIKI, free_ports, need_shared, python_module, scrape

pytestmark = pytest.mark.e2e


def welcomes(dealer: zmq.Socket, seconds: float) -> int:
    count, deadline = 0, time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if dealer.poll(int(left * 1000)):
            count += isinstance(protocol.decode(dealer.recv()), protocol.Welcome)
    return count


def first_welcome(dealer: zmq.Socket, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if dealer.poll(int(left * 1000)) and isinstance(protocol.decode(dealer.recv()), protocol.Welcome):
            return True
    return False


def test_repeated_hellos_get_one_welcome_and_a_late_one_another(tmp_path):
    need_shared()
    vport, sink_port, metrics_port = free_ports(3)
    ventilator = python_module("ventilator", "--data", WIKI, "--output", tmp_path / "out", "--vocab-file", VOCAB,
                               "--vport", vport, "--sink-port", sink_port, "--bind-host", "127.0.0.1",
                               "--state-dir", tmp_path / "state", "--heartbeat-seconds", "1",
                               "--metrics-port", metrics_port)
    context = zmq.Context()
    dealer = context.socket(zmq.DEALER)
    dealer.setsockopt(zmq.IDENTITY, b"worker-hello-test")
    dealer.connect(f"tcp://127.0.0.1:{vport}")
    hello = protocol.encode(protocol.Hello("worker-hello-test", socket.gethostname(), 1, "worker"))
    try:
        for _ in range(3):  # queued before the ventilator listens: they reach it together
            dealer.send(hello)
        assert first_welcome(dealer, 60)
        assert welcomes(dealer, 1.0) == 0, "a repeated Hello was answered again"
        time.sleep(2.2)  # past max(2 s, the heartbeat interval) since the Welcome: a lost Welcome is sent again
        dealer.send(hello)
        assert welcomes(dealer, 5.0) == 1
        metrics = scrape(metrics_port)
        assert metrics[("mlm_ventilator_repeated_hellos_total", ())] == 2
    finally:
        dealer.close(linger=0)
        context.term()
        ventilator.terminate()
        ventilator.wait(timeout=60)
