"""A registry kept in a compacted topic of a broker: the registry's storage on a
transport, beside the server ``streamkit registry serve`` runs (:mod:`.server`).

It is the one part of the registry that needs a transport, so it stays out of what the
serdes import: a serde reaches it through the opener
:func:`streamkit.schemas.registry_resolution.use_broker_registry` installs (the
package installs :func:`registry_on_broker` when ``streamkit`` is imported).
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Awaitable, List, Optional, Sequence, Tuple, TypeVar

from ...core.records import TopicPartition
from ...transport.base import Consumer, Producer
from ...transport.factory import open_transport
from ..model import RegistryError
from .log import LogRecord, RegistryLog
from .service import SchemaRegistry

__all__ = ["BrokerLog", "SCHEMAS_TOPIC_CONFIG", "registry_on_broker"]

log = logging.getLogger(__name__)

SCHEMAS_TOPIC_CONFIG = {"cleanup.policy": "compact", "retention.ms": "-1"}
"""The ``_schemas`` topic's settings when the registry creates it (one partition)."""

T = TypeVar("T")


def registry_on_broker(broker_url: str, *, topic: str = "_schemas", **options) -> SchemaRegistry:
    """A registry in ``topic`` of the broker at ``broker_url`` (``embedded://DIR`` or
    ``kafka://HOST:PORT``); creates the topic if missing (1 partition, compacted).
    ``options`` are :class:`~.service.SchemaRegistry`'s."""
    return SchemaRegistry(BrokerLog(broker_url, topic), **options)


class BrokerLog(RegistryLog):
    """Partition 0 of ``topic`` on the broker at ``broker_url`` (``embedded://DIR`` or
    ``kafka://HOST:PORT``), created if missing (one partition, compacted, kept forever).

    The transport's consumer and producer are asynchronous: they live on a private
    event loop in a daemon thread, and every method here waits for its result.
    """

    def __init__(self, broker_url: str, topic: str = "_schemas", *, timeout: float = 30.0) -> None:
        self.topic = topic
        self._timeout = timeout
        self._tp = TopicPartition(topic, 0)
        self._transport = open_transport(broker_url)
        self.url = self._transport.url
        try:
            self._ensure_topic()
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=self._loop.run_forever, name=f"registry-log-{topic}",
                                            daemon=True)
            self._thread.start()
            self._consumer, self._producer = self._run(self._clients())
            self._consumer.assign([self._tp], {})
            self._position = 0
        except BaseException:
            self._transport.close()
            raise

    def _ensure_topic(self) -> None:
        admin = self._transport.admin
        meta = admin.topic(self.topic)
        if meta is None:
            meta = admin.create_topic(self.topic, 1, dict(SCHEMAS_TOPIC_CONFIG), exist_ok=True)
            log.info("created the registry topic %s on %s (1 partition, compacted)", self.topic, self.url)
        if meta.partitions != 1:
            raise RegistryError(f"the registry topic {self.topic} on {self.url} has {meta.partitions} "
                                f"partitions: it needs exactly 1 (the registry's order is its log order)")

    def __repr__(self) -> str:
        return f"BrokerLog({self.url!r}, topic={self.topic!r})"

    async def _clients(self) -> Tuple[Consumer, Producer]:
        """A consumer outside any group and a producer, made on the log's loop (aiokafka
        clients belong to the loop they are made on)."""
        reader = getattr(self._transport, "reader", None)
        consumer = reader() if reader is not None else self._transport.consumer(f"_registry-{self.topic}")
        return consumer, self._transport.producer()

    def _run(self, coro: Awaitable[T]) -> T:
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)  # type: ignore[arg-type]
        try:
            return future.result(self._timeout + 5)
        except TimeoutError:
            future.cancel()
            raise RegistryError(f"the broker at {self.url} did not answer within {self._timeout} s",
                                status=500, error_code=50002) from None

    def append(self, records: Sequence[Tuple[bytes, Optional[bytes]]]) -> None:
        now = int(time.time() * 1000)
        batch = [(key, value, now, None) for key, value in records]

        async def send() -> None:
            await self._producer.send([(self.topic, 0, batch)])
            await self._producer.flush()

        self._run(send())

    def end_offset(self) -> int:
        return self._transport.admin.partition_offsets(self.topic, 0).end

    @property
    def position(self) -> int:
        return self._position

    def read(self, max_wait: float) -> List[LogRecord]:
        batches = self._run(self._consumer.fetch(max_wait))
        out: List[LogRecord] = []
        for batch in batches:
            out.extend((offset, key or b"", value) for offset, _ts, key, value, _headers in batch.records)
        self._position = max(self._position, self._consumer.position(self._tp))
        if out:
            self._position = max(self._position, out[-1][0] + 1)
        return out

    def close(self) -> None:
        if self._loop.is_closed():
            return

        async def shut() -> None:
            await self._consumer.aclose()
            await self._producer.aclose()

        try:
            self._run(shut())
        except Exception:  # noqa: BLE001 - closing best-effort
            log.debug("closing the registry log's clients failed", exc_info=True)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
        self._transport.close()
