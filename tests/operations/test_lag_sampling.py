"""Samples of a group read from a real embedded broker, and the sliding window over them."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from streamkit.broker import EmbeddedBroker
from streamkit.core.records import TopicPartition
from streamkit.operations.lag import LagStatus
from streamkit.operations.lag_sampling import LagMonitor, live_members, sample_group

ORDERS_0, ORDERS_1 = TopicPartition("orders", 0), TopicPartition("orders", 1)


def append(broker: EmbeddedBroker, tp: TopicPartition, count: int) -> None:
    broker.append(tp.topic, tp.partition, [(None, b'{"n": 1}', 1_000, None)] * count)


@pytest.fixture
def broker(tmp_path: Path):
    with EmbeddedBroker(tmp_path / "broker") as opened:
        opened.create_topic("orders", 2)
        yield opened


def test_a_sample_reads_committed_offsets_then_log_ends_then_members(broker: EmbeddedBroker) -> None:
    append(broker, ORDERS_0, 5)
    append(broker, ORDERS_1, 2)
    broker.commit_offsets("billing", {ORDERS_0: 3, ORDERS_1: 2})
    before = time.time()
    sample = sample_group(broker, "billing")
    assert {tp: (s.committed, s.end, s.lag) for tp, s in sample.partitions.items()} == {
        ORDERS_0: (3, 5, 2), ORDERS_1: (2, 2, 0)}
    assert before <= sample.taken_at <= min(s.taken_at for s in sample.partitions.values()) <= time.time()
    assert sample.live_members == 0


def test_live_members_are_the_group_members_holding_their_lock(broker: EmbeddedBroker) -> None:
    broker.commit_offsets("billing", {ORDERS_0: 0})
    member = broker.join_group("billing")
    assert live_members(broker, "billing") == 1
    member.leave()
    assert live_members(broker, "billing") == 0


def test_partitions_of_a_deleted_topic_are_left_out(broker: EmbeddedBroker) -> None:
    broker.create_topic("gone", 1)
    broker.commit_offsets("billing", {ORDERS_0: 0, TopicPartition("gone", 0): 0})
    broker.delete_topic("gone")
    assert list(sample_group(broker, "billing").partitions) == [ORDERS_0]


def test_the_monitor_slides_its_window_and_judges_it(broker: EmbeddedBroker) -> None:
    broker.commit_offsets("billing", {ORDERS_0: 0})
    monitor = LagMonitor(broker, "billing", window=2)
    monitor.sample()  # lag 0: it drops out of the window below
    first = monitor.evaluate()
    assert (first.status, first.complete) == (LagStatus.OK, False)
    for _ in range(2):
        append(broker, ORDERS_0, 3)
        monitor.sample()
    assert [s.partitions[ORDERS_0].lag for s in monitor.samples] == [3, 6]
    assert (monitor.evaluate().status, monitor.evaluate().complete) == (LagStatus.STOP, True)
    member = broker.join_group("billing")  # a consumer in the group whose offset does not move: stuck
    append(broker, ORDERS_0, 1)
    monitor.sample()
    member.leave()
    assert monitor.evaluate().status is LagStatus.STALL


def test_a_monitor_window_holds_at_least_one_sample(broker: EmbeddedBroker) -> None:
    with pytest.raises(ValueError, match="window must be a whole number of samples >= 1"):
        LagMonitor(broker, "billing", window=0)
