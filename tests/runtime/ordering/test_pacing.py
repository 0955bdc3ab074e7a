"""A worker's source partitions stay together in event time across fetch rounds, and a
partition far ahead is paused (streamkit.runtime.ordering.pacing)."""
from __future__ import annotations

from streamkit.runtime.ordering.pacing import AHEAD_MS, PAUSE_AT, RESUME_AT, Pauses, frontier
from streamkit.runtime.ordering.task_inputs import TaskInputs
from streamkit.transport.base import TopicPartition

DENSE, SPARSE = TopicPartition("views", 0), TopicPartition("views", 1)


def _records(first_offset: int, timestamps):
    return [(first_offset + i, ts, None, None, None) for i, ts in enumerate(timestamps)]


def test_records_past_the_slowest_partitions_reach_plus_the_allowance_wait_for_the_next_round() -> None:
    dense, sparse = TaskInputs([DENSE]), TaskInputs([SPARSE])
    step = AHEAD_MS // 10
    dense.add(DENSE, _records(0, range(0, 100 * step, step)), 0.0)          # one round covers 100 steps
    sparse.add(SPARSE, _records(0, range(0, 300 * step, 3 * step)), 0.0)    # one round covers 300 steps
    lag = {DENSE: True, SPARSE: True}
    limit = frontier([dense, sparse], lag.get)
    assert limit == 99 * step + AHEAD_MS
    assert len([r for _tp, rs in dense.release(0.0, 0.0, lag.get, limit) for r in rs]) == 100
    released = [r[1] for _tp, rs in sparse.release(0.0, 0.0, lag.get, limit) for r in rs]
    assert released == list(range(0, limit + 1, 3 * step))
    assert sparse.pending() == 100 - len(released)  # kept for the next round, not dropped
    # next round: the dense partition catches up
    dense.add(DENSE, _records(100, range(100 * step, 300 * step, step)), 0.0)
    lag[DENSE] = False  # and has nothing more: it no longer holds anyone back
    limit = frontier([dense, sparse], lag.get)
    assert limit == 297 * step + AHEAD_MS
    assert [r[1] for _tp, rs in sparse.release(0.0, 0.0, lag.get, limit) for r in rs] == \
        list(range(released[-1] + 3 * step, 300 * step, 3 * step))


def test_a_partition_without_records_or_lag_holds_nothing_back() -> None:
    done, busy = TaskInputs([DENSE]), TaskInputs([SPARSE])
    busy.add(SPARSE, _records(0, [5, 10]), 0.0)
    assert frontier([done, busy], {DENSE: False, SPARSE: False}.get) == 10 + AHEAD_MS


def test_an_unfetched_partition_with_lag_holds_everything_back() -> None:
    empty, other = TaskInputs([DENSE]), TaskInputs([SPARSE])
    other.add(SPARSE, _records(0, [5, 10]), 0.0)
    assert frontier([empty, other], {DENSE: True, SPARSE: False}.get) == -1


def test_a_partition_far_ahead_is_paused_then_resumed_where_it_stopped() -> None:
    ahead = TaskInputs([SPARSE])
    ahead.add(SPARSE, _records(0, range(PAUSE_AT + 1)), 0.0)
    pauses = Pauses()
    pause, resume = pauses.update([ahead])
    assert pause == {SPARSE: PAUSE_AT + 1} and resume == {}
    assert pauses.update([ahead]) == ({}, {})  # stays paused
    ahead.release(0.0, 0.0, lambda tp: True, limit=PAUSE_AT - RESUME_AT)
    pause, resume = pauses.update([ahead])
    assert pause == {} and resume == {SPARSE: PAUSE_AT + 1}
