"""Nothing lost, nothing duplicated: each run under faults must end with the
same shards, records and sha256 as a clean run, each task listed once, and
no extra files."""

import json
import random
import re
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import pytest
import zmq

from tests.support.cluster import Cluster
from tests.support.factories import finished_job
from tests.support.helpers import VOCAB, WIKI, free_ports, manifest, need_shared, run_ventilator, scrape, shard_digests

pytestmark = [pytest.mark.e2e, pytest.mark.faults]

JOB = ["--vocab-file", VOCAB, "--dupe-factor", "5", "--task-size", "64K"]


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    return finished_job(tmp_path_factory.mktemp("clean"), *JOB, "--workers", "2")


def assert_same_as_clean(output: Path, clean: Path) -> int:
    """Returns the records checked (all present once, none extra)."""
    ours, reference = manifest(output), manifest(clean)  # manifest() fails on a task listed twice
    assert set(ours) == set(reference)
    for task, entry in reference.items():
        assert (ours[task]["records"], ours[task]["shards"]) == (entry["records"], entry["shards"])
    assert shard_digests(output) == shard_digests(clean)
    extra = {p.name for p in output.iterdir()} - {p.name for p in clean.iterdir()}
    assert not extra, f"extra files: {extra}"
    return sum(entry["records"] for entry in ours.values())


def download_prefix(client, bucket: str, prefix: str, target: Path) -> Path:
    target.mkdir()
    for obj in client.list_objects_v2(Bucket=bucket, Prefix=prefix)["Contents"]:
        client.download_file(bucket, obj["Key"], str(target / obj["Key"][len(prefix):]))
    return target


def figure(text: str) -> None:
    """A line for docs/reliability.md (shown with pytest -s)."""
    print(f"\nFIGURE {text}", file=sys.stderr)


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
    # Kill points: random progress points in the first half of the job, so
    # that work is left after each even on a fast machine (as preemptions hit
    # a running job), a short random delay after each.
    points = sorted(rng.sample(range(1, max(6, total // 2)), 4))
    kills = 0
    for point in points:
        c.wait_for_progress(point)
        time.sleep(rng.uniform(0.0, 0.3))
        live = c.live_workers()
        if c.ventilator.poll() is not None or not live:
            break
        c.kill(rng.choice(live))
        kills += 1
        c.start_worker()
    assert c.wait() == 0, c.tail()
    assert kills == 4
    records = assert_same_as_clean(c.output, clean)
    figure(f"kill -9 workers, schedule seed {seed}: {kills} workers killed, {records} records, 0 lost, 0 duplicated")


def test_kill_9_ventilator_and_restart(clean, cluster):
    c = cluster(workers=2)
    c.wait_for_progress(5)
    c.kill(c.ventilator)
    time.sleep(1)
    c.start_ventilator()  # the same command
    assert c.wait() == 0, c.tail()
    records = assert_same_as_clean(c.output, clean)
    figure(f"kill -9 ventilator, restarted: {records} records, 0 lost, 0 duplicated")


def test_kill_9_sink_and_restart(clean, cluster):
    c = cluster(workers=2)
    c.wait_for_progress(5)
    c.kill(c.sink)
    time.sleep(2)  # acks pile up in the workers' queues meanwhile
    c.start_sink()
    assert c.wait() == 0, c.tail()
    records = assert_same_as_clean(c.output, clean)
    figure(f"kill -9 sink, restarted: {records} records, 0 lost, 0 duplicated")


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
    records = assert_same_as_clean(c.output, clean)
    figure(f"SIGTERM worker mid-task: exited 0 in {time.monotonic() - started:.1f}s, {records} records, 0 lost")


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

        from common.wire.protocol import PROTOCOL_VERSION as v
        templates = [
            lambda: bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 64))),
            lambda: msgpack.packb({"v": v, "t": "TaskAck", "task_id": 5}),
            lambda: msgpack.packb({"v": v + 1, "t": "Hello"}),
            lambda: msgpack.packb({"v": v, "t": "TaskFinished", "task_id": "x" * rng.randint(0, 30)}),
            lambda: msgpack.packb({"v": v, "t": "Heartbeat", "held": ["nope"]}),
            lambda: msgpack.packb({"v": v, "t": "SinkHello", "sink_id": "evil", "done": []}),
            lambda: msgpack.packb([1, 2, 3])[:rng.randint(0, 3)],
            lambda: b"\x00" * (rng.randint(1, 2_000_000) if rng.random() < 0.02 else rng.randint(1, 300)),
            # Well-formed msgpack with a hostile envelope: each of these once ended the role (TypeError).
            lambda: msgpack.packb({"v": v, "t": rng.choice([[], {}, 1.5, None, b"Hello", [1, [2]], True])}),
            lambda: msgpack.packb({"v": rng.choice([[], {}, "4", 4.0, None]), "t": "Hello"}),
            lambda: msgpack.packb({"v": v, "t": "Hello", "peer_id": {"a": []}, "host": [], "pid": "x",
                                   "role": None}),
            lambda: b"\x91" * 5000 + b"\xc0",  # nested a few thousand arrays deep
            lambda: msgpack.packb({"v": v, "t": msgpack.ExtType(5, b"x")}),
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
    records = assert_same_as_clean(c.output, clean)
    summary = json.loads((c.output / "summary.json").read_text())
    assert sum(summary["dropped_messages"].values()) > 0
    figure(f"fuzzing: {sent['zmq']} malformed ZeroMQ frames and {sent['tcp']} raw TCP garbage connections; "
           f"sink dropped {sum(summary['dropped_messages'].values())}; {records} records, 0 lost")


def test_curve_keeps_out_workers_without_the_key(clean, tmp_path):
    import shutil

    from common.wire import protocol
    from common.wire.security import generate
    from common.writers import ShardFile

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
        push.setsockopt(zmq.SNDTIMEO, 100)  # a plain PUSH has no pipe once the sink refuses the handshake
        push.connect(f"tcp://127.0.0.1:{c.sink_port}")
        forged = protocol.TaskAck("forged", "job", "intruder", "x", 0, 1, "v",
                                  [ShardFile("../../etc/passwd", 1, "0" * 64, 1)], 1, protocol.AckStats())
        queued = refused = 0
        for _ in range(50):
            try:
                push.send(protocol.encode(forged))
                queued += 1
            except zmq.Again:
                refused += 1
        assert c.wait() == 0, c.tail()
        push.close(linger=0)
        context.term()
        for outsider in outsiders:
            assert outsider.poll() is None, "an outsider was told the job ended: it talked to the ventilator"
        outsider_logs = "\n".join(log.read_text() for log in c.logs if log.name.startswith(("intruder", "plain")))
        assert "job " not in outsider_logs, "an outsider received the job configuration"
        assert "forged" not in {e["task"] for e in manifest(c.output).values()}
        records = assert_same_as_clean(c.output, clean)
        figure(f"CURVE: 2 unauthorised workers got nothing, 50 forged acks ignored ({refused} refused at the socket, "
               f"{queued} queued and dropped by the handshake); {records} records from the authorised one")
    finally:
        for outsider in outsiders:
            outsider.kill()
        c.close()


@pytest.mark.s3
def test_s3_endpoint_down_for_10_seconds(clean, s3, tmp_path):
    client = s3.client()
    bucket = s3.new_bucket("outage")
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
        retries = c.log_text().count("retrying")
        assert retries, "the outage was not noticed"
    finally:
        c.close()
    records = assert_same_as_clean(download_prefix(client, bucket, "run/", tmp_path / "download"), clean)
    figure(f"S3 endpoint down 10 s mid-run: {retries} retried requests, {records} records, 0 lost")


@pytest.mark.gcs
@pytest.mark.timeout(1200)  # above the waits' sum (300 + 120 + 420 + 180): a failure says why with the logs
def test_gcs_kill_9_worker_and_ventilator_under_throttling(clean, gcs, tmp_path):
    """Corpus and output on gs:// (the GCS emulator) behind a proxy answering every 5th request 429 or 503: a
    worker killed -9 and replaced, the ventilator killed -9, the emulator stopped, the ventilator started again
    into the outage (it retries), the emulator back: the restarted ventilator resumes mid-job from the sink's
    books, and the shards are a clean local run's, none lost or doubled.

    The ventilator is killed right after the third task is recorded: with it gone no task is handed out, so
    the job cannot finish before its restart.  The store stays down until the restarted ventilator has met
    the outage, so the outage is felt, whatever else was idle then.  (Killed after an outage, the ventilator
    once found the job done: the sink, stalled by it, had recorded every task at once and exited, and the
    restarted ventilator waited for a sink that was gone.)"""
    from tests.common.test_storage_gcs import GCS_ERRORS
    from tests.support.faulty_proxy import FaultyProxy

    bucket = gcs.new_bucket("faults")
    gcs.upload_tree(bucket, WIKI, "wiki", "wiki_*")
    with FaultyProxy(gcs.url, fail_every=5, errors=GCS_ERRORS) as proxy:
        c = Cluster(f"gs://{bucket}/wiki", f"gs://{bucket}/run", JOB, tmp_path, env=gcs.env(proxy.url))
        try:
            c.start(workers=2)
            # generous timeouts: every fifth request fails, and the machine may be loaded
            c.wait_for_progress(3, timeout=300)
            c.kill(c.live_workers()[0])
            c.kill(c.ventilator)
            c.start_worker()
            gcs.gateway("stop")
            try:
                c.start_ventilator()  # the same command, into the outage
                restarted = c.logs[-1]
                deadline = time.monotonic() + 120  # its retries last ~30 s: the first comes within its start-up
                while "Connection aborted" not in restarted.read_text():
                    assert time.monotonic() < deadline and c.ventilator.poll() is None, c.tail()
                    time.sleep(0.1)
            finally:
                gcs.gateway("start")
            assert c.wait(timeout=420) == 0, c.tail()
        except BaseException:
            print(c.tail(120))  # a hang stopped by pytest-timeout shows every role's log too
            raise
        finally:
            c.close()
        assert proxy.failed >= 10 and "retrying" in c.log_text()
    done_at_start = re.search(r"ready: (\d+) of (\d+) tasks already done", restarted.read_text())
    assert done_at_start, "the restarted ventilator never heard from the sink"
    done, total = int(done_at_start.group(1)), int(done_at_start.group(2))
    assert 3 <= done < total, f"the restarted ventilator resumed {done} of {total} tasks: not mid-job"
    (tmp_path / "download").mkdir()
    gcs.download_prefix(bucket, "run", tmp_path / "download")
    records = assert_same_as_clean(tmp_path / "download", clean)
    figure(f"gs:// corpus and output, every 5th request 429/503, kill -9 worker and ventilator, restarted into a store outage: {proxy.failed} "
           f"failed requests retried, {records} records, 0 lost, 0 duplicated")


def test_poison_task_is_quarantined_and_the_run_completes(tmp_path):
    """With --shared-fs workers read the corpus; a file that vanishes after
    planning fails on every worker: quarantined after --max-attempts, reported,
    and everything else is written."""
    import shutil

    need_shared()
    corpus = tmp_path / "corpus"
    shutil.copytree(WIKI, corpus)
    c = Cluster(corpus, tmp_path / "out", [*JOB, "--shared-fs", "--max-attempts", "2"], tmp_path)
    try:
        c.start_sink()
        c.start_ventilator()
        deadline = time.monotonic() + 60
        while "ready" not in c.log_text():
            assert time.monotonic() < deadline, c.tail()
            time.sleep(0.1)
        (corpus / "AB" / "wiki_00").unlink()
        c.start_worker()
        c.start_worker()
        assert c.wait() == 3, c.tail()
        assert "ventilator: error: " in c.log_text() and "quarantined" in c.log_text()
        summary = json.loads((c.output / "summary.json").read_text())
        failures = summary["quarantined"]
        assert failures and all(f["source"] == "AB/wiki_00" and f["attempts"] == 2 for f in failures.values())
        assert all("No such file" in " ".join(f["errors"]) for f in failures.values())
        assert {e["source"] for e in manifest(c.output).values()} == {"AA/wiki_00"}
        figure(f"poison task: {len(failures)} tasks of a vanished file quarantined after 2 attempts; run completed")
    finally:
        c.close()


def test_slow_worker_keeps_its_lease(tmp_path):
    """Tasks that take several lease periods are not taken from a live
    worker: heartbeats come from a thread that is not the computing one."""
    need_shared()
    job = ["--vocab-file", VOCAB, "--dupe-factor", "20", "--task-size", "4M",
           "--lease-seconds", "0.8", "--heartbeat-seconds", "0.2"]
    c = Cluster(WIKI, tmp_path / "out", job, tmp_path)
    try:
        c.start(workers=1)
        assert c.wait() == 0, c.tail()
        assert "back in the queue" not in c.log_text(), "a live worker was robbed of its task"
        entries = manifest(c.output)
        assert len(entries) == 2
    finally:
        c.close()


def test_late_joiner_gets_work(tmp_path):
    """Credit-based dispatch: the first worker holds one task at a time, so a
    worker that connects later still finds work."""
    need_shared()
    # Enough work (32 tasks at d=10) that the first worker is still busy when a loaded machine starts the second.
    c = Cluster(WIKI, tmp_path / "out", ["--vocab-file", VOCAB, "--dupe-factor", "10", "--task-size", "64K"], tmp_path)
    try:
        c.start(workers=1)
        c.wait_for_progress(2)
        c.start_worker()
        assert c.wait() == 0, c.tail()
        workers = [e["worker"] for e in manifest(c.output).values()]
        assert len(set(workers)) == 2, "the late worker got nothing"
    finally:
        c.close()


@pytest.mark.s3
def test_s3_throttling_and_server_errors_are_retried(clean, s3, tmp_path):
    """Every third S3 request answered 503 SlowDown or 500 InternalError."""
    from tests.support.faulty_proxy import FaultyProxy

    client = s3.client()
    bucket = s3.new_bucket("throttled")
    with FaultyProxy(s3.endpoint_url, fail_every=3) as proxy:
        c = Cluster(WIKI, f"s3://{bucket}/run", [*JOB, "--s3-endpoint-url", proxy.url], tmp_path, env=s3.env())
        try:
            c.start(workers=2)
            assert c.wait() == 0, c.tail()
        finally:
            c.close()
        assert proxy.failed >= 10
    records = assert_same_as_clean(download_prefix(client, bucket, "run/", tmp_path / "download"), clean)
    figure(f"S3 answering every 3rd request 503 SlowDown / 500 InternalError: {proxy.failed} failed requests "
           f"retried, {records} records, 0 lost")


def test_supervisor_replaces_a_killed_worker_process(clean, tmp_path):
    """One `python -m worker --processes 2` (the fleet's shape): a child
    killed with -9 is started again by its supervisor."""
    import psutil

    c = Cluster(WIKI, tmp_path / "out", JOB, tmp_path)
    try:
        c.start_sink()
        supervisor = c.start_worker("--processes", "2")
        c.start_ventilator()
        c.wait_for_progress(4)
        children = psutil.Process(supervisor.pid).children()
        workers = [p for p in children if "spawn_main" in " ".join(p.cmdline())]
        assert len(workers) == 2
        workers[0].kill()
        assert c.wait() == 0, c.tail()
        assert supervisor.wait(timeout=60) == 0
        assert "starting another" in c.log_text()
        records = assert_same_as_clean(c.output, clean)
        figure(f"kill -9 one of a supervisor's 2 worker processes: replaced; {records} records, 0 lost")
    finally:
        c.close()


def test_idle_exit_waits_out_a_lease_at_the_tail(clean, tmp_path):
    """A worker with a tiny --idle-exit-seconds, left alone at the tail of
    the job while a frozen worker holds the last task, keeps waiting (the
    ventilator answers its heartbeats), takes the task when its lease
    expires, and finishes the job."""
    ventilator_metrics = free_ports(1)[0]
    c = Cluster(WIKI, tmp_path / "out", [*JOB, "--metrics-port", ventilator_metrics], tmp_path)
    frozen = None
    try:
        c.start_sink()
        c.start_ventilator()
        for _attempt in range(5):  # freeze a worker while it holds a task
            frozen = c.start_worker()
            c.wait_for_progress(c.progress() + 1)
            frozen.send_signal(signal.SIGSTOP)
            time.sleep(0.5)
            leased = scrape(ventilator_metrics)[("mlm_ventilator_tasks", (("state", "leased"),))]
            if leased == 1:
                break
            frozen.kill()
            frozen.wait()
        else:
            pytest.fail("could not freeze a worker holding a task")
        idle = c.start_worker("--idle-exit-seconds", "0.3")
        assert c.ventilator.wait(timeout=120) == 0, c.tail()
        assert idle.wait(timeout=60) == 0
        assert "no ventilator for" not in c.log_text()
    finally:
        if frozen is not None:
            frozen.kill()
        c.close()
    assert_same_as_clean(tmp_path / "out", clean)


def test_a_worker_silent_for_long_is_forgotten_and_rejoins(clean, tmp_path):
    """A worker frozen past two leases is no longer counted, then forgotten
    (dead spot instances must not pile up in the ventilator); thawed, it is
    told it is unknown, says Hello again and finishes the job alone."""
    ventilator_metrics = free_ports(1)[0]
    c = Cluster(WIKI, tmp_path / "out", [*JOB, "--metrics-port", ventilator_metrics], tmp_path)
    try:
        c.start_sink()
        c.start_ventilator()
        worker = c.start_worker()
        c.wait_for_progress(1)
        assert scrape(ventilator_metrics)[("mlm_ventilator_workers", ())] == 1
        worker.send_signal(signal.SIGSTOP)
        try:
            deadline = time.monotonic() + 60
            while scrape(ventilator_metrics)[("mlm_ventilator_workers", ())] != 0:
                assert time.monotonic() < deadline, "a frozen worker is still counted"
                time.sleep(0.5)
            while "forgotten" not in c.log_text():  # 2 × max(lease 3 s, 3 heartbeats + 5 s) = 13 s of silence
                assert time.monotonic() < deadline, c.tail()
                time.sleep(0.5)
        finally:
            worker.send_signal(signal.SIGCONT)
        assert c.wait(timeout=300) == 0, c.tail()
        assert worker.returncode == 0
        assert "introducing myself again" in c.log_text()
    finally:
        c.close()
    assert_same_as_clean(tmp_path / "out", clean)


def test_a_new_job_on_a_running_fleet(clean, tmp_path):
    """The ventilator of job A is killed and job B (other output, other
    parameters) is started on the same sink and workers: the sink closes A's
    books and takes B's manifest, the workers' unfinished A tasks never count
    for B, and B's output is exactly a clean run of B."""
    need_shared()
    job_b = ["--vocab-file", VOCAB, "--dupe-factor", "2", "--task-size", "64K"]
    clean_b = tmp_path / "clean-b"
    assert run_ventilator(WIKI, clean_b, *job_b, "--workers", "2").returncode == 0
    c = Cluster(WIKI, tmp_path / "out-a", JOB, tmp_path)
    try:
        c.start(workers=2)
        c.wait_for_progress(3)
        c.kill(c.ventilator)
        c.output, c.job_args = tmp_path / "out-b", [str(a) for a in job_b]
        c.start_ventilator()
        assert c.ventilator.wait(timeout=300) == 0, c.tail()
        assert "the ventilator now runs job" in c.log_text()
    finally:
        c.close()
    assert_same_as_clean(tmp_path / "out-b", clean_b)
    assert {e["job"] for e in manifest(tmp_path / "out-a").values()} != {e["job"] for e in manifest(clean_b).values()}


def test_a_lost_assignment_does_not_leave_its_worker_idle(clean, tmp_path):
    """A worker whose TaskAssignment was lost (a dropped connection: the
    ventilator's ROUTER discards it) restates in its heartbeat what it still
    awaits, and gets another task; here the worker is this test, speaking
    the protocol over a real socket to the real ventilator."""
    from common.wire import protocol

    c = Cluster(WIKI, tmp_path / "out", JOB, tmp_path)
    context = zmq.Context()
    dealer = context.socket(zmq.DEALER)
    dealer.setsockopt(zmq.IDENTITY, b"worker-test-lost")
    try:
        c.start_sink()
        c.start_ventilator()
        dealer.connect(f"tcp://127.0.0.1:{c.vport}")

        def next_message(timeout_ms: int):
            if not dealer.poll(timeout_ms):
                return None
            return protocol.decode(dealer.recv())

        deadline = time.monotonic() + 60
        welcome = None
        while welcome is None:
            assert time.monotonic() < deadline, c.tail()
            dealer.send(protocol.encode(protocol.Hello("worker-test-lost", "here", 1, "worker")))
            welcome = next_message(1000)
        assert isinstance(welcome, protocol.Welcome)
        dealer.send(protocol.encode(protocol.TaskRequest(1)))

        def assignment(timeout: float):
            until = time.monotonic() + timeout
            while time.monotonic() < until:
                message = next_message(200)
                if isinstance(message, protocol.TaskAssignment):
                    return message
            return None

        first = assignment(30)
        assert first is not None, c.tail()
        # "Lost": the worker never saw it.  Without a restated credit nothing more comes.
        assert assignment(1.5) is None
        dealer.send(protocol.encode(protocol.Heartbeat([], awaiting=1)))
        second = assignment(10)
        assert second is not None, "the restated credit brought no task"
    finally:
        dealer.close(linger=0)
        context.term()
        c.close()


def test_a_sink_reintroducing_itself_in_chunks_is_heard_out(tmp_path):
    """A sink that says Hello again sends its done set in several SinkHellos:
    the ventilator must not call the job complete on a chunk that happens to
    cover every task before the last chunk has been heard; here the sink is
    this test, speaking the protocol to the real ventilator."""
    from common.job.tasks import parse_size, plan_tasks
    from common.storage import LocalStorage
    from common.wire import protocol

    need_shared()
    c = Cluster(WIKI, tmp_path / "out", JOB, tmp_path)
    context = zmq.Context()
    sink = context.socket(zmq.DEALER)
    sink.setsockopt(zmq.IDENTITY, b"sink-test-chunks")
    done = {t.task_id: t.version for t in plan_tasks(LocalStorage(str(WIKI)).list_inputs(), parse_size("64K"))}

    def introduce(chunks: list[tuple[dict, bool]], pause: float = 0.0):
        deadline = time.monotonic() + 60
        while True:
            assert time.monotonic() < deadline, c.tail()
            sink.send(protocol.encode(protocol.Hello("sink-test-chunks", "here", 1, "sink")))
            if sink.poll(1000) and isinstance(welcome := protocol.decode(sink.recv()), protocol.Welcome):
                break
        for part, last in chunks:
            sink.send(protocol.encode(protocol.SinkHello("sink-test-chunks", welcome.job_id, part, last)))
            time.sleep(pause)

    try:
        c.start_ventilator()
        sink.connect(f"tcp://127.0.0.1:{c.vport}")
        introduce([({}, True)])  # ready, nothing done yet
        introduce([(done, False)], pause=2.0)  # every task, but more is to come
        assert c.ventilator.poll() is None, "the job was called complete before the sink's last SinkHello"
        introduce([({}, True)])  # ...and the sink's full done set turns out to be empty
        time.sleep(1.0)
        assert c.ventilator.poll() is None, "tasks the sink does not have were left as done"
        introduce([(done, True)])
        deadline = time.monotonic() + 60  # the job is over: the sink closes its books, and says so
        while not (sink.poll(1000) and isinstance(protocol.decode(sink.recv()), protocol.Shutdown)):
            assert time.monotonic() < deadline, c.tail()
        sink.send(protocol.encode(protocol.SinkClosed()))
        assert c.ventilator.wait(timeout=60) == 0, c.tail()
    finally:
        sink.close(linger=0)
        context.term()
        c.close()
