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
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.commit import OffsetFetchRequest_v1, OffsetFetchRequest_v2, OffsetFetchRequest_v3
from aiokafka.protocol.types import (Boolean, CompactArray, CompactString, Int16, Int32, Int64, Schema,
                                     TaggedFields)

from ...errors import StreamkitError
from ..base import ChangelogChunk, Consumer, FetchedBatch, TopicPartition
from .changelog_fetch import ChangelogFetcher, OutOfRange
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
        self._stable_within = stable_offsets_wait(config) if read_committed else None
        self._started = False
        self._assigned: Set[TopicPartition] = set()
        self._seeks: Dict[TopicPartition, Optional[int]] = {}
        self._positions: Dict[TopicPartition, int] = {}
        self._assignment_changed = False
        self._changes = ChangelogFetcher(self._kafka, read_committed)

    def assign(self, partitions: Sequence[TopicPartition], positions: Mapping[TopicPartition, int]) -> None:
        for tp in partitions:
            self._assigned.add(tp)
            self._seeks[tp] = positions.get(tp)
            if tp in positions:
                self._positions[tp] = positions[tp]
        self._assignment_changed = True

    def unassign(self, partitions: Sequence[TopicPartition]) -> None:
        self._changes.forget(list(partitions))
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

    async def _start(self) -> None:
        if not self._started:
            await start_with_retry(self._kafka.start, self._servers, self._connect_timeout, "consumer",
                                   self._config)
            self._started = True

    async def _prepare(self) -> None:
        await self._start()
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

    async def fetch_changes(self, max_wait: float) -> List[ChangelogChunk]:
        """Restore's read, without per-record objects (see :mod:`.changelog_fetch`): Fetch
        requests of its own on this client; aiokafka's fetcher reads none of the assigned
        partitions meanwhile (a later :meth:`fetch` goes on from where this one stopped)."""
        if not self._assigned:
            return []
        await self._start()
        if self._kafka.assignment():
            self._kafka.unsubscribe()  # its background fetches would read the same records
            self._assignment_changed = True
        for tp, offset in self._seeks.items():
            if offset is None:
                ktp = KafkaTopicPartition(*tp)
                offset = (await self._kafka.beginning_offsets([ktp]))[ktp]
            self._positions[tp] = offset
        self._seeks.clear()
        for topic in {tp.topic for tp in self._assigned}:
            await self._kafka._client.add_topic(topic)  # metadata (its leader) kept up to date
        what = f"reading {describe_partitions(self._assigned)}"
        try:
            chunks, moved = await self._changes.fetch({tp: self._positions.get(tp, 0) for tp in self._assigned},
                                                      max_wait)
        except OutOfRange as exc:
            await self._out_of_range(exc.tp, exc.offset, what)
            return []
        except StreamkitError as exc:
            raise self._refused(exc.__cause__, f"{what} (READ)") or exc
        self._positions.update(moved)
        return chunks

    async def _out_of_range(self, tp: TopicPartition, offset: int, what: str) -> None:
        """Go on from the log start of ``tp``, as :func:`.records.recover_out_of_range` does."""
        ktp = KafkaTopicPartition(*tp)
        try:
            start = (await self._kafka.beginning_offsets([ktp]))[ktp]
        except KafkaError as exc:
            raise StreamkitError(f"{what}: offset {offset} of {tp.topic}[{tp.partition}] is out of range and its "
                                 f"log start could not be read: {type(exc).__name__}: {exc}") from exc
        if offset < start:
            self._lost.append((tp, offset, start))
        else:
            log.warning("%s: offset %d of %s[%d] is past the end of the log: reading it from its start (%d); "
                        "was the topic re-created?", what, offset, tp.topic, tp.partition, start)
        self._positions[tp] = start

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
        return await committed_offsets(self._kafka, partitions, stable_within=self._stable_within)

    async def committed_metadata(self, partitions: Sequence[TopicPartition]) -> Dict[TopicPartition, str]:
        if self._group is None:
            return {}
        return await committed_metadata(self._kafka, partitions, stable_within=self._stable_within)

    async def aclose(self) -> None:
        self._changes.close()
        self._assigned.clear()
        self._started = False
        await self._kafka.stop()  # also when never started: aiokafka warns about unclosed clients

    def close(self) -> None:
        self._changes.close()
        stop_soon(self._kafka.stop())
        self._started = False


async def committed_offsets(kafka: AIOKafkaConsumer, partitions: Sequence[TopicPartition], *,
                            stable_within: Optional[float] = None) -> Dict[TopicPartition, int]:
    """The committed offsets of ``partitions`` for ``kafka``'s group. With ``stable_within``,
    only once no transaction that commits offsets of them is pending (see
    :func:`_fetch_committed`)."""
    return {tp: offset for tp, (offset, _metadata)
            in (await _fetch_committed(kafka, partitions, stable_within)).items()}


async def committed_metadata(kafka: AIOKafkaConsumer, partitions: Sequence[TopicPartition], *,
                             stable_within: Optional[float] = None) -> Dict[TopicPartition, str]:
    """The metadata strings committed with the offsets of ``partitions`` for ``kafka``'s group
    (aiokafka's ``committed()`` returns the offset only); ``stable_within`` as for
    :func:`committed_offsets`."""
    return {tp: metadata for tp, (_offset, metadata)
            in (await _fetch_committed(kafka, partitions, stable_within)).items() if metadata}


#: How long a group's committed offsets are asked for again while its coordinator cannot answer.
OFFSET_FETCH_TIMEOUT = 60.0
#: Seconds between two OffsetFetch requests while the coordinator cannot answer.
OFFSET_FETCH_BACKOFF = 0.2
#: Seconds a pending transaction may outlive its timeout before its coordinator's abort is
#: written (the coordinator checks for expired transactions periodically).
TRANSACTION_ABORT_MARGIN = 30.0
#: Kafka's UNSTABLE_OFFSET_COMMIT: a transaction that commits offsets of the partition is
#: pending (answered only to an OffsetFetch with require_stable; aiokafka has no class for it).
UNSTABLE_OFFSET_COMMIT = 88


def stable_offsets_wait(config: KafkaClientConfig) -> float:
    """How long (s) a read of committed offsets waits for a pending transactional offset
    commit to end: its producer commits or aborts it, or its coordinator aborts it past
    ``transaction_timeout_ms``."""
    return config.transaction_timeout_ms / 1000 + TRANSACTION_ABORT_MARGIN


class UnstableOffsetCommitError(aiokafka_errors.BrokerResponseError):
    """A transaction that commits offsets of the partition is pending: asked again."""

    errno = UNSTABLE_OFFSET_COMMIT
    message = "UNSTABLE_OFFSET_COMMIT"
    retriable = True


async def _fetch_committed(kafka: AIOKafkaConsumer, partitions: Sequence[TopicPartition],
                           stable_within: Optional[float]) -> Dict[TopicPartition, Tuple[int, str]]:
    """``(offset, metadata)`` committed for ``kafka``'s group, per partition of ``partitions``
    that has a commit.

    Not aiokafka's ``committed()``: it ignores the group-level error of an OffsetFetch v2+
    answer. A coordinator that is loading the group (a broker restarted, the coordinator
    moved) answers with that error and no partitions, which aiokafka takes for "nothing
    committed": a task would restart from the beginning of its input on top of its restored
    state and count every record again. Here such an answer, or one leaving out a partition
    asked for, is asked again (up to :data:`OFFSET_FETCH_TIMEOUT`).

    With ``stable_within`` the request sets require_stable (KIP-447, OffsetFetch v7+): while
    a transaction that commits offsets of a partition is pending, the coordinator answers
    UNSTABLE_OFFSET_COMMIT instead of the offset the transaction is about to replace, and
    the request is asked again for up to ``stable_within`` seconds. A task starting under
    exactly_once reads its offsets that way: the previous owner's last commit may still be
    completing. (A broker older than OffsetFetch v7, Kafka 2.5, cannot tell.)"""
    coordinator = kafka._coordinator
    group = getattr(kafka, "_group_id", None)
    if coordinator is None or group is None or not partitions:
        return {}
    by_topic: Dict[str, List[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    request = StableOffsetFetchRequest(group, list(by_topic.items()), require_stable=stable_within is not None)
    started = time.monotonic()
    while True:
        await coordinator.ensure_coordinator_known()
        try:
            response = await coordinator._send_req(request)
            return _committed_in(response, partitions)
        except KafkaError as exc:
            if isinstance(exc, (NotCoordinatorForGroupError, GroupCoordinatorNotAvailableError)):
                coordinator.coordinator_dead()
            if not exc.retriable:
                raise
            unstable = isinstance(exc, UnstableOffsetCommitError)
            limit = stable_within if unstable and stable_within is not None else OFFSET_FETCH_TIMEOUT
            if time.monotonic() - started > limit:
                what = ("a transaction committing offsets of them stayed pending" if unstable
                        else "the coordinator did not answer")
                raise StreamkitError(f"fetching the committed offsets of {describe_partitions(partitions)} for "
                                     f"group {group} failed for {limit:.0f} s ({what}): "
                                     f"{type(exc).__name__}: {exc}") from exc
            if unstable:
                log.debug("group %s: a transaction committing offsets of %s is pending; asking again", group,
                          describe_partitions(partitions))
            else:
                log.info("group %s: committed offsets not available yet (%s); asking again", group,
                         type(exc).__name__)
            await asyncio.sleep(OFFSET_FETCH_BACKOFF)


def _committed_in(response: Any, partitions: Sequence[TopicPartition]) -> Dict[TopicPartition, Tuple[int, str]]:
    """The commits an OffsetFetch answer (v1-v3, or v7) holds; raises its group-level or
    partition error, or a retriable error when it leaves out a partition asked for."""
    _raise_for(getattr(response, "error_code", 0), None)
    found: Dict[TopicPartition, Tuple[int, str]] = {}
    answered = set()
    for topic, entries, *_tags in response.topics:
        for entry in entries:
            if len(entry) == 4:  # v1-v3
                partition, offset, metadata, code = entry
            else:  # v7: with the leader epoch and tagged fields
                partition, offset, _epoch, metadata, code, _tags = entry
            tp = TopicPartition(topic, partition)
            if code == aiokafka_errors.UnknownTopicOrPartitionError.errno:
                log.warning("OffsetFetch: %s[%d] is unknown to the group's coordinator", topic, partition)
            else:
                _raise_for(code, tp)
            answered.add(tp)
            if offset >= 0:
                found[tp] = (offset, metadata or "")
    left_out = [tp for tp in partitions if tp not in answered]
    if left_out:
        raise aiokafka_errors.GroupLoadInProgressError(
            f"the coordinator's answer left out {describe_partitions(left_out)}")
    return found


def _raise_for(code: int, tp: Optional[TopicPartition]) -> None:
    if code == UNSTABLE_OFFSET_COMMIT:
        raise UnstableOffsetCommitError(f"{tp.topic}[{tp.partition}]" if tp else "")
    error = aiokafka_errors.for_code(code)
    if error is not aiokafka_errors.NoError:
        raise error()


class _OffsetFetchResponse_v7(Response):
    API_KEY = 9
    API_VERSION = 7
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("topics", CompactArray(
            ("name", CompactString("utf-8")),
            ("partitions", CompactArray(
                ("partition_index", Int32),
                ("committed_offset", Int64),
                ("committed_leader_epoch", Int32),
                ("metadata", CompactString("utf-8")),
                ("error_code", Int16),
                ("tags", TaggedFields))),
            ("tags", TaggedFields))),
        ("error_code", Int16),
        ("tags", TaggedFields))


class _OffsetFetchRequest_v7(RequestStruct):
    FLEXIBLE_VERSION = True
    API_KEY = 9
    API_VERSION = 7
    RESPONSE_TYPE = _OffsetFetchResponse_v7
    SCHEMA = Schema(
        ("group_id", CompactString("utf-8")),
        ("topics", CompactArray(
            ("name", CompactString("utf-8")),
            ("partition_indexes", CompactArray(Int32)),
            ("tags", TaggedFields))),
        ("require_stable", Boolean),
        ("tags", TaggedFields))


class StableOffsetFetchRequest(Request[OffsetFetchRequest_v1 | OffsetFetchRequest_v2 | OffsetFetchRequest_v3
                                       | _OffsetFetchRequest_v7]):
    """OffsetFetch for the partitions of some topics; v7 where the broker has it (aiokafka
    stops at v3), to set ``require_stable``."""

    API_KEY = 9

    def __init__(self, group: str, partitions: List[Tuple[str, List[int]]], *, require_stable: bool) -> None:
        self._group = group
        self._partitions = partitions
        self._require_stable = require_stable

    def build(self, request_struct_class):  # type: ignore[override]
        if request_struct_class is _OffsetFetchRequest_v7:
            return _OffsetFetchRequest_v7(self._group, [(topic, indexes, {}) for topic, indexes in self._partitions],
                                          self._require_stable, {})
        return request_struct_class(self._group, self._partitions)


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
