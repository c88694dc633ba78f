"""One run per output (issue 34, item 11): a second run is refused in one line naming the holder; a dead
holder's lock is taken over (at once on its own host, after its lease elsewhere); a holder that lost its
lock finds out at its next renewal.  The lock is made with the storage's conditional create, locally and
on S3 (radosgw honours If-None-Match)."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time

import pytest

from common.output.lock import LOCK_NAME, Holder, OutputLock, OutputLocked
from common.storage import LocalStorage, S3Storage
from tests.common.writers.jobs import small_corpus
from tests.support.helpers import REPO, VOCAB, free_ports, need_shared, run_ventilator


def _foreign(storage, **changes) -> Holder:
    """A lock file as another run wrote it."""
    holder = Holder("elsewhere", 4242, "job-x", "t0ken", "", time.time() - 10, time.time() + 60)
    holder = dataclasses.replace(holder, **changes)
    storage.put_bytes(LOCK_NAME, holder.encode())
    return holder


def test_a_held_lock_refuses_and_names_its_holder_then_is_released(tmp_path):
    storage = LocalStorage(str(tmp_path))
    first = OutputLock(storage, "job-a")
    first.acquire()
    with pytest.raises(OutputLocked) as refused:
        OutputLock(storage, "job-b").acquire()
    message = str(refused.value)
    assert "\n" not in message and f"pid {os.getpid()}" in message and "job job-a" in message
    assert f"host {os.uname().nodename}" in message
    first.release()
    assert storage.get_bytes(LOCK_NAME) is None
    second = OutputLock(storage, "job-b")
    second.acquire()
    assert Holder.decode(storage.get_bytes(LOCK_NAME)).job == "job-b"


def test_another_hosts_lock_is_taken_over_only_once_its_lease_expired(tmp_path):
    storage = LocalStorage(str(tmp_path))
    _foreign(storage)
    with pytest.raises(OutputLocked, match="host elsewhere, pid 4242, job job-x"):
        OutputLock(storage, "job-a").acquire()
    _foreign(storage, expires=time.time() - 3600)
    taker = OutputLock(storage, "job-a")
    taker.acquire()
    assert Holder.decode(storage.get_bytes(LOCK_NAME)).token == taker.holder.token
    assert [name for name in storage.list_outputs() if "takeover" in name] == []


def test_a_dead_process_on_this_host_is_taken_over_at_once(tmp_path):
    storage = LocalStorage(str(tmp_path))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    mine = OutputLock(storage, "job-a")._me("x", 0.0)
    _foreign(storage, host=mine.host, pid=dead.pid, process=mine.process.rsplit("/", 1)[0] + "/1")
    OutputLock(storage, "job-a").acquire()  # its lease is an hour from over: its process is gone


def test_a_holder_that_lost_its_lock_finds_out_at_its_next_renewal(tmp_path):
    storage = LocalStorage(str(tmp_path))
    paused = OutputLock(storage, "job-a")
    paused.acquire()
    assert paused.renew() and paused.lost is None
    # As if it ran on another host and was paused there far past its lease.
    _foreign(storage, token=paused.holder.token, job="job-a", expires=time.time() - 3600)
    taker = OutputLock(storage, "job-b")
    taker.acquire()
    assert not paused.renew() and "taken by another run" in paused.lost and "job job-b" in paused.lost
    paused.release()  # leaves the taker's lock alone
    assert Holder.decode(storage.get_bytes(LOCK_NAME)).token == taker.holder.token


def test_a_lock_file_that_is_not_ours_is_one_line(tmp_path):
    storage = LocalStorage(str(tmp_path))
    storage.put_bytes(LOCK_NAME, b'{"host": 1}')
    with pytest.raises(OutputLocked, match="cannot read .*remove it if no run uses this output"):
        OutputLock(storage, "job-a").acquire()


@pytest.mark.s3
def test_on_s3_the_conditional_put_decides(s3):
    os.environ.update(s3.env())
    storage = S3Storage(f"s3://{s3.new_bucket('lock')}/out", s3.endpoint_url)
    assert storage.create_if_absent("x", b"1") and not storage.create_if_absent("x", b"2")
    assert storage.get_bytes("x") == b"1"
    first = OutputLock(storage, "job-a")
    first.acquire()
    with pytest.raises(OutputLocked, match=f"pid {os.getpid()}, job job-a"):
        OutputLock(storage, "job-b").acquire()
    first.release()
    OutputLock(storage, "job-b").acquire()


@pytest.mark.e2e
def test_a_second_run_on_one_output_is_refused_and_a_killed_ones_output_resumes(tmp_path):
    """The first run (no workers: it waits) holds the output; the same command is refused in one line; once
    the first is killed -9, the command runs the job to its end."""
    need_shared()
    corpus = small_corpus(tmp_path / "corpus", size=20_000)
    output = tmp_path / "out"
    job = ["--vocab-file", str(VOCAB), "--dupe-factor", "1", "--task-size", "24K"]
    vport, sink_port = free_ports(2)
    first = subprocess.Popen([sys.executable, "-m", "ventilator", "--data", str(corpus), "--output", str(output),
                              "--vport", str(vport), "--sink-port", str(sink_port), "--bind-host", "127.0.0.1",
                              "--state-dir", str(tmp_path / "state"), "--workers", "0", *job], cwd=REPO,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not (output / LOCK_NAME).exists():
            assert first.poll() is None and time.monotonic() < deadline, "the first run never took the lock"
            time.sleep(0.2)
        second = run_ventilator(corpus, output, *job, "--workers", "1", timeout=120)
        assert second.returncode == 1
        errors = [line for line in second.stderr.splitlines() if "error" in line]
        assert len(errors) == 1 and f"pid {first.pid}, job " in errors[0] and "in use by another run" in errors[0]
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    third = run_ventilator(corpus, output, *job, "--workers", "1", timeout=180)
    assert third.returncode == 0, third.stderr[-3000:]
    assert "took over the lock" in third.stderr and "its process is gone" in third.stderr
    assert not (output / LOCK_NAME).exists()


# A takeover marker left behind (its taker killed mid-takeover, or its write of the lock failed) made every later
# run say "taking over ... at this moment" forever, naming no file.  On every store the lock runs on.

def _dead_process(storage) -> dict:
    """Holder fields of a process of this host that has ended (its pid's start time is not the one recorded)."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    mine = OutputLock(storage, "job-x")._me("x", 0.0)
    return {"host": mine.host, "pid": dead.pid, "process": mine.process.rsplit("/", 1)[0] + "/1"}


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3), pytest.param("gcs", marks=pytest.mark.gcs)])
def store(request, tmp_path, monkeypatch):
    """An output on each store the lock is made on: a local directory, S3 (radosgw), GCS (the emulator)."""
    if request.param == "local":
        return LocalStorage(str(tmp_path / "out"))
    server = request.getfixturevalue(request.param)
    for name, value in server.env().items():
        monkeypatch.setenv(name, value)
    bucket = server.new_bucket("lock")
    if request.param == "s3":
        return S3Storage(f"s3://{bucket}/out", server.endpoint_url)
    from common.storage import open_storage

    return open_storage(f"gs://{bucket}/out")


def _markers(storage) -> list[str]:
    return [name for name in storage.list_outputs() if ".takeover-" in name]


def test_a_marker_left_by_a_taker_that_died_is_passed_and_cleared(store):
    dead_holder = _foreign(store, **_dead_process(store))
    dead_taker = dataclasses.replace(dead_holder, token="taker-1", **_dead_process(store))
    store.put_bytes(f"{LOCK_NAME}.takeover-{dead_holder.token}", dead_taker.encode())
    taker = OutputLock(store, "job-a")
    taker.acquire()
    assert Holder.decode(store.get_bytes(LOCK_NAME)).token == taker.holder.token
    assert _markers(store) == []
    taker.release()


def test_a_live_takers_marker_turns_others_away_naming_the_file(store):
    """A marker whose taker runs (here: this process) still makes the takeover exclusive, also one link down the
    chain of dead takers; the message names the file to remove if no run is taking over."""
    dead_holder = _foreign(store, **_dead_process(store))
    first = f"{LOCK_NAME}.takeover-{dead_holder.token}"
    store.put_bytes(first, dataclasses.replace(dead_holder, token="taker-1", **_dead_process(store)).encode())
    live = OutputLock(store, "job-a")
    marker, passed = live._takeover_marker(dead_holder, live._me("live-taker", time.time()))
    assert passed == [first] and marker != first
    with pytest.raises(OutputLocked) as refused:
        OutputLock(store, "job-b").acquire()
    message = str(refused.value)
    assert "\n" not in message and "at this moment" in message and f"remove {store.uri(marker)}" in message
    store.remove(marker)  # the live taker gave up: the next run takes over
    OutputLock(store, "job-b").acquire()
    assert _markers(store) == []


def test_a_failed_write_of_the_lock_leaves_no_marker(tmp_path):
    class LockWriteFails(LocalStorage):
        fail = False

        def put_bytes(self, name, data):
            if name == LOCK_NAME and self.fail:
                self.fail = False
                raise OSError("No space left on device")
            super().put_bytes(name, data)

    storage = LockWriteFails(str(tmp_path))
    _foreign(storage, expires=time.time() - 3600)
    storage.fail = True  # the next write of the lock: the taker's
    with pytest.raises(OSError):
        OutputLock(storage, "job-a").acquire()
    assert _markers(storage) == []
    OutputLock(storage, "job-a").acquire()


@pytest.mark.e2e
def test_a_run_after_one_killed_mid_takeover_runs_the_job(tmp_path):
    """Through the command line: an output holding a dead run's lock and the marker of a run killed while taking
    it over is run to its end by the same command, and no marker is left."""
    need_shared()
    corpus = small_corpus(tmp_path / "corpus", size=20_000)
    output = tmp_path / "out"
    storage = LocalStorage(str(output))
    dead_holder = _foreign(storage, **_dead_process(storage))
    storage.put_bytes(f"{LOCK_NAME}.takeover-{dead_holder.token}",
                      dataclasses.replace(dead_holder, token="taker-1", **_dead_process(storage)).encode())
    run = run_ventilator(corpus, output, "--vocab-file", str(VOCAB), "--dupe-factor", "1", "--task-size", "24K",
                         "--workers", "1", timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "left by a run that died taking over the lock" in run.stderr
    assert not [path for path in output.iterdir() if ".takeover-" in path.name]
    assert not (output / LOCK_NAME).exists()
