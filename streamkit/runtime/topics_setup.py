"""Makes sure every topic a topology needs exists with a compatible partition count."""
from __future__ import annotations

import logging
from typing import Dict

from ..errors import TopologyError
from ..topology import Topology
from ..topology.passes import resolve_partitions
from ..transport.base import Admin

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
