"""A sink standing by on another port than the job's sink address, once the job's sink died.

It cannot listen on the job's sink port while the job's sink lives on the same host (the port is taken), so it
stands by on another; the workers push their acknowledgements to the job's sink address.  Welcomed after the job's
sink went silent, it kept books no acknowledgement reached, and the job waited forever.  Now it says so in one
line and exits 1; a sink started on the job's port takes over and the job ends with books that agree.  Real
processes over real sockets."""

from __future__ import annotations

import signal

import pytest

from tests.faults.test_faults import JOB
from tests.faults.test_one_sink import _books_agree, _wait_for
from tests.support.cluster import Cluster
from tests.support.helpers import WIKI, free_ports, need_shared

pytestmark = [pytest.mark.e2e, pytest.mark.faults]


def _job_with_a_standby_on_another_port(c: Cluster, tmp_path):
    """The job's sink and ventilator, a second sink on another port (standing by), two workers with progress made:
    the second sink's process and log."""
    c.start_sink()
    c.start_ventilator()
    _wait_for(c.logs[1], "ready:", process=c.ventilator)
    (port,) = free_ports(1)
    second = c._start("second-sink", "sink", [
        "--ventilator", f"127.0.0.1:{c.vport}", "--port", port, "--bind-host", "127.0.0.1",
        "--state-dir", tmp_path / "state-2", "--publish-seconds", "1"])
    second_log = c.logs[-1]
    assert _wait_for(second_log, "standing by", "manifest", process=second) == "standing by", c.tail()
    c.start_worker()
    c.start_worker()
    c.wait_for_progress(3)
    return second, second_log


def test_a_standby_sink_on_another_port_steps_aside_after_kill_9_and_a_sink_on_the_port_ends_the_job(tmp_path):
    need_shared()
    c = Cluster(WIKI, tmp_path / "out", JOB, tmp_path)
    try:
        second, second_log = _job_with_a_standby_on_another_port(c, tmp_path)
        c.kill(c.sink)
        assert second.wait(timeout=120) == 1, c.tail()
        said = second_log.read_text()
        assert f"start a sink with --port {c.sink_port}" in said, said[-3000:]
        assert "takes over its books" not in said, said[-3000:]
        c.start_sink()
        assert c.wait(timeout=240) == 0, c.tail()
    finally:
        c.close()
    _books_agree(c.output)


def test_the_jobs_sink_keeps_the_books_after_a_ventilator_restart_welcomed_a_standby_first(tmp_path):
    """kill -9 of the ventilator while a sink stands by: the restarted ventilator knows no sink, and welcomes
    whichever says Hello first.  Here the stand-by one (the job's sink paused meanwhile): it cannot take over
    (another port) and steps aside.  The job's sink, back, hears SinkStandby from a ventilator that restarted:
    it was taken over by no one while silent, so it stands by too (writing nothing) and is welcomed once the
    other is silent, instead of stopping and leaving the job with no sink at all."""
    need_shared()
    c = Cluster(WIKI, tmp_path / "out", JOB, tmp_path)
    try:
        second, second_log = _job_with_a_standby_on_another_port(c, tmp_path)
        c.sink.send_signal(signal.SIGSTOP)
        c.kill(c.ventilator)
        c.start_ventilator()
        assert second.wait(timeout=180) == 1, c.tail()  # welcomed first, it steps aside
        c.sink.send_signal(signal.SIGCONT)
        assert c.wait(timeout=300) == 0, c.tail()
    finally:
        if c.sink is not None and c.sink.poll() is None:
            c.sink.send_signal(signal.SIGCONT)
        c.close()
    said = c.logs[0].read_text()
    assert "puts this job's books down and stands by" in said and "takes over its books" in said, said[-3000:]
    _books_agree(c.output)
