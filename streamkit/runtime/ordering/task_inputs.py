"""Fetched records of one task that are not yet processed, released in a fixed order.

Every input partition has an *order key* per record: for a source topic, the
record's timestamp, the partition read in offset order; for a repartition topic,
the stream time of the task that wrote it, the partition's writers merged by
:class:`~.writer_merge.WriterMerge`. A task takes next the record whose key is
smallest across its partitions (ties: the partition listed first), as Kafka
Streams does by timestamp. That is a deterministic merge as long as it only picks
when every partition has a record to offer; a partition with nothing buffered is
waited for:

- a source partition while the broker reports unread records there (lag);
- a repartition partition while a writer may still send (see :meth:`WriterMerge.busy`);
- otherwise (caught up: records not produced yet) for up to ``max_task_idle``,
  as Kafka Streams' ``max.task.idle.ms``. Only this wait depends on timing.

With ``limit``, the worker's pacing (see :mod:`.pacing`) holds back source records
whose running maximum timestamp is past what all of its source partitions reached.
"""
from __future__ import annotations

import heapq
import logging
from operator import itemgetter
from typing import Callable, Dict, FrozenSet, List, Mapping, Optional, Sequence, Tuple

from ...core.records import RawRecord, TopicPartition
from .writer_merge import WriterMerge

_timestamp_of = itemgetter(1)

log = logging.getLogger(__name__)

Run = Tuple[TopicPartition, List[RawRecord]]
HasLag = Callable[[TopicPartition], Optional[bool]]


class TaskInputs:
    """The pending records of one task's input partitions."""

    def __init__(self, partitions: Sequence[TopicPartition],
                 writers: Optional[Mapping[TopicPartition, FrozenSet[int]]] = None,
                 cursors: Optional[Mapping[TopicPartition, Mapping[int, int]]] = None) -> None:
        """``writers``: the writer ranks of each repartition partition among ``partitions``;
        ``cursors``: the per-writer offsets committed with them (processed already)."""
        self.partitions = tuple(partitions)
        self.processed: Dict[TopicPartition, Dict[int, int]] = {
            tp: dict((cursors or {}).get(tp, {})) for tp in (writers or {})}
        """Per repartition partition and writer: the last offset handed out for processing."""
        self.merges: Dict[TopicPartition, WriterMerge] = {
            tp: WriterMerge(ranks, skip=self.processed[tp]) for tp, ranks in (writers or {}).items()}
        """The repartition partitions' writer merges."""
        self._pending: Dict[TopicPartition, List[RawRecord]] = {tp: [] for tp in self.partitions}
        self._keys: Dict[TopicPartition, List[int]] = {tp: [] for tp in self.merges}
        """Order keys of a repartition partition's pending records (writer stream times)."""
        self._ranks: Dict[TopicPartition, List[int]] = {tp: [] for tp in self.merges}
        """Writer ranks of a repartition partition's pending records."""
        self._empty_since: Dict[TopicPartition, float] = {}
        self.reached: Dict[TopicPartition, int] = {}
        """Per source partition: the largest timestamp fetched so far."""
        self.sources_only = not self.merges

    def add(self, tp: TopicPartition, records: Sequence[RawRecord], now: float) -> None:
        if not records:
            return
        merge = self.merges.get(tp)
        if merge is not None:
            merge.add(records, now)  # type: ignore[arg-type]
            return
        self._pending[tp].extend(records)
        self._empty_since.pop(tp, None)
        top = max(map(_timestamp_of, records))
        if top > self.reached.get(tp, -1):
            self.reached[tp] = top

    def next_offset(self, tp: TopicPartition) -> int:
        """The offset after the last record fetched of source partition ``tp`` (buffered)."""
        return self._pending[tp][-1][0] + 1

    def pending(self, tp: Optional[TopicPartition] = None) -> int:
        """Records fetched and not processed yet (of ``tp``, or of every partition)."""
        if tp is not None:
            merge = self.merges.get(tp)
            return len(self._pending[tp]) + (merge.held if merge is not None else 0)
        return sum(len(records) for records in self._pending.values()) + \
            sum(merge.held for merge in self.merges.values())

    def clear(self) -> None:
        """Forget what was fetched and not processed: it is read again from
        :meth:`merge_positions` (repartition partitions) and the task's positions."""
        positions = self.merge_positions()
        for records in self._pending.values():
            records.clear()
        for tp, merge in self.merges.items():
            self._keys[tp].clear()
            self._ranks[tp].clear()
            merge.clear(positions.get(tp))
        self._empty_since.clear()

    def idle(self, now: float, max_idle: float, has_lag: HasLag) -> bool:
        """Nothing to process and nothing coming that is known of: every partition is
        caught up and every writer of a repartition partition said it is idle."""
        if any(self._pending.values()):
            return False
        for tp in self.partitions:
            merge = self.merges.get(tp)
            if merge is not None:
                if not merge.idle_writers():
                    return False
            elif has_lag(tp) is not False:
                return False
        return True

    def release(self, now: float, max_idle: float, has_lag: HasLag, limit: Optional[int] = None) -> List[Run]:
        """The records that may run now, as runs of one partition each, in processing order."""
        pending, keys = self._pending, self._keys
        for tp, merge in self.merges.items():
            if merge.held:
                records, order, ranks = merge.release(now, max_idle)
                if records:
                    pending[tp].extend(records)
                    keys[tp].extend(order)
                    self._ranks[tp].extend(ranks)
                    self._empty_since.pop(tp, None)
        if len(self.partitions) == 1:
            tp = self.partitions[0]
            records = pending[tp]
            if not records:
                return []
            if limit is not None:
                end = _prefix_within(records, limit)
                if end < len(records):
                    pending[tp] = records[end:]
                    return [(tp, records[:end])] if end else []
            pending[tp] = []
            if tp in keys:
                self._hand_out(tp, records, len(records))
            return [(tp, records)]
        if not any(pending.values()):
            return []

        def waits_for(tp: TopicPartition) -> bool:
            merge = self.merges.get(tp)
            if merge is not None:
                if merge.busy(now, max_idle):
                    return True
            elif has_lag(tp):
                return True
            since = self._empty_since.setdefault(tp, now)
            return now - since < max_idle

        if any(not pending[tp] and waits_for(tp) for tp in self.partitions):
            return []

        def key(tp: TopicPartition, index: int) -> int:
            order = keys.get(tp)
            return order[index] if order is not None else pending[tp][index][1]

        heads = [(key(tp, 0), index, 0) for index, tp in enumerate(self.partitions) if pending[tp]]
        heapq.heapify(heads)
        runs: List[Run] = []
        taken = {tp: 0 for tp in self.partitions}
        running: Dict[TopicPartition, int] = {}
        while heads:
            head_key, index, start = heads[0]
            tp = self.partitions[index]
            if limit is not None and tp not in keys and max(running.get(tp, -1), head_key) > limit:
                break
            heapq.heappop(heads)
            records = pending[tp]
            bound = heads[0][0] if heads else None
            end = start + 1
            if bound is None:
                end = len(records)
            else:
                while end < len(records) and key(tp, end) < bound:
                    end += 1
            if limit is not None and tp not in keys:
                end = start + _prefix_within(records[start:end], limit)
                if end == start:
                    break
            runs.append((tp, records[start:end]))
            running[tp] = max(running.get(tp, -1), max(r[1] for r in records[start:end]))
            taken[tp] = end
            if end < len(records):
                heapq.heappush(heads, (key(tp, end), index, end))
            elif waits_for(tp):
                break  # this input ran dry: wait for it before going past its last key
        for tp, count in taken.items():
            if count:
                if tp in keys:
                    self._hand_out(tp, pending[tp], count)
                del pending[tp][:count]
        return runs

    def put_back(self, tp: TopicPartition, records: List[RawRecord]) -> None:
        """Return released, unprocessed records of source partition ``tp`` to the front of
        its pending records (they run first next time)."""
        if tp in self._keys:
            raise ValueError(f"{tp.topic}[{tp.partition}] is merged by writer: its records cannot be put back")
        self._pending[tp][:0] = records

    def _hand_out(self, tp: TopicPartition, records: List[RawRecord], count: int) -> None:
        """The first ``count`` pending records of repartition partition ``tp`` go to the task:
        remember each writer's last offset among them."""
        processed, ranks = self.processed[tp], self._ranks[tp]
        for index in range(count):
            processed[ranks[index]] = records[index][0]
        del ranks[:count]
        del self._keys[tp][:count]

    # -- commit ---------------------------------------------------------------------
    def merge_positions(self) -> Dict[TopicPartition, int]:
        """Where each repartition partition resumes: its first record not handed out yet
        (held in the merge, or released and waiting), else past the last fetched."""
        out = {}
        for tp, merge in self.merges.items():
            position = merge.position()
            waiting = self._pending[tp]
            if waiting:
                first = min(record[0] for record in waiting)
                if position is None or first < position:
                    position = first
            if position is not None:
                out[tp] = position
        return out

    def cursors(self, positions: Mapping[TopicPartition, int]) -> Dict[TopicPartition, Dict[int, int]]:
        """Per repartition partition, the writers' last processed offsets at or past the
        position it resumes from (what a restart from there must skip)."""
        out = {}
        for tp, processed in self.processed.items():
            position = positions.get(tp)
            if position is None:
                continue
            for rank in [rank for rank, offset in processed.items() if offset < position]:
                del processed[rank]  # a restart from the position never reads it again
            out[tp] = dict(processed)
        return out


def _prefix_within(records: Sequence[RawRecord], limit: int) -> int:
    """How many leading records have a running maximum timestamp at most ``limit``."""
    for index, record in enumerate(records):
        if record[1] > limit:
            return index
    return len(records)
