"""The embedded broker behind the runtime's Transport interface."""
from __future__ import annotations

import asyncio
import time
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from ..base import (Consumer, FetchedBatch, Membership, OutgoingRecord, Producer, TopicPartition,
                    Transport)
from .broker import EmbeddedBroker

MAX_RECORDS_PER_FETCH = 10_000
_IDLE_SLEEP = 0.01  # s between looks at the log when nothing is there


class EmbeddedConsumer(Consumer):
    def __init__(self, broker: EmbeddedBroker, group: str) -> None:
        self._broker = broker
        self._group = group
        self._readers: Dict[TopicPartition, object] = {}

    def assign(self, partitions: Sequence[TopicPartition], positions: Mapping[TopicPartition, int]) -> None:
        for tp in partitions:
            reader = self._broker.reader(tp.topic, tp.partition)
            start = positions.get(tp)
            reader.seek(start if start is not None else self._broker.partition_offsets(*tp).start)
            self._readers[tp] = reader

    def unassign(self, partitions: Sequence[TopicPartition]) -> None:
        for tp in partitions:
            reader = self._readers.pop(tp, None)
            if reader is not None:
                reader.close()

    async def fetch(self, max_wait: float) -> List[FetchedBatch]:
        deadline = time.monotonic() + max_wait
        while True:
            out = []
            for tp, reader in self._readers.items():
                records = reader.read(MAX_RECORDS_PER_FETCH)
                if records:
                    out.append(FetchedBatch(tp.topic, tp.partition, records))
            if out or time.monotonic() >= deadline:
                return out
            await asyncio.sleep(_IDLE_SLEEP)

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        if offsets:
            self._broker.commit_offsets(self._group, offsets)

    def committed(self, partitions: Sequence[TopicPartition]) -> Dict[TopicPartition, int]:
        stored = self._broker.committed_offsets(self._group)
        return {tp: stored[tp] for tp in partitions if tp in stored}

    def close(self) -> None:
        self.unassign(list(self._readers))


class EmbeddedProducer(Producer):
    def __init__(self, broker: EmbeddedBroker) -> None:
        self._broker = broker

    async def send(self, batches: Sequence[Tuple[str, int, Sequence[OutgoingRecord]]]) -> None:
        for topic, partition, records in batches:
            self._broker.append(topic, partition, records)

    async def flush(self) -> None:
        self._broker.sync()


class EmbeddedMembership(Membership):
    """Task ownership through OS file locks: freed when a worker exits or is killed."""

    def __init__(self, broker: EmbeddedBroker, group: str) -> None:
        self._broker = broker
        self._group = group
        self._locks: Dict[str, object] = {}

    def acquire(self, task_ids: Sequence[str]) -> List[str]:
        taken = []
        for task_id in task_ids:
            if task_id in self._locks:
                continue
            lock = self._broker.try_lock_task(self._group, task_id)
            if lock is not None:
                self._locks[task_id] = lock
                taken.append(task_id)
        return taken

    def release(self, task_id: str) -> None:
        lock = self._locks.pop(task_id, None)
        if lock is not None:
            lock.release()

    def owner_of(self, task_id: str) -> Optional[str]:
        owner = self._broker.task_owner(self._group, task_id)
        return None if owner is None else f"pid {owner.get('pid')} on {owner.get('host')}"


class EmbeddedTransport(Transport):
    """``embedded://<directory>``: streamkit's local durable log."""

    def __init__(self, directory: str) -> None:
        self.url = f"embedded://{directory}"
        self.directory = directory
        self.broker = EmbeddedBroker(directory)
        self.admin = self.broker

    def consumer(self, group: str) -> Consumer:
        return EmbeddedConsumer(self.broker, group)

    def producer(self) -> Producer:
        return EmbeddedProducer(self.broker)

    def membership(self, group: str) -> Membership:
        return EmbeddedMembership(self.broker, group)

    def close(self) -> None:
        self.broker.close()
