"""A Hello repeated before the ventilator's Welcome arrived is not answered again: the Welcome carries the
job's config with its tokenizer (~0.5 MB for BERT's), and a fleet of thousands joining at once, each
repeating its Hello while the ventilator works through the others, made a storm of Welcomes that starved
the grants (the scale simulation).  A Hello repeated later (a lost Welcome) is answered."""

from __future__ import annotations

import socket
import time

import pytest
import zmq

from common.wire import protocol
from tests.support.helpers import VOCAB, WIKI, free_ports, need_shared, python_module, scrape

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


def test_a_welcome_over_a_megabyte_reaches_the_sink(tmp_path):
    """The Welcome carries the tokenizer: a vocabulary of 80k WordPiece tokens (multilingual BERT has 120k)
    makes it over 1 MB, the inbound limit of the sockets that bind.  The sink's connection to its
    ventilator is not one of those: with that limit it was cut at each Welcome, and the job waited forever
    for a sink that was never welcomed."""
    import itertools
    import string
    import subprocess

    from common.tokenization.vocabulary import load_vocabulary

    need_shared()
    tokens = VOCAB.read_text(encoding="utf-8").splitlines()
    known = set(tokens)
    extra = (f"##{''.join(letters)}" for letters in itertools.product(string.ascii_lowercase, repeat=4))
    tokens += list(itertools.islice((token for token in extra if token not in known), 50_000))
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    assert len(load_vocabulary(str(vocab)).to_json().encode()) > protocol.MAX_INBOUND_BYTES

    vport, sink_port = free_ports(2)
    log = tmp_path / "ventilator.log"
    with open(log, "w") as out:  # a file, not a pipe: its sink and workers write there too
        ventilator = python_module("ventilator", "--data", WIKI / "AA", "--output", tmp_path / "out",
                                   "--vocab-file", vocab, "--workers", "1", "--vport", vport, "--sink-port",
                                   sink_port, "--bind-host", "127.0.0.1", "--state-dir", tmp_path / "state",
                                   stdout=out)
    try:
        ventilator.wait(timeout=90)
    except subprocess.TimeoutExpired:
        ventilator.terminate()  # it stops its sink and workers
        ventilator.wait(timeout=150)
        pytest.fail(f"the job never finished: {log.read_text()[-2000:]}")
    output = log.read_text()
    assert ventilator.returncode == 0, output[-2000:]
    assert "ready: 0 of 1 tasks already done" in output, output[-2000:]
    assert (tmp_path / "out" / "manifest.jsonl").read_text().count("\n") == 1
