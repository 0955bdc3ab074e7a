"""Feeds file sources to tasks through the worker's consumer.

The consumer returned by :func:`with_external_sources` reads the anchor topics of
``b.stream(source)`` from the source's files and everything else from the broker;
offsets of both are committed and read back through the broker's group offsets
(the anchor topic exists, empty, so any broker accepts them).
"""
from __future__ import annotations

import asyncio
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from ...sources.base import PartitionReader, Source
from ...topology import Topology
from ...topology.nodes import SourceNode
from ...core.records import TopicPartition
from ...transport.base import Consumer, FetchedBatch

READ_RECORDS = 5000  # per partition and fetch


def external_sources(topology: Topology) -> Dict[str, Source]:
    """The sources read instead of topics, by anchor topic."""
    return {node.topic: node.external for node in topology.nodes.values()
            if isinstance(node, SourceNode) and node.external is not None}


def with_external_sources(consumer: Consumer, topology: Topology) -> Consumer:
    sources = external_sources(topology)
    return ExternalSourceConsumer(consumer, sources) if sources else consumer


class ExternalSourceConsumer(Consumer):
    """Routes the anchor topics' partitions to file readers, the rest to ``inner``."""

    def __init__(self, inner: Consumer, sources: Mapping[str, Source]) -> None:
        self.inner = inner
        self.sources = sources
        self._readers: Dict[TopicPartition, PartitionReader] = {}

    def assign(self, partitions: Sequence[TopicPartition], positions: Mapping[TopicPartition, int]) -> None:
        others = []
        for tp in partitions:
            source = self.sources.get(tp.topic)
            if source is None:
                others.append(tp)
                continue
            reader = source.open_partition(tp.partition)
            reader.seek(positions.get(tp, 0))
            self._readers[tp] = reader
        if others:
            self.inner.assign(others, positions)

    def unassign(self, partitions: Sequence[TopicPartition]) -> None:
        others = []
        for tp in partitions:
            reader = self._readers.pop(tp, None)
            if reader is not None:
                reader.close()
            elif tp.topic not in self.sources:
                others.append(tp)
        if others:
            self.inner.unassign(others)

    async def fetch(self, max_wait: float) -> List[FetchedBatch]:
        batches = []
        for tp, reader in self._readers.items():
            records = reader.read(READ_RECORDS)
            if records:
                batches.append(FetchedBatch(tp.topic, tp.partition, records))
        if batches:
            await asyncio.sleep(0)
        batches.extend(await self.inner.fetch(0 if batches else max_wait))
        return batches

    async def commit(self, offsets: Mapping[TopicPartition, int],
                     metadata: Optional[Mapping[TopicPartition, str]] = None) -> None:
        await self.inner.commit(offsets, metadata)

    async def committed(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return await self.inner.committed(partitions)

    async def committed_metadata(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, str]:
        return await self.inner.committed_metadata(partitions)

    def has_unread(self, partition: TopicPartition) -> Optional[bool]:
        reader = self._readers.get(partition)
        return self.inner.has_unread(partition) if reader is None else reader.has_more()

    def take_lost(self) -> List[Tuple[TopicPartition, int, int]]:
        return self.inner.take_lost()  # file sources lose nothing

    def position(self, partition: TopicPartition) -> int:
        reader = self._readers.get(partition)
        return self.inner.position(partition) if reader is None else reader.position

    def _close_readers(self) -> None:
        for reader in self._readers.values():
            reader.close()
        self._readers.clear()

    def close(self) -> None:
        self._close_readers()
        self.inner.close()

    async def aclose(self) -> None:
        self._close_readers()
        await self.inner.aclose()
