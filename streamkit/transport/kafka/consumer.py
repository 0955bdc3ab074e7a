"""A consumer of explicitly assigned partitions (restore, standbys, the console consumer)."""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

import aiokafka.errors as aiokafka_errors
from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as KafkaTopicPartition
from aiokafka.errors import GroupCoordinatorNotAvailableError, KafkaError, NotCoordinatorForGroupError
from aiokafka.protocol.commit import OffsetFetchRequest

from ...errors import StreamkitError
from ..base import Consumer, FetchedBatch, TopicPartition
from .config import KafkaClientConfig
from .connect import authorization_error, start_with_retry
from .no_auto_create import no_topic_auto_creation
from .records import Lost, fetch_batches

log = logging.getLogger(__name__)


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
    return {tp: offset for tp, (offset, _metadata) in (await _fetch_committed(kafka, partitions)).items()}


async def committed_metadata(kafka: AIOKafkaConsumer, partitions: Sequence[TopicPartition]
                             ) -> Dict[TopicPartition, str]:
    """The metadata strings committed with the offsets of ``partitions`` for ``kafka``'s group
    (aiokafka's ``committed()`` returns the offset only)."""
    return {tp: metadata for tp, (_offset, metadata) in (await _fetch_committed(kafka, partitions)).items()
            if metadata}


#: How long a group's committed offsets are asked for again while its coordinator cannot answer.
OFFSET_FETCH_TIMEOUT = 60.0
#: Seconds between two OffsetFetch requests while the coordinator cannot answer.
OFFSET_FETCH_BACKOFF = 0.2


async def _fetch_committed(kafka: AIOKafkaConsumer, partitions: Sequence[TopicPartition]
                           ) -> Dict[TopicPartition, Tuple[int, str]]:
    """``(offset, metadata)`` committed for ``kafka``'s group, per partition of ``partitions``
    that has a commit.

    Not aiokafka's ``committed()``: it ignores the group-level error of an OffsetFetch v2+
    answer. A coordinator that is loading the group (a broker restarted, the coordinator
    moved) answers with that error and no partitions, which aiokafka takes for "nothing
    committed": a task would restart from the beginning of its input on top of its restored
    state and count every record again. Here such an answer, or one leaving out a partition
    asked for, is asked again (up to :data:`OFFSET_FETCH_TIMEOUT`)."""
    coordinator = kafka._coordinator
    group = getattr(kafka, "_group_id", None)
    if coordinator is None or group is None or not partitions:
        return {}
    by_topic: Dict[str, List[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    deadline = time.monotonic() + OFFSET_FETCH_TIMEOUT
    while True:
        await coordinator.ensure_coordinator_known()
        try:
            response = await coordinator._send_req(OffsetFetchRequest(group, list(by_topic.items())))
            return _committed_in(response, partitions)
        except KafkaError as exc:
            if isinstance(exc, (NotCoordinatorForGroupError, GroupCoordinatorNotAvailableError)):
                coordinator.coordinator_dead()
            if not exc.retriable:
                raise
            if time.monotonic() > deadline:
                raise StreamkitError(f"fetching the committed offsets of {describe_partitions(partitions)} for "
                                     f"group {group} failed for {OFFSET_FETCH_TIMEOUT:.0f} s: "
                                     f"{type(exc).__name__}: {exc}") from exc
            log.info("group %s: committed offsets not available yet (%s); asking again", group,
                     type(exc).__name__)
            await asyncio.sleep(OFFSET_FETCH_BACKOFF)


def _committed_in(response: Any, partitions: Sequence[TopicPartition]) -> Dict[TopicPartition, Tuple[int, str]]:
    """The commits an OffsetFetch answer holds; raises its group-level or partition error, or
    a retriable error when it leaves out a partition asked for."""
    group_error = aiokafka_errors.for_code(getattr(response, "error_code", 0))
    if group_error is not aiokafka_errors.NoError:
        raise group_error()
    found: Dict[TopicPartition, Tuple[int, str]] = {}
    answered = set()
    for topic, entries in response.topics:
        for partition, offset, metadata, code in entries:
            tp = TopicPartition(topic, partition)
            error = aiokafka_errors.for_code(code)
            if error is aiokafka_errors.UnknownTopicOrPartitionError:
                log.warning("OffsetFetch: %s[%d] is unknown to the group's coordinator", topic, partition)
            elif error is not aiokafka_errors.NoError:
                raise error()
            answered.add(tp)
            if offset >= 0:
                found[tp] = (offset, metadata or "")
    left_out = [tp for tp in partitions if tp not in answered]
    if left_out:
        raise aiokafka_errors.GroupLoadInProgressError(
            f"the coordinator's answer left out {describe_partitions(left_out)}")
    return found


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
