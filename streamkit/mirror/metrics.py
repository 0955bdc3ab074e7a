"""``/metrics`` of a running mirror: its lag and progress per source partition, for Prometheus."""
from __future__ import annotations

from typing import Iterator, Tuple

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import start_http_server
from prometheus_client.registry import Collector

from .copier import MirrorProgress


class MirrorCollector(Collector):
    """Reads :class:`MirrorProgress` at scrape time (nothing is counted twice)."""

    def __init__(self, name: str, progress: MirrorProgress) -> None:
        self._name = name
        self._progress = progress

    def collect(self) -> Iterator[Metric]:
        progress = self._progress
        labels = ["mirror", "topic", "partition"]
        lag = GaugeMetricFamily("streamkit_mirror_lag_records",
                                "Offsets between the mirror's source position and the source's end offset.",
                                labels=labels)
        position = GaugeMetricFamily("streamkit_mirror_position",
                                     "The next source offset to copy, as committed on the target.", labels=labels)
        copied = CounterMetricFamily("streamkit_mirror_records_copied",
                                     "Records copied by this mirror process.", labels=labels)
        lost = CounterMetricFamily("streamkit_mirror_records_lost",
                                   "Source records deleted (retention) before the mirror copied them.",
                                   labels=labels)
        for tp, behind in sorted(progress.lag().items()):
            lag.add_metric([self._name, tp.topic, str(tp.partition)], behind)
        for tp, offset in sorted(progress.positions.items()):
            position.add_metric([self._name, tp.topic, str(tp.partition)], offset)
        for tp, count in sorted(progress.copied.items()):
            copied.add_metric([self._name, tp.topic, str(tp.partition)], count)
        for tp, count in sorted(progress.lost.items()):
            lost.add_metric([self._name, tp.topic, str(tp.partition)], count)
        yield from (lag, position, copied, lost)


def serve_metrics(name: str, progress: MirrorProgress, address: str) -> Tuple[object, str]:
    """Serve ``/metrics`` on ``address`` (``host:port``; port 0 picks one) in a background
    thread; return the server (``shutdown()`` stops it) and the address it listens on."""
    host, _, port = address.rpartition(":")
    registry = CollectorRegistry()
    registry.register(MirrorCollector(name, progress))
    server, _thread = start_http_server(int(port), host or "127.0.0.1", registry)
    bound_host, bound_port = server.server_address[:2]
    return server, f"{bound_host}:{bound_port}"
