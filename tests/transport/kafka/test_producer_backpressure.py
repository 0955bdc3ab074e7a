"""KafkaProducer.send hands batches to aiokafka in the background: the worker's loop does
not stall on a produce round trip, a partition's batches keep their order, and when the
broker takes nothing (here: the network to it is cut) send() stops returning after
MAX_HANDING_OVER batches aiokafka has not accepted, so output cannot pile up in memory."""
from __future__ import annotations

import asyncio

from streamkit.transport.base import TopicPartition
from streamkit.transport.kafka.producer import MAX_HANDING_OVER

from tests.kafka.topics import create_test_topic, kafka_transport


def test_send_waits_while_the_broker_takes_nothing_and_the_order_survives(kafka_behind_proxy, unique_name) -> None:
    broker, proxy = kafka_behind_proxy
    topic = unique_name("backpressure")
    with kafka_transport(broker, request_timeout_ms=30000) as transport:
        create_test_topic(transport.admin, topic, 1)
        asyncio.run(_scenario(transport, proxy, topic))
        values = asyncio.run(_read(transport, unique_name("reader"), topic, 1 + MAX_HANDING_OVER + 10))
    assert values == [b"warm"] + [f"{n}".encode() for n in range(MAX_HANDING_OVER + 10)]


async def _scenario(transport, proxy, topic: str) -> None:
    producer = transport.producer()
    await producer.send([(topic, 0, [(None, b"warm", 1, None)])])
    assert (await producer.delivered())  # connected, one batch acknowledged
    proxy.cut()
    sends = asyncio.ensure_future(_send_each(producer, topic, MAX_HANDING_OVER + 10))
    await asyncio.sleep(1.5)
    assert not sends.done(), "send() kept returning while the broker accepted nothing"
    proxy.restore()
    await asyncio.wait_for(sends, 60)
    ends = await asyncio.wait_for(producer.delivered(), 60)
    assert list(ends.values()) == [1 + MAX_HANDING_OVER + 10]
    await producer.aclose()


async def _send_each(producer, topic: str, count: int) -> None:
    for n in range(count):  # one batch per call, as a worker's rounds make them
        await producer.send([(topic, 0, [(None, f"{n}".encode(), 2 + n, None)])])


async def _read(transport, group: str, topic: str, count: int) -> list:
    consumer = transport.consumer(group, read_committed=False)
    consumer.assign([TopicPartition(topic, 0)], {TopicPartition(topic, 0): 0})
    values: list = []
    for _ in range(100):
        for batch in await consumer.fetch(0.5):
            values.extend(record[3] for record in batch.records)
        if len(values) >= count:
            break
    await consumer.aclose()
    return values
