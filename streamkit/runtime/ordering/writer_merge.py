"""The records of one repartition partition, merged across their writers in a fixed order.

Several upstream tasks (writers) append to one partition of a repartition topic,
each at its own pace, so the partition's offset order says nothing but who was
faster. The reading task instead takes the records in the order of the key
``(writer stream time, writer rank, offset)`` (see :mod:`.repartition_stamps`). Each
writer's own records come in that order already; a record is released once no
writer can still send one with a smaller key:

- a writer with records waiting: its first waiting record's key is larger;
- a writer with none waiting: its announced stream time (from its last record or
  progress marker) is larger, or equal with a larger rank, since a writer's stream
  time never goes back;
- or the writer said it is idle (nothing left to read) at least ``max_task_idle``
  ago: the only case where timing can change the order, as in Kafka Streams.

A writer never heard from holds everything back: it may still send anything.
The result is the same sequence whatever the writers' pace and however fetches
split the partition. Because records are taken out of offset order, the position
to commit is the offset of the first record not processed yet, and the reading
task commits with it, per writer, the last offset it processed (a *cursor*, see
:class:`CommitNote`): after a restart from that position, the merge skips each
writer's records up to it instead of processing them twice.
"""
from __future__ import annotations

import heapq
from collections import deque
from typing import Deque, Dict, FrozenSet, List, Mapping, NamedTuple, Optional, Tuple

from ...core.names import parse_task_id
from ...core.records import RawRecord
from .repartition_stamps import RECORD_STAMP, WRITER_HEADER, read_stamp, writer_name, writer_rank

UNSTAMPED = -1
"""The writer rank given to records without a writer stamp (written before stamps
existed, or by another program): they are never waited for."""

_UNKNOWN = -(1 << 62)

Keyed = Tuple[int, RawRecord]
"""(writer stream time, record with its stamp removed)."""


class WriterMerge:
    """Merges one partition's writers; see the module docstring."""

    def __init__(self, writers: FrozenSet[int], skip: Optional[Mapping[int, int]] = None) -> None:
        self.writers = frozenset(writers)
        self._queues: Dict[int, Deque[Keyed]] = {rank: deque() for rank in self.writers}
        self._bound: Dict[int, int] = {}
        """Per writer: the stream time its next record will have at least."""
        self._idle_since: Dict[int, float] = {}
        """Writers whose last word was a marker saying they are idle, since when."""
        self._skip: Mapping[int, int] = skip if skip is not None else {}
        """Per writer: records up to this offset were processed already (read, not kept)."""
        self._fetched_to: Optional[int] = None
        self.held = 0

    # -- input ----------------------------------------------------------------------
    def add(self, records: List[RawRecord], now: float) -> None:
        """Take fetched records (markers included) in offset order."""
        queues, bound, skip, idle_since = self._queues, self._bound, self._skip, self._idle_since
        unpack = RECORD_STAMP.unpack
        last_rank: Optional[int] = None
        last_time, queue, added = _UNKNOWN, None, 0
        for record in records:
            headers = record[4]
            if headers and headers[-1][0] == WRITER_HEADER:  # the common case, inlined
                rank, stream_time = unpack(headers[-1][1])
                record = (record[0], record[1], record[2], record[3], headers[:-1] or None)
            else:
                stamp = read_stamp(record)
                if stamp is None:
                    rank, stream_time = UNSTAMPED, _UNKNOWN
                else:  # a progress marker
                    if last_rank is not None and last_time > bound.get(last_rank, _UNKNOWN):
                        bound[last_rank] = last_time
                    last_rank = None  # the next data record ends an idleness this may announce
                    rank, stream_time = stamp.rank, stamp.stream_time
                    if stream_time > bound.get(rank, _UNKNOWN):
                        bound[rank] = stream_time
                    if stamp.idle:
                        idle_since.setdefault(rank, now)
                    else:
                        idle_since.pop(rank, None)
                    continue
            if rank != last_rank:
                if last_rank is not None and last_time > bound.get(last_rank, _UNKNOWN):
                    bound[last_rank] = last_time
                idle_since.pop(rank, None)
                queue = queues.get(rank)
                if queue is None:
                    queue = queues[rank] = deque()
                last_rank = rank
            last_time = stream_time
            if record[0] <= skip.get(rank, -1):
                continue  # processed before the restart this run resumed from
            queue.append((stream_time, record))  # type: ignore[union-attr]
            added += 1
        if last_rank is not None and last_time > bound.get(last_rank, _UNKNOWN):
            bound[last_rank] = last_time
        self.held += added
        if records:
            self._fetched_to = records[-1][0] + 1

    # -- output ---------------------------------------------------------------------
    def release(self, now: float, max_idle: float) -> Tuple[List[RawRecord], List[int], List[int]]:
        """The records that may go now, in merge order, with their writer stream times
        and writer ranks."""
        if not self.held:
            return [], [], []
        queues = self._queues
        heads = [(queue[0][0], rank) for rank, queue in queues.items() if queue]
        floor = self._floor(now, max_idle)
        heapq.heapify(heads)
        out: List[RawRecord] = []
        keys: List[int] = []
        ranks: List[int] = []
        while heads:
            head = heads[0]
            if floor is not None and not head < floor:
                break
            stream_time, rank = head
            queue = queues[rank]
            _st, record = queue.popleft()
            out.append(record)
            keys.append(stream_time)
            ranks.append(rank)
            if queue:
                heapq.heapreplace(heads, (queue[0][0], rank))
            else:
                heapq.heappop(heads)
                limit = self._limit(rank, now, max_idle)
                if limit is not None and (floor is None or limit < floor):
                    floor = limit
        self.held -= len(out)
        return out, keys, ranks

    def _limit(self, rank: int, now: float, max_idle: float) -> Optional[Tuple[int, int]]:
        """The smallest key writer ``rank`` (with nothing waiting) may still send; None
        when it need not be waited for."""
        if rank == UNSTAMPED:
            return None
        since = self._idle_since.get(rank)
        if since is not None and now - since >= max_idle:
            return None
        return self._bound.get(rank, _UNKNOWN), rank

    def _floor(self, now: float, max_idle: float) -> Optional[Tuple[int, int]]:
        floor = None
        for rank, queue in self._queues.items():
            if not queue:
                limit = self._limit(rank, now, max_idle)
                if limit is not None and (floor is None or limit < floor):
                    floor = limit
        return floor

    # -- state ----------------------------------------------------------------------
    def busy(self, now: float, max_idle: float) -> bool:
        """Whether more may still come out without new input: records are held, or a
        writer has not said it is idle (for ``max_idle``)."""
        if self.held:
            return True
        return any(self._limit(rank, now, max_idle) is not None for rank in self.writers)

    def idle_writers(self) -> bool:
        """Whether every writer's last word was that it is idle, and nothing is held."""
        return not self.held and all(rank in self._idle_since for rank in self.writers)

    def position(self) -> Optional[int]:
        """The first offset still held, else the offset past the last fetched (None:
        nothing fetched yet)."""
        first = min((queue[0][1][0] for queue in self._queues.values() if queue), default=None)
        return first if first is not None else self._fetched_to

    def clear(self, position: Optional[int]) -> None:
        """Drop what is held: it is read again from ``position``."""
        for queue in self._queues.values():
            queue.clear()
        self.held = 0
        self._fetched_to = position


class CommitNote(NamedTuple):
    """What a task commits with each input partition's offset, as the offset's metadata:
    its stream time (restored on restart, as Kafka Streams keeps partition time there) and,
    for a repartition partition, the writers' cursor (see the module docstring)."""

    stream_time: int = -1
    cursor: Mapping[int, int] = {}

    def encode(self, position: int = 0) -> str:
        """``"sk1 t=<stream time> <writer task>+<offset - position> ..."``: compact, since
        Kafka limits offset metadata (``offset.metadata.max.bytes``, 4096 by default)."""
        return " ".join(["sk1", f"t={self.stream_time}",
                         *(f"{writer_name(rank)}+{offset - position}"
                           for rank, offset in sorted(self.cursor.items()))])

    @classmethod
    def decode(cls, metadata: Optional[str], position: int = 0) -> "CommitNote":
        """The note committed with offset ``position`` (an empty note for metadata not
        written by streamkit)."""
        if not metadata or not metadata.startswith("sk1 "):
            return cls()
        stream_time, cursor = -1, {}
        for item in metadata[4:].split():
            if item.startswith("t="):
                stream_time = int(item[2:])
            else:
                writer, _, delta = item.partition("+")
                cursor[writer_rank(*parse_task_id(writer))] = position + int(delta)
        return cls(stream_time, cursor)
