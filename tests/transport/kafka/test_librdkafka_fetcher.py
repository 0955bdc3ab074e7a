"""The librdkafka fetcher's assignment on a real broker: partitions of a topic the client
does not know yet are handed to librdkafka only once it knows their leaders (librdkafka
retries a log-start look-up for a partition without a known leader only after a fixed
500 ms: a worker's first records of that partition came about 1 s late), and assignment
changes made before that still take effect exactly."""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Dict, List

import pytest

pytest.importorskip("confluent_kafka", reason="the 'librdkafka' extra (confluent-kafka) is not installed: "
                    "pip install -e '.[librdkafka]'")

from streamkit.transport.base import TopicPartition  # noqa: E402
from streamkit.transport.kafka.rdkafka_fetcher import RdKafkaFetcher  # noqa: E402

from tests.kafka.topics import create_test_topic, kafka_transport  # noqa: E402

LIBRDKAFKA_LOG = "streamkit.transport.kafka.librdkafka.consumer"
NO_LEADER = "no current leader for partition"
"""What librdkafka's ``topic`` debug log says when it defers a log-start look-up by 500 ms."""
PER_PARTITION = 300


def _produce(transport, topic: str, partitions: int) -> None:
    async def run() -> None:
        producer = transport.producer()
        await producer.send([(topic, p, [(f"k{i}".encode(), f"v{p}-{i}".encode(), 1_700_000_000_000 + i, None)
                                         for i in range(PER_PARTITION)]) for p in range(partitions)])
        await producer.delivered()
        await producer.aclose()
    asyncio.run(run())


async def _read(fetcher: RdKafkaFetcher, until: Dict[int, int], timeout: float = 30.0) -> Dict[int, List[int]]:
    """Offsets fetched per partition until each partition in ``until`` reached its offset."""
    got: Dict[int, List[int]] = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(len(got.get(p, [])) < n for p, n in until.items()):
        for batch in await fetcher.fetch(0.2):
            got.setdefault(batch.partition, []).extend(offset for offset, *_ in batch.records)
    return got


def test_partitions_from_the_log_start_are_started_once_their_leaders_are_known(kafka, unique_name,
                                                                                 caplog) -> None:
    """Assigned one at a time from the log start, as the worker assigns its tasks, right after
    the client was created: every record is read, and librdkafka never had to defer a
    log-start look-up for want of a leader."""
    topic = unique_name("rd-fetch-start")
    caplog.set_level(logging.DEBUG, logger=LIBRDKAFKA_LOG)
    with kafka_transport(kafka, kafka_client="librdkafka") as transport:
        create_test_topic(transport.admin, topic, 3)
        _produce(transport, topic, 3)

        async def run() -> Dict[int, List[int]]:
            fetcher = RdKafkaFetcher(transport.config, unique_name("rd-fetch-group"), True, "test fetch",
                                     {"debug": "topic"})
            try:
                for p in range(3):
                    fetcher.assign([TopicPartition(topic, p)], {})
                got = await _read(fetcher, {p: PER_PARTITION for p in range(3)})
                await fetcher.fetch(0.1)  # serves librdkafka's last queued log lines
                return got
            finally:
                await fetcher.aclose()

        got = asyncio.run(run())
    assert got == {p: list(range(PER_PARTITION)) for p in range(3)}
    librdkafka_said = [r.getMessage() for r in caplog.records if r.name == LIBRDKAFKA_LOG]
    assert any(f"{topic} [" in line for line in librdkafka_said), "librdkafka's debug log did not reach Python"
    deferred = [line for line in librdkafka_said if NO_LEADER in line]
    assert not deferred, f"librdkafka deferred a log-start look-up: {deferred}"


def test_assignment_changes_before_the_topic_is_known_take_effect(kafka, unique_name) -> None:
    """A partition unassigned before its topic's leaders were known is never read; one
    assigned again at another position is read from there; until the first fetch its
    position is the one given and whether it has unread records is not known (True)."""
    topic = unique_name("rd-fetch-change")
    kept, dropped = TopicPartition(topic, 0), TopicPartition(topic, 1)
    with kafka_transport(kafka, kafka_client="librdkafka") as transport:
        create_test_topic(transport.admin, topic, 2)
        _produce(transport, topic, 2)

        async def run() -> tuple:
            fetcher = RdKafkaFetcher(transport.config, unique_name("rd-fetch-group"), True, "test fetch")
            try:
                fetcher.assign([kept, dropped], {})
                fetcher.unassign([dropped])
                fetcher.assign([kept], {kept: 5})
                before = fetcher.position(kept), fetcher.has_unread(kept), fetcher.has_unread(dropped)
                got = await _read(fetcher, {0: PER_PARTITION - 5})
                for _ in range(3):  # anything of the dropped partition would have come by now
                    for batch in await fetcher.fetch(0.2):
                        got.setdefault(batch.partition, []).extend(offset for offset, *_ in batch.records)
                return before, got, fetcher.position(kept), fetcher.has_unread(kept)
            finally:
                await fetcher.aclose()

        before, got, position, unread = asyncio.run(run())
    assert before == (5, True, None)
    assert got == {0: list(range(5, PER_PARTITION))}
    assert position == PER_PARTITION and unread is False
