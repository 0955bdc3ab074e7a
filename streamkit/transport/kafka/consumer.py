"""A consumer of explicitly assigned partitions (restore, standbys, the console consumer)."""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as KafkaTopicPartition
from aiokafka.errors import KafkaError

from ...errors import StreamkitError
from ..base import Consumer, FetchedBatch, TopicPartition
from .config import KafkaClientConfig
from .connect import authorization_error, start_with_retry
from .no_auto_create import no_topic_auto_creation
from .records import Lost, fetch_batches



class KafkaAssignedConsumer(Consumer):
    """Reads the partitions it is given from the positions it is given; commits for
    ``group`` when it has one. Starts its aiokafka client lazily, on the caller's loop."""

    def __init__(self, config: KafkaClientConfig, group: Optional[str], read_committed: bool) -> None:
        self._group = group
        self._config = config
        self._servers = ",".join(config.bootstrap_servers)
        self._connect_timeout = config.connect_timeout_s
        self._kafka = no_topic_auto_creation(AIOKafkaConsumer(
            **config.consumer_kwargs(), group_id=group, enable_auto_commit=False,
            auto_offset_reset="none",  # a position outside the log is handled by fetch_batches
            isolation_level="read_committed" if read_committed else "read_uncommitted"))
        self._lost: Lost = []
        self._started = False
        self._assigned: Set[TopicPartition] = set()
        self._seeks: Dict[TopicPartition, Optional[int]] = {}
        self._positions: Dict[TopicPartition, int] = {}
        self._assignment_changed = False

    def assign(self, partitions: Sequence[TopicPartition], positions: Mapping[TopicPartition, int]) -> None:
        for tp in partitions:
            self._assigned.add(tp)
            self._seeks[tp] = positions.get(tp)
            if tp in positions:
                self._positions[tp] = positions[tp]
        self._assignment_changed = True

    def unassign(self, partitions: Sequence[TopicPartition]) -> None:
        for tp in partitions:
            self._assigned.discard(tp)
            self._seeks.pop(tp, None)
            self._positions.pop(tp, None)
        self._assignment_changed = True

    def position(self, partition: TopicPartition) -> int:
        return self._positions.get(partition, 0)

    def take_lost(self) -> List[Tuple[TopicPartition, int, int]]:
        lost, self._lost = [(tp, first, end) for tp, first, end in self._lost if tp in self._assigned], []
        return lost

    async def _prepare(self) -> None:
        if not self._started:
            await start_with_retry(self._kafka.start, self._servers, self._connect_timeout, "consumer",
                                   self._config)
            self._started = True
        if self._assignment_changed:
            # assign() starts a new subscription and forgets every position: seek them back.
            self._kafka.assign([KafkaTopicPartition(*tp) for tp in self._assigned])
            for tp in self._assigned:
                if tp not in self._seeks and tp in self._positions:
                    self._seeks[tp] = self._positions[tp]
            self._assignment_changed = False
        for tp, offset in self._seeks.items():
            ktp = KafkaTopicPartition(*tp)
            if offset is None:
                await self._kafka.seek_to_beginning(ktp)
            else:
                self._kafka.seek(ktp, offset)
        self._seeks.clear()

    async def fetch(self, max_wait: float) -> List[FetchedBatch]:
        if not self._assigned:
            return []
        await self._prepare()
        what = f"reading {describe_partitions(self._assigned)}"
        try:
            out = await fetch_batches(self._kafka, max_wait, what, self._lost)
        except StreamkitError as exc:
            raise self._refused(exc.__cause__, f"{what} (READ)") or exc
        # The position can be past the last record (transaction markers, aborted data).
        for tp in self._assigned:
            self._positions[tp] = await self._kafka.position(KafkaTopicPartition(*tp))
        return out

    async def commit(self, offsets: Mapping[TopicPartition, int],
                     metadata: Optional[Mapping[TopicPartition, str]] = None) -> None:
        if not offsets:
            return
        if self._group is None:
            raise StreamkitError("this consumer has no group: nothing to commit offsets for")
        await self._prepare()
        try:
            await self._kafka.commit(kafka_offsets(offsets, metadata))
        except KafkaError as exc:
            raise self._refused(exc, f"committing offsets for group '{self._group}' (READ)") or exc

    def _refused(self, exc: Optional[BaseException], action: str) -> Optional[StreamkitError]:
        """``exc`` as an AuthorizationError naming the principal, if the authorizer refused it."""
        return authorization_error(exc, self._config, action) if exc is not None else None

    async def committed(self, partitions: Sequence[TopicPartition]) -> Dict[TopicPartition, int]:
        if self._group is None:
            return {}
        if not self._started:
            await start_with_retry(self._kafka.start, self._servers, self._connect_timeout, "consumer",
                                   self._config)
            self._started = True
        return await committed_offsets(self._kafka, partitions)

    async def committed_metadata(self, partitions: Sequence[TopicPartition]) -> Dict[TopicPartition, str]:
        if self._group is None:
            return {}
        return await committed_metadata(self._kafka, partitions)

    async def aclose(self) -> None:
        self._assigned.clear()
        self._started = False
        await self._kafka.stop()  # also when never started: aiokafka warns about unclosed clients

    def close(self) -> None:
        stop_soon(self._kafka.stop())
        self._started = False


async def committed_offsets(kafka: AIOKafkaConsumer, partitions: Sequence[TopicPartition]
                            ) -> Dict[TopicPartition, int]:
    """The committed offsets of ``partitions`` for ``kafka``'s group."""
    out = {}
    for tp in partitions:
        offset = await kafka.committed(KafkaTopicPartition(*tp))
        if offset is not None and offset >= 0:
            out[tp] = offset
    return out


async def committed_metadata(kafka: AIOKafkaConsumer, partitions: Sequence[TopicPartition]
                             ) -> Dict[TopicPartition, str]:
    """The metadata strings committed with the offsets of ``partitions`` for ``kafka``'s group
    (aiokafka's ``committed()`` returns the offset only)."""
    coordinator = kafka._coordinator
    if coordinator is None or not partitions:
        return {}
    fetched = await coordinator.fetch_committed_offsets([KafkaTopicPartition(*tp) for tp in partitions])
    return {TopicPartition(ktp.topic, ktp.partition): found.metadata
            for ktp, found in fetched.items() if found is not None and found.offset >= 0 and found.metadata}


def kafka_offsets(offsets: Mapping[TopicPartition, int], metadata: Optional[Mapping[TopicPartition, str]]
                  ) -> Dict[KafkaTopicPartition, Any]:
    """aiokafka's commit argument: an offset, or (offset, metadata) where there is metadata."""
    notes = metadata or {}
    return {KafkaTopicPartition(*tp): (offset, notes[tp]) if notes.get(tp) else offset
            for tp, offset in offsets.items()}


def stop_soon(coro) -> None:
    """Run an aiokafka client's ``stop()`` from synchronous code on its loop (best effort;
    prefer ``aclose()``)."""
    import asyncio

    if coro is None:
        return
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        coro.close()
        return
    task = loop.create_task(coro)
    _pending_stops.add(task)
    task.add_done_callback(_pending_stops.discard)


_pending_stops: set = set()


def describe_partitions(partitions) -> str:
    """``topic[0], topic[1]`` for error messages."""
    return ", ".join(f"{tp.topic}[{tp.partition}]" for tp in sorted(partitions)) or "no partitions"
