"""Who wrote a record of a repartition topic, and how far that writer had come.

Every record a task writes to a repartition topic carries, as its last header,
the writer (the task) and the writer's stream time when it wrote the record. At
each commit a writer also sends a *progress marker* to every partition of each
repartition topic it writes whose progress it has not announced yet: a record
with no key and no value whose last header says "everything I write from now on
has a stream time of at least T" and whether the writer is *idle* (nothing left
to read, nothing held back). The reading task merges its writers by
(writer stream time, writer, offset) with :class:`~.writer_merge.WriterMerge`,
so what it processes, and every lateness decision it makes, do not depend on
which writer ran ahead, on how fetches were split, or on which worker ran what.

Markers are internal: the runtime consumes them and they never reach a task,
``streamkit consume`` or the Spark replay. Headers a user's record carried on its
way into the repartition topic stay in front of this one, and come out again.
"""
from __future__ import annotations

import struct
from typing import FrozenSet, Iterable, Mapping, Optional, Tuple

from ...core.names import task_id
from ...topology import Topology
from ...topology.passes import tasks_of
from ...core.records import Headers, OutgoingRecord, RawRecord

WRITER_HEADER = "__sk.w"
"""Last header of a data record: writer rank and writer stream time (>qq)."""
MARKER_HEADER = "__sk.m"
"""Only header of a progress marker: writer rank, writer stream time, idle flag (>qqB)."""

RECORD_STAMP = struct.Struct(">qq")
"""The writer header's value: writer rank, writer stream time."""
_RECORD = RECORD_STAMP
_MARKER = struct.Struct(">qqB")
_PARTITION_BITS = 24


def writer_rank(sub_topology: int, partition: int) -> int:
    """One integer per task that orders writers as (sub-topology, partition)."""
    return (sub_topology << _PARTITION_BITS) | partition


def writer_name(rank: int) -> str:
    """The task id ``"<sub>_<partition>"`` of a writer rank."""
    return task_id(rank >> _PARTITION_BITS, rank & ((1 << _PARTITION_BITS) - 1))


def writer_header(rank: int, stream_time: int) -> Tuple[str, bytes]:
    return WRITER_HEADER, _RECORD.pack(rank, stream_time)


def with_writer_header(headers: Headers, rank: int, stream_time: int) -> Tuple[Tuple[str, bytes], ...]:
    """``headers`` with the writer header appended (a record going into a repartition topic)."""
    own = (WRITER_HEADER, _RECORD.pack(rank, stream_time))
    return (own,) if not headers else (*headers, own)


def marker(rank: int, stream_time: int, idle: bool) -> OutgoingRecord:
    """A progress marker (timestamped with the stream time it announces)."""
    return None, None, max(stream_time, 0), ((MARKER_HEADER, _MARKER.pack(rank, stream_time, idle)),)


class Stamp:
    """What the last header of a repartition record says."""

    __slots__ = ("rank", "stream_time", "idle", "is_marker")

    def __init__(self, rank: int, stream_time: int, idle: bool, is_marker: bool) -> None:
        self.rank = rank
        self.stream_time = stream_time
        self.idle = idle
        self.is_marker = is_marker


def read_stamp(record: RawRecord) -> Optional[Stamp]:
    """The writer stamp of a repartition record, None for a record without one (written
    by a streamkit version before stamps, or by hand)."""
    headers = record[4]
    if not headers:
        return None
    name, payload = headers[-1]
    if name == WRITER_HEADER:
        rank, stream_time = _RECORD.unpack(payload)
        return Stamp(rank, stream_time, False, False)
    if name == MARKER_HEADER:
        rank, stream_time, idle = _MARKER.unpack(payload)
        return Stamp(rank, stream_time, bool(idle), True)
    return None


def without_stamp(record: RawRecord) -> RawRecord:
    """``record`` with its writer header removed (what the reading task sees)."""
    headers = record[4]
    return record[0], record[1], record[2], record[3], (headers[:-1] or None) if headers else None


def is_stamped(record: RawRecord) -> bool:
    """Whether ``record`` carries a writer stamp (a repartition record or a marker)."""
    headers = record[4]
    return bool(headers) and headers[-1][0] in (WRITER_HEADER, MARKER_HEADER)


def is_marker(record: RawRecord) -> bool:
    """Whether ``record`` is a progress marker (not data)."""
    headers = record[4]
    return bool(headers) and headers[-1][0] == MARKER_HEADER


def merged_topics(topology: Topology) -> FrozenSet[str]:
    """The repartition topics whose readers merge their writers: all but those on a cycle
    of sub-topologies (a foreign-key join's subscription and response topics), where a
    reader would wait on a writer that waits on it."""
    readers: dict = {}
    for sub in topology.sub_topologies:
        for topic in sub.source_topics:
            readers.setdefault(topic, set()).add(sub.id)
    downstream = {sub.id: {r for t in sub.sink_topics for r in readers.get(t, ())} for sub in topology.sub_topologies}

    def reaches(start: int, goal: int) -> bool:
        seen, pending = set(), [start]
        while pending:
            current = pending.pop()
            if current == goal:
                return True
            if current not in seen:
                seen.add(current)
                pending.extend(downstream[current])
        return False

    out = set()
    for topic in topology.repartition_topics:
        writers = [sub.id for sub in topology.sub_topologies if topic in sub.sink_topics]
        if not any(reaches(reader, writer) for reader in readers.get(topic, ()) for writer in writers):
            out.add(topic)
    return frozenset(out)


def repartition_writers(topology: Topology, partitions: Mapping[str, int]) -> dict:
    """``{merged repartition topic: frozenset of writer ranks}``: every task of every
    sub-topology that writes the topic."""
    repartition = merged_topics(topology)
    out: dict = {}
    for sub_id, partition in tasks_of(topology, partitions):
        for sink in topology.sink_nodes(topology.sub_topologies[sub_id]):
            if sink.topic in repartition:
                out.setdefault(sink.topic, set()).add(writer_rank(sub_id, partition))
    return {topic: frozenset(ranks) for topic, ranks in out.items()}


def written_repartition_topics(topology: Topology, sub_id: int) -> Tuple[str, ...]:
    """The merged repartition topics sub-topology ``sub_id`` writes (where it sends markers)."""
    sub = topology.sub_topologies[sub_id]
    repartition = merged_topics(topology)
    return tuple(sorted({s.topic for s in topology.sink_nodes(sub) if s.topic in repartition}))


def strip_markers(records: Iterable[RawRecord]) -> list:
    """``records`` without progress markers, stamps removed (for tools that show records)."""
    return [without_stamp(r) if r[4] and r[4][-1][0] == WRITER_HEADER else r
            for r in records if not is_marker(r)]
