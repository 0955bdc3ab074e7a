"""Retention never loses data silently, on a real Kafka-protocol broker: DeleteRecords,
consumers that report offsets deleted before they read them, and clients that never
create topics by asking for their metadata.

Records here have timestamps from 1970 (1000 + i): every topic is created with
``retention.ms=-1`` (tests/kafka/topics.py), or a broker's time retention would delete
them mid-test. What the broker can do (DeleteRecords, offset-commit metadata) is probed
once per session with plain aiokafka clients (``kafka.supports``); a test skips only
where the probe says the broker lacks it."""
from __future__ import annotations

import asyncio
import logging
import time

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as KafkaTopicPartition
from aiokafka.errors import OffsetOutOfRangeError

from streamkit.errors import StreamkitError
from streamkit.transport.base import TopicPartition

from .topics import create_test_topic, kafka_transport


@pytest.fixture
def transport(kafka):
    with kafka_transport(kafka, request_timeout_ms=5000) as t:
        yield t


def produce(transport, topic, n, partition=0):
    async def go():
        producer = transport.producer()
        try:
            await producer.send([(topic, partition, [(b"k%d" % i, b"v%d" % i, 1000 + i, None)
                                                     for i in range(n)])])
            await producer.flush()
        finally:
            await producer.aclose()
    asyncio.run(go())


def read(consumer, want, timeout=15.0):
    async def go():
        out = []
        deadline = asyncio.get_running_loop().time() + timeout
        while len(out) < want and asyncio.get_running_loop().time() < deadline:
            for batch in await consumer.fetch(0.5):
                out.extend(r[0] for r in batch.records)
        return out
    return go


def test_delete_records_moves_the_start_or_warns_once(transport, kafka, unique_name, caplog):
    supported, why_not = kafka.supports("delete_records")
    topic = unique_name("purge")
    create_test_topic(transport.admin, topic, 1)
    produce(transport, topic, 10)
    tp = TopicPartition(topic, 0)
    with caplog.at_level(logging.WARNING, logger="streamkit.transport.kafka.admin"):
        transport.admin.delete_records({tp: 4})
        transport.admin.delete_records({tp: 6})
    warnings = [r for r in caplog.records if "DeleteRecords" in r.getMessage()]
    if not supported:
        assert transport.admin._cannot_delete_records is not None
        assert len(warnings) == 1, [r.getMessage() for r in warnings]  # once, then carry on
        assert transport.admin.partition_offsets(topic, 0).start == 0  # records kept
        pytest.skip(f"the deletion itself is not tested: broker without DeleteRecords: {why_not}")
    assert not warnings and transport.admin._cannot_delete_records is None
    assert transport.admin.partition_offsets(topic, 0).start == 6
    transport.admin.delete_records({tp: 2})  # never backwards; idempotent
    transport.admin.delete_records({tp: 6})
    assert transport.admin.partition_offsets(topic, 0).start == 6
    with pytest.raises(ValueError, match="past its partition's end"):
        transport.admin.delete_records({tp: 11})
    with pytest.raises(ValueError, match=">= 0"):
        transport.admin.delete_records({tp: -1})


def test_a_position_below_the_log_start_is_reported_as_lost(transport, kafka, unique_name):
    supported, why_not = kafka.supports("delete_records")
    if not supported:
        pytest.skip(f"no log start can move past a consumer's position: broker without DeleteRecords: {why_not}")
    topic = unique_name("gap")
    create_test_topic(transport.admin, topic, 1)
    produce(transport, topic, 10)
    tp = TopicPartition(topic, 0)
    transport.admin.delete_records({tp: 4})
    group = unique_name("g")

    async def go():
        consumer = transport.consumer(group)  # aiokafka clients belong to the loop they are made on
        try:
            consumer.assign([tp], {tp: 1})  # e.g. a committed offset below the start
            offsets = await read(consumer, 6)()
            return offsets, consumer.take_lost(), consumer.take_lost()
        finally:
            await consumer.aclose()
    offsets, lost, again = asyncio.run(go())
    assert offsets == list(range(4, 10))
    assert lost == [(tp, 1, 4)] and again == []


def test_an_offset_past_the_end_starts_over_with_a_warning_and_loses_nothing(
        transport, unique_name, caplog):
    """The fetch answer OFFSET_OUT_OF_RANGE for a position past the end (a re-created topic)
    is put into the real client as its fetcher records it (Tansu never sends that answer:
    it returns no records instead); the rest runs against the broker."""
    topic = unique_name("past")
    create_test_topic(transport.admin, topic, 1)
    produce(transport, topic, 5)
    tp, ktp = TopicPartition(topic, 0), KafkaTopicPartition(topic, 0)
    group = unique_name("g")

    async def go():
        consumer = transport.consumer(group)
        try:
            consumer.assign([tp], {tp: 3})
            first = await read(consumer, 2)()
            consumer._kafka._fetcher._set_error(ktp, OffsetOutOfRangeError({ktp: 50}))
            again = await read(consumer, 5)()
            return first, again, consumer.take_lost()
        finally:
            await consumer.aclose()
    with caplog.at_level(logging.WARNING, logger="streamkit.transport.kafka.records"):
        first, again, lost = asyncio.run(go())
    assert first == [3, 4]
    assert again == [0, 1, 2, 3, 4]  # from the start, as auto.offset.reset=earliest would
    assert lost == []
    assert any("offset 50" in r.getMessage() and "past the end" in r.getMessage() for r in caplog.records)


def test_consumers_start_from_the_beginning_or_their_position_without_auto_reset(transport, unique_name):
    topic = unique_name("plain")
    create_test_topic(transport.admin, topic, 2)
    produce(transport, topic, 4, partition=0)
    produce(transport, topic, 3, partition=1)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    group = unique_name("g")

    async def go():
        consumer = transport.consumer(group)
        try:
            consumer.assign([tp0, tp1], {tp1: 1})
            offsets = await read(consumer, 6)()
            return sorted(offsets), consumer.take_lost()
        finally:
            await consumer.aclose()
    assert asyncio.run(go()) == ([0, 1, 1, 2, 2, 3], [])


# ---------------------------------------------------------------- no topic auto-creation

def test_clients_never_create_topics_by_asking_for_them(transport, kafka, unique_name):
    missing = unique_name("missing")
    group = unique_name("g")

    async def go():
        consumer, producer = transport.consumer(group), transport.producer()
        try:
            consumer.assign([TopicPartition(missing, 0)], {})
            try:
                await asyncio.wait_for(consumer.fetch(1.0), 8)
            except (StreamkitError, asyncio.TimeoutError):
                pass
            with pytest.raises(StreamkitError, match="does not exist"):
                await producer.send([(missing, 0, [(b"k", b"v", 1, None)])])
                await producer.flush()
        finally:
            await consumer.aclose()
            await producer.aclose()
    asyncio.run(go())

    # The control: a plain aiokafka client asking for another missing topic makes the broker
    # create it. Kafka creates such a topic asynchronously (the controller commits it a moment
    # after the metadata answer), so wait for the control to appear; by then the topic
    # streamkit's clients asked for has had longer to appear, had they asked for creation.
    control = unique_name("control")

    async def plain():
        reader = AIOKafkaConsumer(**kafka.client_config())
        await reader.start()
        try:
            await reader._client._metadata_update(reader._client.cluster, [control])
        finally:
            await reader.stop()
    asyncio.run(plain())
    deadline = time.monotonic() + 15
    while transport.admin.topic(control) is None and time.monotonic() < deadline:
        time.sleep(0.2)
    created = transport.admin.topic(control) is not None
    assert transport.admin.topic(missing) is None
    assert missing not in {t.name for t in transport.admin.list_topics()}
    if not created:
        if kafka.kind != "external":
            pytest.fail("the suite's Apache Kafka (auto.create.topics.enable=true) did not create a topic "
                        "a plain client asked for: the control of this test is broken")
        pytest.skip("this broker does not auto-create topics named in metadata requests: only the "
                    "client setting was tested")


def test_offset_metadata_round_trips_through_the_group(kafka, transport, unique_name) -> None:
    """What a task commits with each offset (its stream time, a repartition reader's
    per-writer cursor) comes back from the broker, and a commit without it clears it."""
    topic, group = unique_name("meta"), unique_name("meta-group")
    create_test_topic(transport.admin, topic, 2)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)

    async def go():
        consumer = transport.consumer(group)
        try:
            consumer.assign([tp0, tp1], {})
            await consumer.commit({tp0: 5, tp1: 7}, {tp0: "sk1 t=1234 16777216:9"})
            first = await consumer.committed_metadata([tp0, tp1])
            await consumer.commit({tp0: 6})
            second = await consumer.committed_metadata([tp0, tp1])
            offsets = await consumer.committed([tp0, tp1])
        finally:
            await consumer.aclose()
        return first, second, offsets
    first, second, offsets = asyncio.run(go())
    assert offsets == {tp0: 6, tp1: 7}
    stored, why_not = kafka.supports("offset_metadata")
    if not stored:
        assert first == {} and second == {}  # nothing made up
        pytest.skip(f"metadata round trip not tested: {why_not}")
    assert first == {tp0: "sk1 t=1234 16777216:9"}
    assert second == {}
