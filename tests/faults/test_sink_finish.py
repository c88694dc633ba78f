"""A sink started apart that cannot finish the job fails the job: it published every manifest line, could not
write summary.json, and the ventilator still exited 0 "done".  Now the sink tells it (SinkClosed) and the
ventilator exits 1 with the sink's reason."""

from __future__ import annotations

import shutil

import pytest

from tests.support.cluster import Cluster
from tests.support.helpers import VOCAB, WIKI, need_shared

pytestmark = [pytest.mark.e2e, pytest.mark.faults]


def test_a_sink_apart_that_cannot_publish_the_summary_fails_the_job(tmp_path):
    need_shared()
    data = tmp_path / "in"
    data.mkdir()
    shutil.copy(sorted(WIKI.rglob("wiki_*"))[0], data / "wiki_00")
    out = tmp_path / "out"
    (out / "summary.json").mkdir(parents=True)  # the store takes no summary.json: the sink cannot finish
    cluster = Cluster(data, out, ["--vocab-file", VOCAB, "--task-size", "256K", "--dupe-factor", "1"], tmp_path)
    try:
        cluster.start(workers=1)
        code = cluster.ventilator.wait(timeout=300)
        cluster.sink.wait(timeout=120)
        said = cluster.log_text()
    finally:
        cluster.close()
    assert cluster.sink.returncode == 1, said[-3000:]
    assert code == 1, said[-3000:]
    last = [line for line in said.splitlines() if line.startswith("ventilator: ")][-1]
    assert last.startswith("ventilator: error: the sink could not finish the job: could not publish the manifest "
                           "and summary to"), said[-3000:]
    assert "Traceback" not in said and (out / "manifest.jsonl").read_text()  # every line is there all the same
