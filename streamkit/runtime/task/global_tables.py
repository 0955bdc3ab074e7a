"""Global tables on a worker: each is loaded whole (every partition of its topic) before
any task runs, then kept up to date between processing rounds.

As in Kafka Streams, global-table updates are applied as soon as they are read, not
in timestamp order with the streams joining them: a join sees the table as this
worker has read it so far. The store keeps its read positions with its data, so a
restarted worker reads only what it has not applied yet.
"""
from __future__ import annotations

import logging
import os
import time
from typing import Dict, Mapping, Optional

from ...state.global_store import GlobalStore
from ...state.task_stores import open_bytes_store
from ...topology import Topology
from ...core.records import TopicPartition
from ...transport.base import Admin, Consumer

log = logging.getLogger(__name__)

FETCH_WAIT = 0.1  # s per fetch while loading
EMPTY_FETCHES_BELOW_END = 20  # then loading gives up waiting for records the broker reported


class GlobalTables:
    """The global-table stores of one worker (or test driver) and the reader feeding them."""

    def __init__(self, topology: Topology, *, backend: str, state_dir: Optional[str],
                 consumer: Optional[Consumer] = None) -> None:
        self.consumer = consumer
        self.stores: Dict[str, GlobalStore] = {}
        self.by_topic: Dict[str, GlobalStore] = {}
        """The same stores by the topic each replicates."""
        for name, topic in topology.global_tables.items():
            spec = topology.topics[topic]
            path = os.path.join(state_dir, "global", name) if state_dir and backend != "memory" else None
            inner, _rebuilt = open_bytes_store(backend, path)
            store = GlobalStore(name, topic, spec.key_serde, spec.value_serde, inner)
            self.stores[name] = store
            self.by_topic[topic] = store

    def __bool__(self) -> bool:
        return bool(self.stores)

    async def load(self, admin: Admin, partitions: Mapping[str, int]) -> int:
        """Read every global topic up to its current end; return the records applied."""
        if not self.stores:
            return 0
        assert self.consumer is not None
        started = time.monotonic()
        ends: Dict[TopicPartition, int] = {}
        positions: Dict[TopicPartition, int] = {}
        for topic, store in self.by_topic.items():
            for partition in range(partitions[topic]):
                tp = TopicPartition(topic, partition)
                offsets = admin.partition_offsets(topic, partition)
                position = store.position(partition)
                if position is None or position < offsets.start or position > offsets.end:
                    position = offsets.start  # new, compacted away, or the topic was recreated
                positions[tp] = position
                ends[tp] = offsets.end
        self.consumer.assign(list(positions), positions)
        applied, empty = 0, 0
        while any(self.consumer.position(tp) < end for tp, end in ends.items()) and empty < EMPTY_FETCHES_BELOW_END:
            count = await self.update(FETCH_WAIT)
            empty = 0 if count else empty + 1
            applied += count
        for tp, end in ends.items():
            if self.consumer.position(tp) < end:
                log.warning("global table of topic %s: loading stopped at partition %d offset %d, below the end %d "
                            "reported by the broker (aborted or open transactions?)", tp.topic, tp.partition,
                            self.consumer.position(tp), end)
        log.info("loaded %d global table(s): %d record(s) in %.2f s", len(self.stores), applied,
                 time.monotonic() - started)
        return applied

    async def update(self, max_wait: float = 0.0) -> int:
        """Apply what the global topics have gained; return the records applied."""
        if not self.stores:
            return 0
        assert self.consumer is not None
        applied = 0
        for batch in await self.consumer.fetch(max_wait):
            if batch.records:
                store = self.by_topic[batch.topic]
                store.apply(batch.partition, batch.records, batch.records[-1][0] + 1)
                applied += len(batch.records)
        return applied

    def close(self) -> None:
        for store in self.stores.values():
            store.close()
        self.stores.clear()
