"""deploy/grafana/mlm-pipeline.json asks only for what the live roles serve: every metric a query names, and
every label it selects on, is scraped from a real ventilator and sink during a run."""

from __future__ import annotations

import json
import re
import shutil
import signal
import time

import pytest

from tests.support.cluster import Cluster
from tests.support.helpers import REPO, VOCAB, WIKI, free_ports, need_shared, scrape

pytestmark = pytest.mark.e2e

DASHBOARD = REPO / "deploy" / "grafana" / "mlm-pipeline.json"
METRIC = re.compile(r"\bmlm_[a-z0-9_]+\b")
SELECTOR = re.compile(r"(mlm_[a-z0-9_]+)\{([^}]*)\}")
MATCHER = re.compile(r'(\w+)\s*=\s*"([^"]*)"')


def queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]


def scraped(port: int) -> dict:
    """The metrics, or nothing while the role is busy answering (a reset connection)."""
    try:
        return scrape(port)
    except OSError:
        return {}


def test_the_dashboard_covers_what_the_issue_asks():
    text = " ".join(queries())
    for metric in ("mlm_ventilator_tasks", "mlm_ventilator_input_bytes_done", "mlm_sink_worker_input_bytes_rate",
                   "mlm_ventilator_redeliveries_total", "mlm_sink_quarantined_tasks"):
        assert metric in text
    titles = " ".join(p["title"] for p in json.loads(DASHBOARD.read_text())["panels"]).lower()
    for word in ("progress", "eta", "per worker", "redeliveries", "quarantined", "backlog"):
        assert word in titles


def test_every_query_names_a_metric_the_live_roles_export(tmp_path):
    """The Wikipedia sample plus a document never closed (listed first): a skip, so the labelled skip counter is
    served.  Every metric served (a held-out side's too) is in the README's metric table."""
    need_shared()
    ventilator_port, sink_port = free_ports(2)
    corpus = tmp_path / "corpus"
    shutil.copytree(WIKI, corpus)
    (corpus / "A0").mkdir()
    (corpus / "A0" / "wiki_00").write_text('<doc id="8" url="u" title="S">\nS\n\nFine text.\n</doc>\n'
                                           '<doc id="9" url="u" title="T">\nT\n\nNever closed.\n')
    cluster = Cluster(corpus, tmp_path / "out", ["--vocab-file", VOCAB, "--dupe-factor", "1", "--task-size", "64K",
                                               "--holdout-fraction", "0.05", "--metrics-port", ventilator_port], tmp_path)
    try:
        cluster.start_sink("--metrics-port", sink_port)
        cluster.start_ventilator()
        worker = cluster.start_worker()
        cluster.wait_for_progress(2)
        deadline = time.monotonic() + 60  # the stray text's task (listed first) is done
        while not any(name == "mlm_sink_skipped_documents_total" for name, _ in scraped(sink_port)):
            assert time.monotonic() < deadline, "no skip recorded"
            time.sleep(0.2)
        worker.send_signal(signal.SIGSTOP)  # mid-run: per-worker rates are there, the job is not over
        try:
            time.sleep(0.5)
            served: dict[str, set] = {}
            for port in (ventilator_port, sink_port):
                for name, labels in scrape(port):
                    served.setdefault(name, set()).update(labels)
        finally:
            worker.send_signal(signal.SIGCONT)
        assert cluster.wait(timeout=300) == 0, cluster.tail()
    finally:
        cluster.close()
    from tests.test_docs import readme_metrics

    undocumented = sorted(set(served) - readme_metrics())
    assert not undocumented, f"served but not in the README's metric table: {undocumented}"
    names = {name for expr in queries() for name in METRIC.findall(expr)}
    assert len(names) >= 10
    missing = sorted(names - set(served))
    assert not missing, f"the dashboard asks for metrics no role serves: {missing}"
    for expr in queries():
        for name, matchers in SELECTOR.findall(expr):
            for label, value in MATCHER.findall(matchers):
                assert (label, value) in served[name], f"{name}{{{label}={value!r}}}: never served"
