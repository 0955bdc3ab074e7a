"""Fetching from aiokafka into the runtime's plain record tuples."""
from __future__ import annotations

import asyncio
import logging
from typing import List, Mapping, Optional, Sequence, Tuple

from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as KafkaTopicPartition
from aiokafka.errors import KafkaError, NoOffsetForPartitionError, OffsetOutOfRangeError

from ...errors import StreamkitError
from ..base import FetchedBatch, RawRecord, TopicPartition

log = logging.getLogger(__name__)

MAX_RECORDS_PER_FETCH = 10_000
REASSIGNMENT_WAIT = 0.2
"""Seconds beyond its own ``max_wait`` a fetch waits while the group reassigns partitions
(aiokafka would wait for the new assignment, however long the rebalance takes)."""

Lost = List[Tuple[TopicPartition, int, int]]


def to_raw_records(records: Sequence) -> List[RawRecord]:
    """aiokafka ConsumerRecords → ``(offset, timestamp, key, value, headers)`` tuples."""
    return [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers) if r.headers else None) for r in records]


async def fetch_batches(kafka: AIOKafkaConsumer, max_wait: float, what: str,
                        lost: Optional[Lost] = None) -> List[FetchedBatch]:
    """One ``getmany`` as FetchedBatches; a failure names ``what`` was being read.

    ``kafka`` runs with ``auto_offset_reset="none"``: a fetch position outside the log
    is handled here (see :func:`recover_out_of_range`), its lost range added to ``lost``;
    the records come with the next fetch.
    """
    try:
        # aiokafka's getmany waits for a group's new assignment without a timeout once a
        # rebalance is under way; the rebalance may be waiting for this very caller to commit
        # its revoked tasks (a deadlock until the revocation wait gives up). Bounded here: the
        # records it drains are returned before it awaits again, so cancelling loses none.
        data = await asyncio.wait_for(
            kafka.getmany(timeout_ms=int(max_wait * 1000), max_records=MAX_RECORDS_PER_FETCH),
            max_wait + REASSIGNMENT_WAIT)
    except asyncio.TimeoutError:
        return []  # a rebalance is under way: the caller's loop answers it first
    except OffsetOutOfRangeError as exc:
        await recover_out_of_range(kafka, _offsets_of(exc), lost if lost is not None else [], what)
        return []
    except NoOffsetForPartitionError as exc:
        await _start_at_beginning(kafka, exc)
        return []
    except KafkaError as exc:
        raise StreamkitError(f"{what} failed: {type(exc).__name__}: {exc}") from exc
    return [FetchedBatch(ktp.topic, ktp.partition, to_raw_records(records))
            for ktp, records in data.items() if records]


async def recover_out_of_range(kafka: AIOKafkaConsumer, offsets: Mapping[KafkaTopicPartition, int],
                               lost: Lost, what: str) -> None:
    """Go on from the log start of each partition whose fetch ``offsets`` were out of range.

    Below the start, the records in between were deleted before they were read: their
    range goes to ``lost``. Past the end (the topic was re-created, or offsets reset
    past it), nothing was deleted that we know of: a WARNING, and reading starts over
    from the start, as Kafka's ``auto.offset.reset=earliest`` would.
    """
    assigned = kafka.assignment()
    for ktp, offset in offsets.items():
        if ktp not in assigned:
            continue
        try:
            start = (await kafka.beginning_offsets([ktp]))[ktp]
            if offset >= start:
                end = (await kafka.end_offsets([ktp]))[ktp]
        except KafkaError as exc:
            raise StreamkitError(f"{what}: offset {offset} of {ktp.topic}[{ktp.partition}] is out of range "
                                 f"and its log start could not be read: {type(exc).__name__}: {exc}") from exc
        if offset < start:
            lost.append((TopicPartition(ktp.topic, ktp.partition), offset, start))
        else:
            log.warning("%s: offset %d of %s[%d] is past the end of the log (%d): reading it from its "
                        "start (%d); was the topic re-created?", what, offset, ktp.topic, ktp.partition,
                        end, start)
        kafka.seek(ktp, start)


def _offsets_of(exc: OffsetOutOfRangeError) -> Mapping[KafkaTopicPartition, int]:
    arg = exc.args[0] if exc.args else None
    if not isinstance(arg, Mapping):
        raise StreamkitError(f"offset out of range, but aiokafka did not say where: {exc!r}") from exc
    return arg


async def _start_at_beginning(kafka: AIOKafkaConsumer, exc: NoOffsetForPartitionError) -> None:
    """A group member's new partition without a committed offset, before the worker
    placed it: read it from the start (the worker's own seek, if any, wins)."""
    ktp = exc.args[0] if exc.args else None
    if not isinstance(ktp, KafkaTopicPartition) or ktp not in kafka.assignment():
        return
    state = kafka._subscription.subscription.assignment.state_value(ktp)
    if state is not None and not state.has_valid_position and not state.awaiting_reset:
        await kafka.seek_to_beginning(ktp)
