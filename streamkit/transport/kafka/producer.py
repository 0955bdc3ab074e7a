"""Producing to Kafka in batches; transactional when given a transactional id."""
from __future__ import annotations

import asyncio
import logging
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from aiokafka import AIOKafkaProducer
from aiokafka.errors import (InvalidProducerEpoch, KafkaError, ProducerFenced, UnknownError,
                             UnknownTopicOrPartitionError)

from ...errors import StreamkitError, TaskMigratedError
from ..base import OutgoingRecord, Producer, TopicPartition
from .config import KafkaClientConfig
from .connect import quietly, start_with_retry
from .no_auto_create import no_topic_auto_creation
from .consumer import kafka_offsets, stop_soon

log = logging.getLogger(__name__)

_FENCED = (ProducerFenced, InvalidProducerEpoch)
_NO_HEADERS: list = []  # aiokafka's batch builder wants a list; never mutated


class KafkaProducer(Producer):
    """Sends each (topic, partition, records) batch as Kafka record batches (no per-record
    coroutine), and returns the offset after each partition's last record."""

    def __init__(self, config: KafkaClientConfig, transactional_id: Optional[str] = None) -> None:
        kwargs = config.producer_kwargs()
        kwargs["acks"] = "all"
        if transactional_id is not None:
            kwargs["transactional_id"] = transactional_id
            kwargs["enable_idempotence"] = True
        self._kafka = no_topic_auto_creation(AIOKafkaProducer(**kwargs))
        self._servers = ",".join(config.bootstrap_servers)
        self._connect_timeout = config.connect_timeout_s
        self.transactional_id = transactional_id
        self._started = False
        self._in_transaction = False
        self._pending: List[Tuple[str, int, int, asyncio.Future]] = []
        """Batches handed to aiokafka whose acks are not awaited yet."""

    async def start(self) -> None:
        """Connect; with a transactional id, fence older producers of that id (InitProducerId)
        and abort whatever transaction they left open."""
        if self._started:
            return
        try:
            await start_with_retry(self._kafka.start, self._servers, self._connect_timeout,
                                   f"producer {self.transactional_id or ''}".rstrip())
        except UnknownError as exc:
            if self.transactional_id is None:
                raise
            await quietly(self._kafka.stop())
            raise StreamkitError(
                f"Kafka at {self._servers} refused a transactional producer ({self.transactional_id}): "
                f"{exc}; exactly_once needs a broker with transactions (Apache Kafka 2.5+)") from None
        self._started = True

    async def send(self, batches: Sequence[Tuple[str, int, Sequence[OutgoingRecord]]]) -> Dict[TopicPartition, int]:
        """Hand the batches to aiokafka without waiting for the broker's acks (they are awaited
        in :meth:`delivered`, before the commit): the worker goes on processing meanwhile."""
        await self.start()
        if self.transactional_id is not None and not self._in_transaction:
            raise RuntimeError("transactional producer: call begin_transaction() before send()")
        kafka = self._kafka
        pending = self._pending
        try:
            for topic, partition, records in batches:
                builder = kafka.create_batch()
                for key, value, timestamp, headers in records:
                    if builder.append(key=key, value=value, timestamp=timestamp,
                                      headers=list(headers) if headers else _NO_HEADERS) is None:
                        pending.append((topic, partition, builder.record_count(),
                                        await kafka.send_batch(builder, topic, partition=partition)))
                        builder = kafka.create_batch()
                        builder.append(key=key, value=value, timestamp=timestamp,
                                       headers=list(headers) if headers else _NO_HEADERS)
                if builder.record_count():
                    pending.append((topic, partition, builder.record_count(),
                                    await kafka.send_batch(builder, topic, partition=partition)))
        except KafkaError as exc:
            raise self._failure(exc, batches) from None
        return {}

    async def delivered(self) -> Dict[TopicPartition, int]:
        pending, self._pending = self._pending, []
        ends: Dict[TopicPartition, int] = {}
        try:
            for topic, partition, count, future in pending:
                metadata = await future
                ends[TopicPartition(topic, partition)] = metadata.offset + count
        except KafkaError as exc:
            for *_, future in pending:
                future.cancel()
            raise self._failure(exc, pending) from None
        return ends

    def _failure(self, exc: KafkaError, batches) -> Exception:
        if isinstance(exc, _FENCED):
            return self._fenced(exc)
        where = _where(batches)
        if isinstance(exc, UnknownTopicOrPartitionError):
            return StreamkitError(f"producing to {where} on {self._servers} failed: the topic does not exist "
                                  f"(deleted while the worker ran?): {exc}")
        return StreamkitError(f"producing to {where} on {self._servers} failed: {type(exc).__name__}: {exc}")

    async def flush(self) -> None:
        await self.delivered()
        if self._started:
            await self._kafka.flush()

    async def begin_transaction(self) -> None:
        if self.transactional_id is None:
            raise RuntimeError("this producer has no transactional id")
        await self.start()
        try:
            await self._kafka.begin_transaction()
        except KafkaError as exc:
            raise self._transaction_failure("beginning", exc) from None
        self._in_transaction = True

    async def commit_transaction(self, group: str, offsets: Mapping[TopicPartition, int],
                                 metadata: Optional[Mapping[TopicPartition, str]] = None) -> None:
        await self.delivered()
        try:
            if offsets:
                await self._kafka.send_offsets_to_transaction(kafka_offsets(offsets, metadata), group)
            await self._kafka.commit_transaction()
        except KafkaError as exc:
            raise self._transaction_failure(f"committing (offsets for group {group})", exc) from None
        finally:
            self._in_transaction = False

    async def abort_transaction(self) -> None:
        for *_, future in self._pending:
            future.cancel()
        self._pending = []
        if self._in_transaction:
            self._in_transaction = False
            try:
                await self._kafka.abort_transaction()
            except _FENCED:
                pass  # a newer producer of this id already aborted it

    def _transaction_failure(self, step: str, exc: KafkaError) -> Exception:
        if isinstance(exc, _FENCED):
            return self._fenced(exc)
        return StreamkitError(f"{step} a transaction of producer {self.transactional_id} on {self._servers} "
                              f"failed: {type(exc).__name__}: {exc}")

    def _fenced(self, exc: BaseException) -> TaskMigratedError:
        return TaskMigratedError(f"producer {self.transactional_id} was fenced by a newer one with the same "
                                 f"transactional id: its task moved to another worker ({type(exc).__name__})")

    async def aclose(self) -> None:
        if self._started:
            await self.abort_transaction()
        self._started = False
        await self._kafka.stop()  # also when never started: aiokafka warns about unclosed clients

    def close(self) -> None:
        stop_soon(self._kafka.stop())
        self._started = False


def _where(batches) -> str:
    partitions = sorted({(topic, partition) for topic, partition, *_ in batches})
    return ", ".join(f"{topic}[{partition}]" for topic, partition in partitions[:5]) + \
        (" ..." if len(partitions) > 5 else "")

