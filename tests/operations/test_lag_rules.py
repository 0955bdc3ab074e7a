"""The lag rules of streamkit.operations.lag, one by one, on hand-made windows of samples."""
from __future__ import annotations

from typing import List, Optional, Sequence, Union

import pytest

from streamkit.core.records import TopicPartition
from streamkit.operations.lag import GroupSample, LagStatus, PartitionSample, evaluate_group

ORDERS = TopicPartition("orders", 0)
Members = Union[Optional[int], Sequence[Optional[int]]]


def window(committed: Sequence[int], ends: Sequence[int], members: Members = 0,
           tp: TopicPartition = ORDERS) -> List[GroupSample]:
    """One sample per second of one partition: its committed offsets and log ends, and the
    group's live members (one count for every sample, or one per sample)."""
    counts = list(members) if isinstance(members, (list, tuple)) else [members] * len(committed)
    return [GroupSample(float(t), {tp: PartitionSample(c, e, float(t))}, counts[t])
            for t, (c, e) in enumerate(zip(committed, ends))]


def status(committed: Sequence[int], ends: Sequence[int], members: Members = 0) -> LagStatus:
    return evaluate_group("billing", window(committed, ends, members), window=len(committed)).status


def test_severities_follow_burrows_order() -> None:
    assert [s.name for s in sorted(LagStatus)] == ["NOTFOUND", "OK", "WARN", "ERR", "STOP", "STALL", "REWIND"]


def test_a_caught_up_idle_group_is_ok() -> None:
    assert status([5, 5, 5], [5, 5, 5]) is LagStatus.OK


def test_no_lag_now_is_ok_whatever_came_before() -> None:
    # the offset stood still with lag, then the consumer caught up at the newest sample
    assert status([5, 5, 5, 12], [9, 10, 11, 12]) is LagStatus.OK


def test_zero_lag_at_any_sample_of_the_window_is_ok() -> None:
    # without the zero at the first sample this window would be STOP
    assert status([5, 5, 5, 5], [5, 8, 9, 10]) is LagStatus.OK
    assert status([5, 5, 5, 5], [8, 9, 10, 11]) is LagStatus.STOP


def test_a_standing_offset_with_lag_and_no_member_is_stop() -> None:
    assert status([5, 5, 5, 5, 5], [7, 8, 9, 10, 11], members=0) is LagStatus.STOP


def test_a_standing_offset_with_constant_lag_is_stop_too() -> None:
    assert status([5, 5, 5], [9, 9, 9], members=0) is LagStatus.STOP


def test_members_unknown_counts_as_no_member() -> None:
    assert status([5, 5, 5], [7, 8, 9], members=None) is LagStatus.STOP


def test_a_standing_offset_with_lag_while_the_group_has_members_is_stall() -> None:
    assert status([5, 5, 5, 5], [7, 8, 9, 10], members=1) is LagStatus.STALL


def test_one_sample_with_a_member_makes_a_standing_offset_stall() -> None:
    # a worker restarted in a loop, caught in the group by one sample only
    assert status([5, 5, 5, 5], [7, 8, 9, 10], members=[0, 0, 1, 0]) is LagStatus.STALL


def test_a_moving_offset_whose_lag_keeps_growing_is_warn() -> None:
    assert status([10, 12, 14, 16], [20, 23, 26, 29], members=1) is LagStatus.WARN  # lag 10, 11, 12, 13


def test_a_moving_offset_whose_lag_stays_the_same_is_warn() -> None:
    assert status([10, 15, 20], [20, 25, 30]) is LagStatus.WARN  # lag 10 at each sample


def test_lag_going_down_once_is_ok() -> None:
    assert status([10, 12, 20, 22], [20, 23, 26, 29]) is LagStatus.OK  # lag 10, 11, 6, 7


def test_an_offset_moving_backwards_is_rewind() -> None:
    assert status([50, 50, 10, 12], [60, 61, 62, 63], members=1) is LagStatus.REWIND


def test_a_rewind_counts_even_after_zero_lag() -> None:
    # caught up, then reset to the start of the log
    assert status([60, 60, 0, 5], [60, 60, 61, 62]) is LagStatus.REWIND


def test_a_rewind_that_got_back_to_its_offset_is_judged_by_the_other_rules() -> None:
    assert status([50, 10, 55, 60], [70, 71, 72, 73]) is LagStatus.OK  # lag 20, 61, 17, 13: going down
    assert status([50, 10, 50, 52], [60, 61, 110, 112]) is LagStatus.WARN  # lag 10, 51, 60, 60: never down


def test_a_rewind_older_than_the_window_is_forgotten() -> None:
    samples = window([50, 10, 12, 14, 16], [60, 61, 62, 63, 64])
    assert evaluate_group("billing", samples, window=5).status is LagStatus.REWIND
    assert evaluate_group("billing", samples, window=3).status is LagStatus.OK  # lag 50, 49, 48


def test_a_single_sample_is_ok_and_incomplete() -> None:
    result = evaluate_group("billing", window([5], [10]), window=5)
    assert (result.status, result.complete, result.samples) == (LagStatus.OK, False, 1)
    assert result.partitions[0].complete is False


def test_an_incomplete_window_is_judged_with_the_samples_it_has() -> None:
    result = evaluate_group("billing", window([5, 5, 5], [7, 8, 9]), window=5)
    assert (result.status, result.complete, result.samples, result.window) == (LagStatus.STOP, False, 3, 5)


def test_a_partition_first_committed_within_the_window_is_incomplete() -> None:
    old, new = TopicPartition("orders", 0), TopicPartition("orders", 1)
    samples = [GroupSample(float(t), {old: PartitionSample(t, t, float(t)),
                                      **({new: PartitionSample(0, 3, float(t))} if t >= 2 else {})}, 0)
               for t in range(4)]
    result = evaluate_group("billing", samples, window=4)
    assert [(p.partition, p.complete, p.status) for p in result.partitions] == [
        (0, True, LagStatus.OK), (1, False, LagStatus.STOP)]
    assert result.complete is False


def test_a_partition_missing_from_the_newest_sample_is_not_judged() -> None:
    gone = TopicPartition("deleted-topic", 0)
    samples = [GroupSample(float(t), {ORDERS: PartitionSample(t, t, float(t)),
                                      **({gone: PartitionSample(0, 9, float(t))} if t == 0 else {})}, 0)
               for t in range(3)]
    result = evaluate_group("billing", samples, window=3)
    assert [(p.topic, p.partition) for p in result.partitions] == [("orders", 0)]


def test_the_group_status_is_the_worst_partition_and_burrow_states_it_as_err() -> None:
    samples = []
    for t in range(3):
        samples.append(GroupSample(float(t), {
            TopicPartition("orders", 0): PartitionSample(10 + t, 10 + t, float(t)),  # OK
            TopicPartition("orders", 1): PartitionSample(10 + t, 20 + 2 * t, float(t)),  # WARN
            TopicPartition("orders", 2): PartitionSample(4, 9 + t, float(t)),  # STALL
        }, live_members=2))
    result = evaluate_group("billing", samples, window=3)
    assert [p.status for p in result.partitions] == [LagStatus.OK, LagStatus.WARN, LagStatus.STALL]
    assert (result.status, result.burrow_status, result.to_json()["status"]) == (
        LagStatus.STALL, LagStatus.ERR, "ERR")
    warn_only = [GroupSample(s.taken_at, {tp: r for tp, r in s.partitions.items() if tp.partition < 2}, 2)
                 for s in samples]
    assert evaluate_group("billing", warn_only, window=3).to_json()["status"] == "WARN"


def test_to_json_is_shaped_like_burrows_consumer_status() -> None:
    samples = [GroupSample(100.0 + t, {
        TopicPartition("orders", 0): PartitionSample(5, 8 + t, 100.0 + t),
        TopicPartition("orders", 1): PartitionSample(7 + t, 7 + t, 100.5 + t),
    }, live_members=0) for t in range(2)]
    stopped = {"topic": "orders", "partition": 0, "status": "STOP",
               "start": {"offset": 5, "lag": 3, "timestamp": 100_000},
               "end": {"offset": 5, "lag": 4, "timestamp": 101_000}, "current_lag": 4, "complete": True}
    assert evaluate_group("billing", samples, window=2).to_json() == {
        "group": "billing", "status": "ERR", "complete": True,
        "partitions": [stopped, {
            "topic": "orders", "partition": 1, "status": "OK",
            "start": {"offset": 7, "lag": 0, "timestamp": 100_500},
            "end": {"offset": 8, "lag": 0, "timestamp": 101_500}, "current_lag": 0, "complete": True}],
        "partition_count": 2, "maxlag": stopped, "totallag": 4}


def test_no_sample_is_notfound() -> None:
    result = evaluate_group("billing", [], window=3)
    assert result.status is LagStatus.NOTFOUND
    assert result.to_json() == {"group": "billing", "status": "NOTFOUND", "complete": False, "partitions": [],
                                "partition_count": 0, "maxlag": None, "totallag": 0}


def test_a_committed_offset_past_the_log_end_has_no_lag() -> None:
    assert PartitionSample(committed=12, end=10, taken_at=0.0).lag == 0


def test_a_window_holds_at_least_one_sample() -> None:
    with pytest.raises(ValueError, match="window must be at least 1"):
        evaluate_group("billing", window([1], [1]), window=0)
