"""Prometheus metrics over HTTP (``--metrics-port``), read at scrape time.

Each role already keeps the numbers that matter (the dispatcher's task
states, the manifest's totals, the sink's throughput window), so a collector
reads them when Prometheus scrapes instead of a second set of counters being
kept in step with them.  The scrape runs in prometheus_client's HTTP thread:
collectors only read, and copy a dict before walking it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from common.wire.transport import ListenError

if TYPE_CHECKING:  # imported when a scrape or --metrics-port needs them: ~25 ms a role otherwise (issue #33)
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
    from prometheus_client.metrics_core import Metric

log = logging.getLogger(__name__)

__all__ = ["MetricsServer", "counter", "gauge"]


def _family(kind, name: str, documentation: str, value: float | None, labels: dict[str, float] | None,
            label: str):
    if labels is None:
        return kind(name, documentation, value=value)
    family = kind(name, documentation, labels=[label])
    for key, number in sorted(labels.items()):
        family.add_metric([key], number)
    return family


def counter(name: str, documentation: str, value: float | None = None, *,
            labels: dict[str, float] | None = None, label: str = "") -> CounterMetricFamily:
    """A counter, either one value or one value per ``label`` value."""
    from prometheus_client.core import CounterMetricFamily

    return _family(CounterMetricFamily, name, documentation, value, labels, label)


def gauge(name: str, documentation: str, value: float | None = None, *,
          labels: dict[str, float] | None = None, label: str = "") -> GaugeMetricFamily:
    """A gauge, either one value or one value per ``label`` value."""
    from prometheus_client.core import GaugeMetricFamily

    return _family(GaugeMetricFamily, name, documentation, value, labels, label)


class _Collector:
    def __init__(self, collect: Callable[[], Iterable[Metric]]):
        self._collect = collect

    def collect(self) -> Iterable[Metric]:
        return list(self._collect())


class MetricsServer:
    """Serves ``collect()``'s metrics on http://HOST:PORT/metrics until closed."""

    def __init__(self, collect: Callable[[], Iterable[Metric]], port: int, bind_host: str = "*"):
        from prometheus_client import CollectorRegistry, start_http_server

        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collector(collect))
        address = "0.0.0.0" if bind_host in ("*", "") else bind_host
        try:
            self._server, self._thread = start_http_server(port, addr=address, registry=registry)
        except OSError as error:
            raise ListenError(f"cannot serve metrics on {address}:{port}: {error.strerror or error}") from None
        self.port = self._server.server_port
        log.info("metrics on http://%s:%d/metrics", address, self.port)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
