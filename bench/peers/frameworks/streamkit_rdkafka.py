"""streamkit with ``kafka_client = "librdkafka"``: the same apps and worker as
``bench.peers.frameworks.streamkit``, producing and fetching through librdkafka
(confluent-kafka); group membership and commits stay on aiokafka (see
``streamkit/transport/kafka/rdkafka_group.py``). Column ``streamkit-rdkafka``."""
from __future__ import annotations

import functools
import os
from typing import Any, List, Optional

from bench.peers.frameworks import streamkit as base
from bench.peers.probe import Probe
from bench.peers.workload import Scenario

NAME = "streamkit-rdkafka"


def version() -> str:
    import confluent_kafka

    version = confluent_kafka.version()  # a str; older releases: (str, int)
    version = version if isinstance(version, str) else version[0]
    return f"{base.version()} on confluent-kafka {version} (librdkafka {confluent_kafka.libversion()[0]})"


def unsupported(scenario: Scenario, transactions: bool) -> Optional[str]:
    if scenario.exactly_once:
        return "skipped: exactly_once is not implemented with librdkafka yet"
    return base.unsupported(scenario, transactions)


def count_rdkafka_fetches(probe: Probe, topic: str) -> None:
    """Count the records of ``topic`` the librdkafka fetcher hands out (the aiokafka group
    member fetches nothing: its partitions stay paused)."""
    from streamkit.transport.kafka.rdkafka_fetcher import RdKafkaFetcher

    batches = RdKafkaFetcher._batches

    @functools.wraps(batches)
    def counted(self: RdKafkaFetcher, messages: list, since: Optional[int]) -> List[Any]:
        out = batches(self, messages, since)
        probe.fetched(sum(len(b.records) for b in out if b.topic == topic))
        return out

    RdKafkaFetcher._batches = counted  # type: ignore[method-assign]


def run(spec: dict, probe: Probe) -> None:
    os.environ["STREAMKIT_KAFKA_CLIENT"] = "librdkafka"
    count_rdkafka_fetches(probe, spec["source"])
    base.run(spec, probe)
