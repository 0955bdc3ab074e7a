"""The app's topics on the broker: created with compatible partition counts before the
worker starts (:func:`prepare_topics`), and checked while it runs (:class:`AppTopics`)."""
from __future__ import annotations

import logging
from typing import Dict, Mapping

from ...errors import StreamkitError, TopologyError
from ...topology import Topology
from ...topology.passes import resolve_partitions
from ...transport.base import Admin, Transport

log = logging.getLogger(__name__)


def prepare_topics(topology: Topology, admin: Admin, *, with_dlq: bool) -> Dict[str, int]:
    """Create missing topics (sources need a declared ``partitions=``) and return all counts.

    A declared partition count that differs from an existing topic's is an error:
    keys would land on other partitions than the app expects.
    """
    existing = {}
    for topic in topology.topics:
        meta = admin.topic(topic)
        if meta is not None:
            existing[topic] = meta.partitions
            declared = topology.topics[topic].partitions
            if declared is not None and declared != meta.partitions and not topology.topics[topic].internal:
                raise TopologyError(
                    f"topic '{topic}' has {meta.partitions} partitions but the app declares {declared}: "
                    "change partitions= in app.topic(...) or recreate the topic")
    counts = resolve_partitions(topology, existing)
    if with_dlq:
        counts[f"{topology.app_id}-dlq"] = max(counts.values())
    for topic, partitions in counts.items():
        if topic not in existing:
            spec = topology.topics.get(topic)
            config = dict(spec.config) if spec is not None else {}
            admin.create_topic(topic, partitions, config, exist_ok=True)
            log.info("created topic %s with %d partition(s)", topic, partitions)
    return counts


class AppTopics:
    """The topics of a running app with the partition counts it started with."""

    def __init__(self, app_id: str, transport: Transport, partitions: Mapping[str, int]) -> None:
        self._app_id = app_id
        self._transport = transport
        self.partitions: Dict[str, int] = dict(partitions)

    def check(self) -> None:
        """Fail clearly when a topic of the app was deleted (or recreated with another
        partition count) under the running worker, instead of waiting for input forever."""
        counts = self._transport.admin.partition_counts(list(self.partitions))
        for topic, partitions in self.partitions.items():
            actual = counts.get(topic)
            if actual is None:
                raise StreamkitError(f"topic '{topic}' was deleted while app {self._app_id} ran on "
                                     f"{self._transport.url}; recreate it with {partitions} partition(s) "
                                     "and restart the workers")
            if actual != partitions:
                raise StreamkitError(f"topic '{topic}' now has {actual} partition(s) but app "
                                     f"{self._app_id} started with {partitions} (deleted and recreated "
                                     "while the app ran?); keys would land on the wrong tasks")
