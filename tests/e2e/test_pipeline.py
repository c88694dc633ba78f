"""The whole pipeline, as users run it: real processes over loopback TCP."""

import json
import os
import shutil
import signal
import time

import pytest

from tests.support.factories import finished_job
from tests.support.helpers import (
    VOCAB,
    WIKI,
    check_shards,
    free_ports,
    manifest,
    need_shared,
    python_module,
    run_ventilator,
    shard_digests,
)

pytestmark = pytest.mark.e2e

JOB = ["--vocab-file", VOCAB, "--dupe-factor", "2", "--task-size", "192K", "--report-seconds", "2"]


@pytest.fixture(scope="module")
def one_worker_run(tmp_path_factory):
    return finished_job(tmp_path_factory.mktemp("one"), *JOB, "--workers", "1")


def test_one_and_three_workers_write_identical_shards(one_worker_run, tmp_path):
    output = tmp_path / "out"
    result = run_ventilator(WIKI, output, *JOB, "--workers", "3")
    assert result.returncode == 0, result.stderr[-3000:]
    one = shard_digests(one_worker_run)
    assert len(one) >= 10
    assert shard_digests(output) == one
    workers = {e["worker"] for e in manifest(output).values()}
    assert len(workers) >= 2, "three workers shared the work"


def test_tensorflow_reads_every_record(one_worker_run):
    totals = check_shards(one_worker_run)
    summary = json.loads((one_worker_run / "summary.json").read_text())
    assert summary["records"] == totals["records"] > 3000
    assert summary["documents"] == 103 and summary["skipped_documents"] == {}
    assert 0.12 < totals["masked"] / totals["tokens"] < 0.16


def test_shipping_and_shared_fs_give_the_same_output(one_worker_run, tmp_path):
    output = tmp_path / "out"
    result = run_ventilator(WIKI, output, *JOB, "--workers", "2", "--shared-fs")
    assert result.returncode == 0, result.stderr[-3000:]
    assert shard_digests(output) == shard_digests(one_worker_run)


def test_separately_started_roles(one_worker_run, tmp_path):
    """The fleet shape: ventilator, sink and workers as separate commands."""
    output = tmp_path / "out"
    vport, sink_port = free_ports(2)
    sink = python_module("sink", "--ventilator", f"127.0.0.1:{vport}", "--port", sink_port, "--bind-host", "127.0.0.1")
    workers = [python_module("worker", "--ventilator", f"127.0.0.1:{vport}", "--processes", "1") for _ in range(2)]
    time.sleep(1)  # workers and sink start first: they wait for the ventilator
    ventilator = python_module("ventilator", "--data", WIKI, "--output", output, "--vport", vport, "--bind-host",
                               "127.0.0.1", "--sink", f"127.0.0.1:{sink_port}", *JOB)
    try:
        out, _ = ventilator.communicate(timeout=300)
        assert ventilator.returncode == 0, out[-3000:]
        for process in [sink, *workers]:
            process.wait(timeout=60)
            assert process.returncode == 0, process.stdout.read()[-2000:]
    finally:
        for process in [ventilator, sink, *workers]:
            if process.poll() is None:
                process.kill()
    assert shard_digests(output) == shard_digests(one_worker_run)


def test_restart_resumes_without_redoing(one_worker_run, tmp_path):
    output = tmp_path / "out"
    shutil.copytree(one_worker_run, output)
    # The manifest names shards by absolute path: rewrite to the copy.
    lines = (output / "manifest.jsonl").read_text().replace(str(one_worker_run), str(output))
    (output / "manifest.jsonl").write_text(lines)
    before = {p.name: p.stat().st_mtime_ns for p in output.glob("part-*")}
    started = time.monotonic()
    result = run_ventilator(WIKI, output, *JOB, "--workers", "1")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "already done" in result.stderr
    assert {p.name: p.stat().st_mtime_ns for p in output.glob("part-*")} == before
    assert time.monotonic() - started < 60


def test_gzip_shards_asked_for_by_environment(tmp_path):
    """MLM_VENTILATOR_GZIP is --gzip.  The local workers get their settings on their command line only: a
    worker's variable meant for another host (here an invalid MLM_WORKER_CREDIT) would otherwise stop them."""
    need_shared()
    output = tmp_path / "out"
    result = run_ventilator(WIKI / "AA", output, "--vocab-file", VOCAB, "--dupe-factor", "1", "--task-size", "512K",
                            "--workers", "2", env={"MLM_VENTILATOR_GZIP": "1", "MLM_WORKER_CREDIT": "oops"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert all(p.name.endswith(".tfrecord.gz") for p in output.glob("part-*"))
    totals = check_shards(output, compression="gzip")
    assert totals["records"] > 500


def test_whole_word_masking_and_other_lengths(tmp_path):
    need_shared()
    output = tmp_path / "out"
    result = run_ventilator(WIKI / "AB", output, "--vocab-file", VOCAB, "--dupe-factor", "1", "--workers", "2",
                            "--do-whole-word-mask", "--max-seq-length", "64", "--max-predictions-per-seq", "10",
                            "--format", "wikiextractor", "--segmenter", "line")
    assert result.returncode == 0, result.stderr[-3000:]
    totals = check_shards(output, max_seq_length=64, max_predictions=10)
    assert totals["records"] > 500


def test_sigterm_stops_cleanly_and_the_same_command_resumes(one_worker_run, tmp_path):
    output = tmp_path / "out"
    vport, sink_port = free_ports(2)
    args = ["--data", WIKI, "--output", output, "--vport", vport, "--sink-port", sink_port, "--bind-host", "127.0.0.1",
            "--workers", "2", "--state-dir", tmp_path / "state", *JOB]
    ventilator = python_module("ventilator", *args, "--task-size", "192K", start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (output / "manifest.jsonl").exists():
        time.sleep(0.1)
    while time.monotonic() < deadline and len((output / "manifest.jsonl").read_text().splitlines()) < 2:
        time.sleep(0.05)
    os.killpg(ventilator.pid, signal.SIGINT)  # Ctrl-C: the whole process group
    out, _ = ventilator.communicate(timeout=120)
    assert ventilator.returncode == 130, out[-3000:]
    assert "Traceback" not in out
    assert "resume" in out
    done_before = len(manifest(output))
    result = run_ventilator(WIKI, output, *JOB, "--workers", "2")
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"{done_before} of" in result.stderr
    assert shard_digests(output) == shard_digests(one_worker_run)


def test_idle_worker_exits_without_a_ventilator():
    (port,) = free_ports(1)
    started = time.monotonic()
    worker = python_module("worker", "--ventilator", f"127.0.0.1:{port}", "--processes", "1",
                           "--idle-exit-seconds", "1")
    out, _ = worker.communicate(timeout=60)
    assert worker.returncode == 0, out[-2000:]
    assert "no ventilator for" in out
    assert time.monotonic() - started < 30



def test_an_output_is_one_job_over_one_snapshot_of_the_corpus(tmp_path):
    """Resuming with another --task-size, or after the corpus changed, would
    write documents twice (tasks cut otherwise, or a file's old ranges next
    to its new ones): it is refused with a clear error, nothing written."""
    need_shared()
    corpus = tmp_path / "corpus"
    shutil.copytree(WIKI / "AA", corpus)
    output = tmp_path / "out"
    job = ["--vocab-file", VOCAB, "--dupe-factor", "1", "--workers", "1"]
    assert run_ventilator(corpus, output, *job, "--task-size", "512K").returncode == 0
    before = shard_digests(output)

    other_size = run_ventilator(corpus, output, *job, "--task-size", "256K")
    assert other_size.returncode == 1
    assert "belongs to another job" in other_size.stderr and "--task-size" in other_size.stderr

    (corpus / "wiki_00").write_bytes((corpus / "wiki_00").read_bytes().replace(b"the ", b"teh "))
    changed = run_ventilator(corpus, output, *job, "--task-size", "512K")
    assert changed.returncode == 1 and "the corpus changed" in changed.stderr
    assert shard_digests(output) == before


def test_local_processes_end_with_a_killed_command(tmp_path):
    """kill -9 of the one-machine command: its sink and workers get SIGTERM
    and exit, instead of holding the ports the next run needs."""
    import psutil

    need_shared()
    vport, sink_port = free_ports(2)
    command = python_module("ventilator", "--data", WIKI, "--output", tmp_path / "out", "--vocab-file", VOCAB,
                            "--vport", vport, "--sink-port", sink_port, "--bind-host", "127.0.0.1", "--state-dir",
                            tmp_path / "state", "--workers", "2", "--dupe-factor", "20", "--task-size", "64K")
    parent = psutil.Process(command.pid)
    deadline = time.monotonic() + 60
    while len(children := parent.children(recursive=True)) < 4:  # the sink, the worker supervisor, 2 workers
        assert time.monotonic() < deadline and command.poll() is None, command.stdout.read()[-2000:]
        time.sleep(0.2)
    command.kill()
    command.wait()
    gone, alive = psutil.wait_procs(children, timeout=60)
    assert not alive, f"still running after the command died: {[p.cmdline() for p in alive]}"
    again = run_ventilator(WIKI, tmp_path / "again", "--vocab-file", VOCAB, "--dupe-factor", "1", "--workers", "1")
    assert again.returncode == 0, again.stderr[-2000:]


def test_an_output_of_the_previous_release_is_refused_for_its_real_cause(tmp_path):
    """An output the previous release made (its Parquet writer at version 1: shards beside the manifest and in
    holdout/) is another job for this one, whose writer is at version 2: the refusal says so, not that the
    corpus changed (it did not: the user would look for an edit that never happened)."""
    import subprocess
    import sys

    from tests.support.factories import wiki_prefix
    from tests.support.helpers import REPO, free_ports

    corpus = wiki_prefix(tmp_path / "corpus", 60_000)
    output = tmp_path / "out"
    job = ["--vocab-file", VOCAB, "--objective", "tokens", "--max-seq-length", "128", "--output-format", "parquet",
           "--workers", "1", "--task-size", "64K"]
    vport, sink_port = free_ports(2)
    previous_release = ("import sys; import common.writers.parquet as parquet; parquet.ParquetWriter.version = 1; "
                        "sys.argv[0] = 'ventilator'; from ventilator.cli import main; main()")
    made = subprocess.run([sys.executable, "-c", previous_release, "--data", str(corpus), "--output", str(output),
                           "--vport", str(vport), "--sink-port", str(sink_port), "--bind-host", "127.0.0.1",
                           "--state-dir", str(tmp_path / "state"), *job],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr[-3000:]
    again = run_ventilator(corpus, output, *job)
    assert again.returncode == 1 and "belongs to another job" in again.stderr
    refusal = again.stderr.strip().splitlines()[-1]
    assert "the corpus changed" not in refusal, refusal
    assert "parquet writer's version 2" in refusal, refusal
