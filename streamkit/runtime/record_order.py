"""In which order a worker runs the records of one fetch round, and sends their output.

Each partition's records run in offset order, always. Across partitions, runs are
interleaved by record timestamp: the partition whose next record is earliest goes
next, for as long as its records stay within ``TOLERANCE_MS`` of the earliest next
record of the others. Without this, a worker would run one partition's whole batch
(minutes of event time) before the next partition's, and a downstream task reading
their repartitioned output would see event time jump back by that much: records
late for no reason other than the batching. For the same reason, what several
tasks wrote to one partition is sent interleaved by timestamp, not task by task.
"""
from __future__ import annotations

import heapq
from operator import itemgetter
from typing import Dict, Iterable, Iterator, List, Sequence, Tuple

from ..transport.base import FetchedBatch, OutgoingRecord, RawRecord

TOLERANCE_MS = 1_000
"""How far a run may go past the other partitions' earliest next record, in event time."""

Run = Tuple[str, int, Sequence[RawRecord]]
"""(topic, partition, records): consecutive records of one partition."""


def timestamp_ordered_runs(batches: Sequence[FetchedBatch], max_run: int) -> Iterator[Run]:
    """The records of ``batches`` as runs of at most ``max_run`` records."""
    by_partition: Dict[Tuple[str, int], List[RawRecord]] = {}
    for batch in batches:
        if batch.records:
            records = by_partition.setdefault((batch.topic, batch.partition), [])
            records.extend(batch.records)
    if len(by_partition) == 1:
        ((topic, partition), records), = by_partition.items()
        for start in range(0, len(records), max_run):
            yield topic, partition, records[start:start + max_run]
        return
    heap = [(records[0][1], index, 0) for index, records in enumerate(by_partition.values())]
    heapq.heapify(heap)
    keys = list(by_partition)
    lists = list(by_partition.values())
    while heap:
        _ts, index, start = heapq.heappop(heap)
        records = lists[index]
        limit = (heap[0][0] if heap else float("inf")) + TOLERANCE_MS
        end, stop = start + 1, min(len(records), start + max_run)
        while end < stop and records[end][1] <= limit:
            end += 1
        topic, partition = keys[index]
        yield topic, partition, records[start:end]
        if end < len(records):
            heapq.heappush(heap, (records[end][1], index, end))


Output = Tuple[str, int, List[OutgoingRecord]]
_TIMESTAMP = itemgetter(2)


def merge_by_timestamp(outputs: Iterable[Sequence[Output]]) -> List[Output]:
    """One batch per (topic, partition) from several tasks' batches: where more than one
    task wrote to a partition, their records are interleaved by timestamp (each task's
    own records keep their order)."""
    by_partition: Dict[Tuple[str, int], List[List[OutgoingRecord]]] = {}
    for batches in outputs:
        for topic, partition, records in batches:
            by_partition.setdefault((topic, partition), []).append(records)
    return [(topic, partition, lists[0] if len(lists) == 1 else list(heapq.merge(*lists, key=_TIMESTAMP)))
            for (topic, partition), lists in by_partition.items()]
