"""Writing and reading back test records on any transport, for the mirror tests."""
from __future__ import annotations

import asyncio
from typing import Dict, List, Optional, Sequence, Tuple

from streamkit.core.records import OutgoingRecord, TopicPartition
from streamkit.transport.base import Transport

Copied = Tuple[Optional[bytes], Optional[bytes], int, Optional[tuple]]
"""(key, value, timestamp, headers) of a record, without its offset."""


def event(n: int, partition: int) -> OutgoingRecord:
    """Record ``n`` of a partition: key, value, a timestamp and two headers, all derived from n."""
    return (f"k{n % 7}".encode(), f"v{n}-p{partition}".encode(), 1_700_000_000_000 + n,
            (("trace", f"t{n}".encode()), ("origin", b"test")))


def write_transactions(transport: Transport, topic: str, partitions: int, transactions: int, per: int,
                       *, first: int = 0, transactional_id: str = "writer") -> None:
    """``transactions`` transactions of ``per`` records per partition, numbered from ``first``:
    every transaction leaves a marker, so the source's offsets have gaps."""
    async def write() -> None:
        producer = transport.producer(transactional_id=transactional_id)
        try:
            for t in range(transactions):
                await producer.begin_transaction()
                await producer.send([(topic, p, [event(first + t * per + i, p) for i in range(per)])
                                     for p in range(partitions)])
                await producer.commit_transaction("writer-group", {})
        finally:
            await producer.aclose()
    asyncio.run(write())


def read_all(transport: Transport, topic: str, partitions: int, *, wait: float = 1.0,
             start: Optional[Dict[int, int]] = None) -> Dict[int, List[Tuple[int, Copied]]]:
    """Every committed record of ``topic`` per partition (from offset ``start[p]`` where
    given): (offset, (key, value, timestamp, headers))."""
    async def read() -> Dict[int, List[Tuple[int, Copied]]]:
        ends = {p: transport.admin.partition_offsets(topic, p).end for p in range(partitions)}
        consumer = transport.consumer("mirror-test-reader", read_committed=True)
        out: Dict[int, List[Tuple[int, Copied]]] = {p: [] for p in range(partitions)}
        try:
            consumer.assign([TopicPartition(topic, p) for p in range(partitions)],
                            {TopicPartition(topic, p): o for p, o in (start or {}).items()})
            idle = 0
            while idle < 3:
                batches = await consumer.fetch(wait)
                for batch in batches:
                    out[batch.partition].extend((o, (k, v, ts, tuple(h) if h else None))
                                                for o, ts, k, v, h in batch.records)
                done = all(consumer.position(TopicPartition(topic, p)) >= ends[p] for p in range(partitions))
                idle = 3 if done else idle + (0 if batches else 1)
        finally:
            await consumer.aclose()
        return out
    return asyncio.run(read())


def values(records: Dict[int, List[Tuple[int, Copied]]]) -> Dict[int, List[Copied]]:
    return {p: [r for _o, r in rs] for p, rs in records.items()}


def commit_group(transport: Transport, group: str, offsets: Dict[TopicPartition, int],
                 metadata: Optional[Dict[TopicPartition, str]] = None) -> None:
    async def commit() -> None:
        consumer = transport.consumer(group)
        try:
            consumer.assign(list(offsets), offsets)
            await consumer.commit(offsets, metadata)
        finally:
            await consumer.aclose()
    asyncio.run(commit())


def committed(transport: Transport, group: str, partitions: Sequence[TopicPartition]) -> Dict[TopicPartition, int]:
    async def read() -> Dict[TopicPartition, int]:
        consumer = transport.consumer(group)
        try:
            return await consumer.committed(partitions)
        finally:
            await consumer.aclose()
    return asyncio.run(read())
