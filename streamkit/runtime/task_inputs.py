"""Fetched records of one task that are not yet processed, released in timestamp order.

A task with one input partition takes its records as fetched. A task with several
(a join's two streams, a stream beside a table) takes the record with the smallest
timestamp next, across its partitions, as Kafka Streams does; ties go to the
partition listed first. When a partition has nothing buffered, the task waits
for it, so that the order does not depend on how fetches happened to split the
input:

- while the broker reports unread records there (lag), for at most ``LAG_WAIT``;
- and, with ``max_task_idle`` set, for up to that long in any case (records not
  yet produced).

Once the wait is over, the other partitions' records go ahead.
"""
from __future__ import annotations

import heapq
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ..transport.base import RawRecord, TopicPartition

LAG_WAIT = 0.5
"""s a task waits at most for a partition the broker says has unread records."""

Run = Tuple[TopicPartition, List[RawRecord]]


class TaskInputs:
    """The pending records of one task's input partitions."""

    def __init__(self, partitions: Sequence[TopicPartition]) -> None:
        self.partitions = tuple(partitions)
        self._pending: Dict[TopicPartition, List[RawRecord]] = {tp: [] for tp in self.partitions}
        self._empty_since: Dict[TopicPartition, float] = {}

    def add(self, tp: TopicPartition, records: Sequence[RawRecord]) -> None:
        if records:
            self._pending[tp].extend(records)
            self._empty_since.pop(tp, None)

    def pending(self) -> int:
        return sum(len(records) for records in self._pending.values())

    def clear(self) -> None:
        for records in self._pending.values():
            records.clear()
        self._empty_since.clear()

    def release(self, now: float, max_idle: float, has_lag: Callable[[TopicPartition], Optional[bool]]) -> List[Run]:
        """The records that may run now, as runs of one partition each, in processing order."""
        pending = self._pending
        if len(self.partitions) == 1:
            tp = self.partitions[0]
            records = pending[tp]
            if not records:
                return []
            pending[tp] = []
            return [(tp, records)]
        if not any(pending.values()):
            return []

        def waits_for(tp: TopicPartition) -> bool:
            since = self._empty_since.setdefault(tp, now)
            idle = now - since
            if idle < max_idle:
                return True
            return idle < LAG_WAIT and bool(has_lag(tp))

        if any(not pending[tp] and waits_for(tp) for tp in self.partitions):
            return []
        heads = [(records[0][1], index, 0) for index, tp in enumerate(self.partitions)
                 if (records := pending[tp])]
        heapq.heapify(heads)
        runs: List[Run] = []
        taken = {tp: 0 for tp in self.partitions}
        while heads:
            _ts, index, start = heapq.heappop(heads)
            tp = self.partitions[index]
            records = pending[tp]
            limit = heads[0][0] if heads else None
            end = start + 1
            if limit is None:
                end = len(records)
            else:
                while end < len(records) and records[end][1] < limit:
                    end += 1
            runs.append((tp, records[start:end]))
            taken[tp] = end
            if end < len(records):
                heapq.heappush(heads, (records[end][1], index, end))
            elif waits_for(tp):
                break  # this input ran dry: wait for it before going past its last timestamp
        for tp, count in taken.items():
            if count:
                del pending[tp][:count]
        return runs
