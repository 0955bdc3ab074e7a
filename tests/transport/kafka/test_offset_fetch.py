"""Reading a group's committed offsets from OffsetFetch answers (streamkit/transport/kafka/
consumer.py): a coordinator that is loading the group answers OffsetFetch v2+ with a
group-level error and no partitions, which must never read as "nothing committed" (a task
would restart from the beginning of its input on top of its restored state). And a task
starting under exactly_once reads its offsets with require_stable (KIP-447): never the
offset a pending transaction is about to replace."""
from __future__ import annotations

import asyncio

import aiokafka.errors as errors
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as KafkaTopicPartition
from aiokafka.protocol.commit import OffsetFetchResponse_v2, OffsetFetchResponse_v3

from streamkit.errors import StreamkitError
from streamkit.transport.base import TopicPartition
from streamkit.transport.kafka.consumer import _committed_in, committed_metadata, committed_offsets

from tests.kafka.broker import KafkaTestBroker
from tests.kafka.topics import create_test_topic, kafka_transport

ASKED = [TopicPartition("app-repartition", 0), TopicPartition("app-repartition", 1)]


def test_committed_offsets_and_metadata_are_read() -> None:
    answer = OffsetFetchResponse_v3(0, [("app-repartition", [(0, 11353, "note", 0), (1, -1, "", 0)])], 0)
    assert _committed_in(answer, ASKED) == {ASKED[0]: (11353, "note")}


@pytest.mark.parametrize("code, error", [(14, errors.GroupLoadInProgressError),
                                         (16, errors.NotCoordinatorForGroupError)])
def test_a_group_level_error_is_raised_not_read_as_no_commit(code: int, error: type) -> None:
    answer = OffsetFetchResponse_v2([], code)  # what Kafka sends while its coordinator loads the group
    with pytest.raises(error):
        _committed_in(answer, ASKED)
    assert error.retriable


def test_an_answer_leaving_out_a_partition_is_retried() -> None:
    answer = OffsetFetchResponse_v2([("app-repartition", [(0, 7, "", 0)])], 0)
    with pytest.raises(errors.GroupLoadInProgressError, match=r"app-repartition\[1\]"):
        _committed_in(answer, ASKED)


def test_a_stable_read_waits_for_a_pending_transactional_offset_commit(transactional_kafka: KafkaTestBroker,
                                                                       unique_name) -> None:
    topic, group = unique_name("stable-in"), unique_name("stable-group")
    with kafka_transport(transactional_kafka) as transport:
        create_test_topic(transport.admin, topic, 1)
    asyncio.run(_pending_offsets(transactional_kafka, topic, group, unique_name("stable-txn")))


async def _pending_offsets(kafka: KafkaTestBroker, topic: str, group: str, transactional_id: str) -> None:
    tp, ktp = TopicPartition(topic, 0), KafkaTopicPartition(topic, 0)
    producer = AIOKafkaProducer(transactional_id=transactional_id, **kafka.client_config())
    reader = AIOKafkaConsumer(group_id=group, enable_auto_commit=False, **kafka.client_config())
    await producer.start()
    await reader.start()
    try:
        async with producer.transaction():
            await producer.send_offsets_to_transaction({ktp: (5, "five")}, group)
        await producer.begin_transaction()
        await producer.send_offsets_to_transaction({ktp: (9, "nine")}, group)
        # Pending: a plain read answers the offset the transaction is about to replace ...
        assert await committed_offsets(reader, [tp]) == {tp: 5}
        # ... a stable one refuses to (here within 2 s, while the transaction stays open).
        with pytest.raises(StreamkitError, match=r"stable-in.*\[0\].*stayed pending"):
            await committed_offsets(reader, [tp], stable_within=2.0)
        waiting = asyncio.ensure_future(committed_metadata(reader, [tp], stable_within=60.0))
        await producer.commit_transaction()
        assert await waiting == {tp: "nine"}
        assert await committed_offsets(reader, [tp], stable_within=60.0) == {tp: 9}
    finally:
        await reader.stop()
        await producer.stop()
