"""Nothing lost, nothing duplicated: each run under faults must end with the
same shards, records and sha256 as a clean run, each task listed once, and
no extra files."""

import json
import random
import signal
import socket
import threading
import time
from pathlib import Path

import pytest
import zmq

from tests.cluster import Cluster
from tests.helpers import VOCAB, WIKI, manifest, need_shared, run_ventilator, shard_digests

pytestmark = [pytest.mark.e2e, pytest.mark.faults]

JOB = ["--vocab-file", VOCAB, "--dupe-factor", "3", "--task-size", "96K"]


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    need_shared()
    output = tmp_path_factory.mktemp("clean") / "out"
    result = run_ventilator(WIKI, output, *JOB, "--workers", "2")
    assert result.returncode == 0, result.stderr[-3000:]
    return output


def assert_same_as_clean(output: Path, clean: Path) -> None:
    ours, reference = manifest(output), manifest(clean)  # manifest() fails on a task listed twice
    assert set(ours) == set(reference)
    for task, entry in reference.items():
        assert (ours[task]["records"], ours[task]["sha256"]) == (entry["records"], entry["sha256"])
    assert shard_digests(output) == shard_digests(clean)
    extra = {p.name for p in output.iterdir()} - {p.name for p in clean.iterdir()}
    assert not extra, f"extra files: {extra}"


@pytest.fixture
def cluster(tmp_path):
    clusters = []

    def make(workers=3, **kwargs):
        c = Cluster(WIKI, tmp_path / "out", JOB, tmp_path, **kwargs)
        clusters.append(c)
        return c.start(workers)

    yield make
    for c in clusters:
        c.close()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_kill_9_random_workers(clean, cluster, seed):
    rng = random.Random(seed)
    c = cluster(workers=3)
    total = len(manifest(clean))
    kills = 0
    for _ in range(4):
        # Random points while work remains (as preemptions hit a running job).
        c.wait_for_progress(min(total - 5, c.progress() + rng.randint(1, 3)))
        time.sleep(rng.uniform(0.0, 1.5))
        live = c.live_workers()
        if c.ventilator.poll() is not None or not live:
            break
        c.kill(rng.choice(live))
        kills += 1
        c.start_worker()
    assert c.wait() == 0, c.tail()
    assert kills >= 2
    assert_same_as_clean(c.output, clean)


def test_kill_9_ventilator_and_restart(clean, cluster):
    c = cluster(workers=2)
    c.wait_for_progress(5)
    c.kill(c.ventilator)
    time.sleep(1)
    c.start_ventilator()  # the same command
    assert c.wait() == 0, c.tail()
    assert_same_as_clean(c.output, clean)


def test_kill_9_sink_and_restart(clean, cluster):
    c = cluster(workers=2)
    c.wait_for_progress(5)
    c.kill(c.sink)
    time.sleep(2)  # acks pile up in the workers' queues meanwhile
    c.start_sink()
    assert c.wait() == 0, c.tail()
    assert_same_as_clean(c.output, clean)


def test_sigterm_worker_mid_task_drains(clean, cluster):
    c = cluster(workers=2)
    c.wait_for_progress(3)
    victim = c.live_workers()[0]
    started = time.monotonic()
    victim.send_signal(signal.SIGTERM)
    assert victim.wait(timeout=60) == 0
    assert time.monotonic() - started < 30
    assert c.wait() == 0, c.tail()
    assert "drained, exiting" in c.log_text()
    assert_same_as_clean(c.output, clean)


def test_fuzzed_sockets_during_a_run(clean, cluster):
    """Thousands of malformed frames at the ventilator's and the sink's sockets,
    over ZeroMQ and as raw TCP garbage, while the job runs."""
    c = cluster(workers=2)
    stop = threading.Event()
    sent = {"zmq": 0, "tcp": 0}

    def fuzz():
        rng = random.Random(4)
        context = zmq.Context()
        dealer = context.socket(zmq.DEALER)
        dealer.connect(f"tcp://127.0.0.1:{c.vport}")
        push = context.socket(zmq.PUSH)
        push.connect(f"tcp://127.0.0.1:{c.sink_port}")
        import msgpack
        templates = [
            lambda: bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 64))),
            lambda: msgpack.packb({"v": 1, "t": "TaskAck", "task_id": 5}),
            lambda: msgpack.packb({"v": 2, "t": "Hello"}),
            lambda: msgpack.packb({"v": 1, "t": "TaskFinished", "task_id": "x" * rng.randint(0, 30)}),
            lambda: msgpack.packb({"v": 1, "t": "Heartbeat", "held": ["nope"]}),
            lambda: msgpack.packb({"v": 1, "t": "SinkHello", "sink_id": "evil", "done": []}),
            lambda: msgpack.packb([1, 2, 3])[:rng.randint(0, 3)],
            lambda: b"\x00" * (rng.randint(1, 2_000_000) if rng.random() < 0.02 else rng.randint(1, 300)),
        ]
        while not stop.is_set() and sent["zmq"] < 6000:
            frame = rng.choice(templates)()
            try:
                if rng.random() < 0.3:
                    dealer.send_multipart([frame, frame], zmq.NOBLOCK)
                else:
                    (dealer if rng.random() < 0.5 else push).send(frame, zmq.NOBLOCK)
            except zmq.Again:  # queue full: the peer is busy or gone
                time.sleep(0.01)
            sent["zmq"] += 1
            if sent["zmq"] % 500 == 0:
                for port in (c.vport, c.sink_port):
                    try:
                        with socket.create_connection(("127.0.0.1", port), timeout=2) as raw:
                            raw.sendall(bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 4096))))
                            sent["tcp"] += 1
                    except OSError:
                        pass
            time.sleep(0.0005)
        dealer.close(linger=0)
        push.close(linger=0)
        context.term()

    fuzzer = threading.Thread(target=fuzz)
    fuzzer.start()
    try:
        code = c.wait()
    finally:
        stop.set()
        fuzzer.join()
    assert code == 0, c.tail()
    assert sent["zmq"] >= 1000 and sent["tcp"] >= 2
    assert "dropped a message" in c.log_text()
    assert_same_as_clean(c.output, clean)
    summary = json.loads((c.output / "summary.json").read_text())
    assert sum(summary["dropped_messages"].values()) > 0


def test_curve_keeps_out_workers_without_the_key(clean, tmp_path):
    import shutil

    from common import protocol
    from common.security import generate

    keys, intruder = tmp_path / "keys", tmp_path / "intruder"
    generate(str(keys))
    generate(str(intruder))
    shutil.copy(keys / "server.key", intruder / "server.key")  # it knows the server's public key, not a client secret
    c = Cluster(WIKI, tmp_path / "out", JOB, tmp_path, curve_dir=keys)
    try:
        c.start_sink()
        outsiders = [c._start("intruder", "worker", ["--ventilator", f"127.0.0.1:{c.vport}", "--processes", "1",
                                                     "--curve-dir", intruder]),
                     c._start("plain", "worker", ["--ventilator", f"127.0.0.1:{c.vport}", "--processes", "1"])]
        c.start_ventilator()
        time.sleep(3)  # the outsiders are connected first: they would get the first tasks
        c.start_worker()
        # A forged acknowledgement pushed without CURVE never reaches the manifest.
        context = zmq.Context()
        push = context.socket(zmq.PUSH)
        push.connect(f"tcp://127.0.0.1:{c.sink_port}")
        forged = protocol.TaskAck("forged", "job", "intruder", "x", 0, 1, "v", "/etc/passwd", 1, "0" * 64, {})
        for _ in range(50):
            push.send(protocol.encode(forged), zmq.NOBLOCK)
        assert c.wait() == 0, c.tail()
        push.close(linger=0)
        context.term()
        for outsider in outsiders:
            assert outsider.poll() is None, "an outsider was told the job ended: it talked to the ventilator"
        outsider_logs = "\n".join(log.read_text() for log in c.logs if log.name.startswith(("intruder", "plain")))
        assert "job " not in outsider_logs, "an outsider received the job configuration"
        assert "forged" not in {e["task"] for e in manifest(c.output).values()}
        assert_same_as_clean(c.output, clean)
    finally:
        for outsider in outsiders:
            outsider.kill()
        c.close()


@pytest.mark.s3
def test_s3_endpoint_down_for_10_seconds(clean, s3, tmp_path):
    import uuid

    client = s3.client()
    bucket = f"outage-{uuid.uuid4().hex[:8]}"
    client.create_bucket(Bucket=bucket)
    c = Cluster(WIKI, f"s3://{bucket}/run", [*JOB, "--s3-endpoint-url", s3.endpoint_url], tmp_path, env=s3.env())
    try:
        c.start(workers=2)
        c.wait_for_progress(4)
        s3.gateway("stop")
        try:
            time.sleep(10)
        finally:
            s3.gateway("start")
        assert c.wait() == 0, c.tail()
        assert "retrying" in c.log_text(), "the outage was not noticed"
    finally:
        c.close()
    download = tmp_path / "download"
    download.mkdir()
    for obj in client.list_objects_v2(Bucket=bucket, Prefix="run/")["Contents"]:
        client.download_file(bucket, obj["Key"], str(download / obj["Key"].split("/", 1)[1]))
    assert_same_as_clean(download, clean)
