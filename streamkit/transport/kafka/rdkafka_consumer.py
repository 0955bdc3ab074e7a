"""A consumer of explicitly assigned partitions on librdkafka (restore, standbys, global
tables, the console consumer): ``kafka_client = "librdkafka"``.

Fetching is :class:`~.rdkafka_fetcher.RdKafkaFetcher`'s. Commits, for a consumer with a
group, are librdkafka's synchronous ``commit()`` on the fetcher's helper thread: a commit
outside group membership (generation -1), as :class:`~.consumer.KafkaAssignedConsumer`
makes with aiokafka, which Kafka accepts for a group without active members.
"""
from __future__ import annotations

import uuid
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from ...errors import StreamkitError
from ..base import Consumer, FetchedBatch, TopicPartition
from .config import KafkaClientConfig
from .rdkafka_fetcher import RdKafkaFetcher

COMMITTED_TIMEOUT_S = 15.0


class RdKafkaAssignedConsumer(Consumer):
    """Reads the partitions it is given from the positions it is given; commits for
    ``group`` when it has one."""

    def __init__(self, config: KafkaClientConfig, group: Optional[str], read_committed: bool) -> None:
        self._group = group
        # librdkafka wants a group.id even for a consumer that never joins or commits.
        self._fetcher = RdKafkaFetcher(config, group or f"{config.client_id}-reader-{uuid.uuid4().hex[:12]}",
                                       read_committed, f"reading for group {group}" if group else "reading")
        self._ck = self._fetcher._ck

    def assign(self, partitions: Sequence[TopicPartition], positions: Mapping[TopicPartition, int]) -> None:
        self._fetcher.assign(partitions, positions)

    def unassign(self, partitions: Sequence[TopicPartition]) -> None:
        self._fetcher.unassign(partitions)

    async def fetch(self, max_wait: float) -> List[FetchedBatch]:
        return await self._fetcher.fetch(max_wait)

    def position(self, partition: TopicPartition) -> int:
        return self._fetcher.position(partition)

    def has_unread(self, partition: TopicPartition) -> Optional[bool]:
        return self._fetcher.has_unread(partition)

    def take_lost(self) -> List[Tuple[TopicPartition, int, int]]:
        return self._fetcher.take_lost()

    async def commit(self, offsets: Mapping[TopicPartition, int],
                     metadata: Optional[Mapping[TopicPartition, str]] = None) -> None:
        if not offsets:
            return
        if self._group is None:
            raise StreamkitError("this consumer has no group: nothing to commit offsets for")
        notes = metadata or {}
        ck = self._ck
        handles = [ck.TopicPartition(tp.topic, tp.partition, offset, notes[tp]) if notes.get(tp)
                   else ck.TopicPartition(tp.topic, tp.partition, offset) for tp, offset in offsets.items()]
        try:
            await self._fetcher.call(self._fetcher.client().commit, offsets=handles, asynchronous=False)
        except ck.KafkaException as exc:
            raise StreamkitError(f"group {self._group}: committing offsets failed: {exc}") from None

    async def _committed(self, partitions: Sequence[TopicPartition]) -> list:
        if self._group is None or not partitions:
            return []
        ck = self._ck
        try:
            return await self._fetcher.call(self._fetcher.client().committed,
                                            [ck.TopicPartition(tp.topic, tp.partition) for tp in partitions],
                                            timeout=COMMITTED_TIMEOUT_S)
        except ck.KafkaException as exc:
            raise StreamkitError(f"group {self._group}: reading committed offsets failed: {exc}") from None

    async def committed(self, partitions: Sequence[TopicPartition]) -> Dict[TopicPartition, int]:
        return {TopicPartition(h.topic, h.partition): h.offset for h in await self._committed(partitions)
                if h.offset >= 0}

    async def committed_metadata(self, partitions: Sequence[TopicPartition]) -> Dict[TopicPartition, str]:
        return {TopicPartition(h.topic, h.partition): h.metadata for h in await self._committed(partitions)
                if h.offset >= 0 and h.metadata}

    def close(self) -> None:
        self._fetcher.close()

    async def aclose(self) -> None:
        await self._fetcher.aclose()
