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

from ...errors import StreamkitError
from ...state.global_store import GlobalStore
from ...state.restore import STALLED_RESTORE_TIMEOUT, reread_end
from ...state.task_stores import open_bytes_store
from ...topology import Topology
from ...core.records import TopicPartition
from ...transport.base import Admin, Consumer

log = logging.getLogger(__name__)

FETCH_WAIT = 0.1  # s per fetch while loading
EMPTY_FETCHES_BELOW_END = 20
"""Empty fetches below the reported ends (2 s) after which the ends are read again."""


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
        stalled_since: Optional[float] = None
        while any(self.consumer.position(tp) < end for tp, end in ends.items()):
            count = await self.update(FETCH_WAIT)
            applied += count
            if count:
                empty, stalled_since = 0, None
                continue
            empty += 1
            if empty < EMPTY_FETCHES_BELOW_END:
                continue
            # Nothing readable below an end for 2 s (a leader moving, a broker away): read the
            # ends again; never start the tasks on a part of a table, fail after a long wait.
            empty = 0
            for tp in [tp for tp, end in ends.items() if self.consumer.position(tp) < end]:
                ends[tp] = await reread_end(admin, tp, ends[tp])
            behind = {tp: end for tp, end in ends.items() if self.consumer.position(tp) < end}
            if not behind:
                break
            now = time.monotonic()
            stalled_since = now if stalled_since is None else stalled_since
            where = ", ".join(f"{tp.topic}[{tp.partition}] at offset {self.consumer.position(tp)} of {end}"
                              for tp, end in sorted(behind.items()))
            if now - stalled_since >= STALLED_RESTORE_TIMEOUT:
                raise StreamkitError(f"loading the global tables: nothing could be read for {now - stalled_since:.0f} "
                                     f"s below the ends the broker reports ({where}): tasks do not start with a "
                                     "part of a global table")
            log.warning("loading the global tables: nothing could be read for %.0f s below the ends the broker "
                        "reports (%s): waiting (gives up after %.0f s)", now - stalled_since, where,
                        STALLED_RESTORE_TIMEOUT)
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
