"""In which order a worker runs the records of one fetch round, and sends their output.

Each partition's records run in offset order, always. A task with several input
partitions orders their records by timestamp itself (see :mod:`task_inputs`); across
tasks, runs are interleaved by record timestamp: the task whose next record is
earliest goes next, for as long as its records stay within ``TOLERANCE_MS`` of the
earliest next record of the others. Without this, a worker would run one partition's whole batch
(minutes of event time) before the next partition's, and a downstream task reading
their repartitioned output would see event time jump back by that much: records
late for no reason other than the batching. For the same reason, what several
tasks wrote to one partition is sent interleaved by timestamp, not task by task.
"""
from __future__ import annotations

import heapq
from operator import itemgetter
from typing import Dict, Iterable, Iterator, List, Sequence, Tuple

from ...core.records import OutgoingRecord, RawRecord, TopicPartition

TOLERANCE_MS = 1_000
"""How far a run may go past the other partitions' earliest next record, in event time."""

Lane = Sequence[Tuple[TopicPartition, Sequence[RawRecord]]]
"""One task's released records: runs of one partition each, in the task's own order."""


def interleave_lanes(lanes: Sequence[Lane], max_run: int) -> Iterator[Tuple[TopicPartition, Sequence[RawRecord]]]:
    """Every lane's runs, each lane's order kept, lanes interleaved by timestamp: the lane
    whose next record is earliest goes next, for as long as its records stay within
    ``TOLERANCE_MS`` of the other lanes' earliest next record; runs are cut at ``max_run``."""
    lanes = [lane for lane in lanes if lane]
    if len(lanes) == 1 and len(lanes[0]) == 1:
        tp, records = lanes[0][0]
        for start in range(0, len(records), max_run):
            yield tp, records[start:start + max_run]
        return
    heap = [(lane[0][1][0][1], index, 0, 0) for index, lane in enumerate(lanes)]
    heapq.heapify(heap)
    while heap:
        _ts, index, segment, start = heapq.heappop(heap)
        lane = lanes[index]
        tp, records = lane[segment]
        limit = (heap[0][0] if heap else float("inf")) + TOLERANCE_MS
        end, stop = start + 1, min(len(records), start + max_run)
        while end < stop and records[end][1] <= limit:
            end += 1
        yield tp, records[start:end]
        if end < len(records):
            heapq.heappush(heap, (records[end][1], index, segment, end))
        elif segment + 1 < len(lane):
            heapq.heappush(heap, (lane[segment + 1][1][0][1], index, segment + 1, 0))


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
