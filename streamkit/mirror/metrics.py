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
        partitions = GaugeMetricFamily("streamkit_mirror_topic_partitions",
                                       "Partitions of a mirrored topic, on the source and on the target.",
                                       labels=["mirror", "topic", "side"])
        for topic, (on_source, on_target) in sorted(progress.partitions.items()):
            partitions.add_metric([self._name, topic, "source"], on_source)
            partitions.add_metric([self._name, topic, "target"], on_target)
        translations = CounterMetricFamily("streamkit_mirror_group_translations",
                                           "Translations of a consumer group's offsets, by outcome: moved "
                                           "(committed on the target), unchanged, refused (live on the target).",
                                           labels=["mirror", "group", "outcome"])
        for (group, outcome), count in sorted(progress.translations.items()):
            translations.add_metric([self._name, group, outcome], count)
        yield from (lag, position, copied, lost, partitions, translations)


def serve_metrics(name: str, progress: MirrorProgress, address: str) -> Tuple[object, str]:
    """Serve ``/metrics`` on ``address`` (``host:port``; port 0 picks one) in a background
    thread; return the server (``shutdown()`` stops it) and the address it listens on."""
    host, _, port = address.rpartition(":")
    registry = CollectorRegistry()
    registry.register(MirrorCollector(name, progress))
    server, _thread = start_http_server(int(port), host or "127.0.0.1", registry)
    bound_host, bound_port = server.server_address[:2]
    return server, f"{bound_host}:{bound_port}"
