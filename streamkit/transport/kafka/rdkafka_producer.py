"""A producer on librdkafka (confluent-kafka): ``kafka_client = "librdkafka"``.

Threads: ``send`` hands each record to librdkafka's queue (``produce()``, a C call that
does not block) on the caller's event loop; librdkafka's own threads batch, send and
retry (acks=all, one request in flight per broker: a partition's records stay in order;
not idempotent, as the aiokafka producer, see ``KafkaClientConfig.librdkafka_producer``). Delivery reports are served by ``poll(0)`` after each ``send`` and, in
:meth:`delivered`, by ``flush()`` on a helper thread, so the loop never blocks.

Semantics as the aiokafka producer's (:mod:`.producer`): ``send`` returns at once;
:meth:`delivered` waits for the broker's acks of everything sent and returns the offset
after each partition's last record; the first delivery error surfaces there, before the
worker commits input offsets. When librdkafka's queue is full (``BufferError``), ``send``
waits on the helper thread for deliveries to make room: the worker's backpressure.

Not transactional: exactly_once with librdkafka is refused with a ConfigError.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Dict, Optional, Sequence, Tuple

from ...errors import ConfigError, StreamkitError
from ..base import OutgoingRecord, Producer, TopicPartition
from .config import KafkaClientConfig
from .rdkafka_common import HelperThread, confluent_kafka, describe_error, with_logger

log = logging.getLogger(__name__)

FLUSH_SLICE_S = 1.0
"""A ``flush()`` call on the helper thread waits at most this long, then the loop checks in."""
ROOM_WAIT_S = 0.05
"""How long ``send`` lets deliveries make room in a full queue before trying again."""

EXACTLY_ONCE_UNSUPPORTED = (
    "exactly_once is not supported with kafka_client 'librdkafka' yet (its transactional producer is not "
    "implemented): use kafka_client 'aiokafka' (the default) for exactly_once, or processing_guarantee "
    "'at_least_once' with librdkafka")


class RdKafkaProducer(Producer):
    """Appends records through ``confluent_kafka.Producer``; the partition is always given
    (streamkit computes it with Kafka's murmur2 partitioner), never chosen by librdkafka."""

    def __init__(self, config: KafkaClientConfig, transactional_id: Optional[str] = None) -> None:
        if transactional_id is not None:
            raise ConfigError(EXACTLY_ONCE_UNSUPPORTED)
        ck = confluent_kafka()
        self._servers = ",".join(config.bootstrap_servers)
        self._kafka = ck.Producer(with_logger({**config.librdkafka_producer(), "on_delivery": self._on_delivery},
                                              "producer"))
        self._thread = HelperThread("rdkafka-producer")
        self._missing_topic_codes = (ck.KafkaError.UNKNOWN_TOPIC_OR_PART, ck.KafkaError._UNKNOWN_TOPIC,
                                     ck.KafkaError._UNKNOWN_PARTITION)
        self._ends: Dict[Tuple[str, int], int] = {}
        """Per partition, the offset after its last record acknowledged since the last delivered()."""
        self._error: Optional[Tuple[Any, str, int]] = None
        """The first delivery error since the last delivered(): (KafkaError, topic, partition)."""
        self._closed = False

    def _on_delivery(self, error: Any, message: Any) -> None:
        """librdkafka's delivery report (in the thread that polls); reports of one partition
        come in offset order."""
        if error is not None:
            if self._error is None:
                self._error = (error, message.topic(), message.partition())
            return
        self._ends[(message.topic(), message.partition())] = message.offset() + 1

    async def send(self, batches: Sequence[Tuple[str, int, Sequence[OutgoingRecord]]]) -> Dict[TopicPartition, int]:
        """Queue every record in librdkafka (in order per partition); acks are awaited by
        :meth:`delivered`. Returns {} (offsets come with the acks)."""
        if self._closed:
            raise StreamkitError("producer is closed")
        produce = self._kafka.produce
        for topic, partition, records in batches:
            for key, value, timestamp, headers in records:
                try:
                    if headers:
                        produce(topic, value, key, partition, timestamp=timestamp or 0, headers=list(headers))
                    else:
                        produce(topic, value, key, partition, timestamp=timestamp or 0)
                except BufferError:
                    await self._make_room()
                    produce(topic, value, key, partition, timestamp=timestamp or 0,
                            headers=list(headers) if headers else None)
        self._kafka.poll(0)  # serve delivery reports: the queue of reports stays short
        return {}

    async def _make_room(self) -> None:
        """Wait (off the loop) until librdkafka's queue has room again."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.wrap_future(self._thread.submit(self._kafka.poll, ROOM_WAIT_S), loop=loop)
            if self._error is not None or len(self._kafka) < self._queue_limit():
                return

    def _queue_limit(self) -> int:
        return 100_000  # librdkafka's queue.buffering.max.messages default, which we keep

    async def delivered(self) -> Dict[TopicPartition, int]:
        """Wait until the broker acknowledged (or refused) every record sent so far; the offset
        after each partition's last record. Raises the first delivery error."""
        loop = asyncio.get_running_loop()
        self._kafka.poll(0)
        while len(self._kafka):
            await asyncio.wrap_future(self._thread.submit(self._kafka.flush, FLUSH_SLICE_S), loop=loop)
        ends, self._ends = self._ends, {}
        if self._error is not None:
            error, topic, partition = self._error
            self._error = None
            if error.code() in self._missing_topic_codes:
                raise StreamkitError(f"producing to {topic}[{partition}] on {self._servers} failed: the topic does "
                                     f"not exist (deleted while the worker ran?): {describe_error(error)}")
            raise StreamkitError(f"producing to {topic}[{partition}] on {self._servers} failed: "
                                 f"{describe_error(error)}")
        return {TopicPartition(topic, partition): end for (topic, partition), end in ends.items()}

    async def flush(self) -> None:
        await self.delivered()

    async def aclose(self) -> None:
        """Deliver what is queued (bounded by librdkafka's message timeout), then close."""
        if self._closed:
            return
        try:
            await asyncio.wait_for(self.delivered(), timeout=10.0)
        except Exception as exc:  # noqa: BLE001 - closing; the error was reported where it mattered
            log.warning("closing the librdkafka producer: %s", exc)
        self.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._thread.shutdown()  # after the helper's call in flight, if any
        remaining = len(self._kafka)
        if remaining:
            self._kafka.purge()
            self._kafka.poll(0)
            log.warning("librdkafka producer closed with %d record(s) not acknowledged: dropped (they are "
                        "redone from the last commit)", remaining)
