"""The sink's Prometheus page with counters of steps it has never heard of: each step's counters are a family
named after the step (mlm_sink_<step>), so a step (or split) named like one of the sink's own families
(duplicate_acks, rate, ...) must not give the page two families of one name: Prometheus refuses the whole
scrape ("second TYPE line for metric name"), and the manifest keeps the name for every later run."""

from types import SimpleNamespace

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from sink.server import SinkOptions, SinkServer

TOTALS = {"tasks": 2, "shards": 2, "records": 9, "documents": 3, "tokens": 40, "bytes_written": 100,
          "skipped_documents": {}, "holdout": {"documents": 1, "shards": 1},
          "demo-drop-digits": {"dropped": 4},
          "duplicate_acks": {"seen": 1}, "rate": {"fast": 2}, "worker_stage_seconds": {"x": 3}}


def scrape(server: SinkServer) -> list:
    families = list(server.metrics())

    class Page(Collector):
        def collect(self):
            return families

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Page())
    return list(text_string_to_metric_families(generate_latest(registry).decode()))


def test_step_counters_never_give_two_families_of_one_name():
    server = SinkServer(SinkOptions(ventilator="127.0.0.1:1"))
    server.manifest = SimpleNamespace(totals=TOTALS)
    families = scrape(server)
    names = [family.name for family in families]
    assert len(names) == len(set(names)), sorted(name for name in names if names.count(name) > 1)
    by_name = {family.name: family for family in families}
    # The sink's own families are what they were, and steps of other names are still served.
    assert [s.value for s in by_name["mlm_sink_duplicate_acks"].samples] == [0]
    assert {s.labels["quantity"]: s.value for s in by_name["mlm_sink_holdout"].samples} == {"documents": 1,
                                                                                            "shards": 1}
    assert {s.labels["quantity"]: s.value for s in by_name["mlm_sink_demo_drop_digits"].samples} == {"dropped": 4}
