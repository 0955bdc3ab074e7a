"""The source → target offset map a mirror records as it copies (MirrorMaker 2's offset syncs).

A partition copied 1:1 gets its source records in order, but at other offsets: the
target's transaction markers take offsets too, and the source's own markers, aborted
and compacted records leave gaps the copy does not have. Within one transaction, the
mirror's records of a target partition are contiguous (the mirror is that partition's
only writer), so the map is a list of *runs*: ``count`` records at consecutive source
offsets from ``source``, copied to consecutive target offsets from ``target``. Each
transaction appends, to ``streamkit-mirror.<name>.offset-syncs`` on the target and in
the same transaction as the records, one sync per partition it copied to: the runs of
that copy. The map is exact: every copied record's target offset is known.
"""
from __future__ import annotations

import bisect
import json
from typing import List, NamedTuple, Optional, Sequence, Tuple

from ..core.records import TopicPartition


class OffsetRun(NamedTuple):
    """``count`` records at source offsets ``source``.. copied to target offsets ``target``.."""

    source: int
    target: int
    count: int


def runs_of(source_offsets: Sequence[int], first_target: int) -> List[OffsetRun]:
    """The runs of records at ``source_offsets`` (increasing) appended from ``first_target`` on."""
    runs: List[OffsetRun] = []
    for i, offset in enumerate(source_offsets):
        last = runs[-1] if runs else None
        if last is not None and offset == last.source + last.count:
            runs[-1] = last._replace(count=last.count + 1)
        else:
            runs.append(OffsetRun(offset, first_target + i, 1))
    return runs


EXACT_RUNS = 10_000
"""Runs kept exactly per partition (the newest): at one transaction a second, about
2.8 hours of copying. Older runs are thinned, half at a time, so a map's memory stays
bounded however long a mirror runs (MirrorMaker 2 keeps a fixed number of syncs too)."""


class PartitionOffsetMap:
    """The runs recorded for one partition, in order: the newest :data:`EXACT_RUNS` all of
    them, older ones thinned. Where thinned runs are missing, a position translates to the
    end of the last run kept before it: earlier than exact, so a group moved there reads
    some records again (at least once) and never skips one."""

    def __init__(self, runs: Sequence[OffsetRun] = ()) -> None:
        self.runs: List[OffsetRun] = []
        self._ends: List[int] = []
        self._gap_before: List[bool] = []  # runs were dropped just before this one
        self.add(runs)

    def add(self, runs: Sequence[OffsetRun]) -> None:
        for run in runs:
            self.runs.append(run)
            self._ends.append(run.source + run.count)
            self._gap_before.append(False)
        if len(self.runs) > 2 * EXACT_RUNS:
            self._thin(len(self.runs) - EXACT_RUNS)

    def _thin(self, older: int) -> None:
        """Drop every other run of the ``older`` oldest (never the first), marking each gap."""
        kept = [i for i in range(older) if i == 0 or i % 2 == 0] + list(range(older, len(self.runs)))
        dropped = set(range(older)) - set(kept)
        gap = [self._gap_before[i] or (i - 1) in dropped for i in kept]
        self.runs = [self.runs[i] for i in kept]
        self._ends = [self._ends[i] for i in kept]
        self._gap_before = gap

    def _before(self, index: int) -> int:
        """The target position after the run before ``index`` (0 before any)."""
        if index == 0:
            return 0
        previous = self.runs[index - 1]
        return previous.target + previous.count

    def position(self, source_position: int) -> int:
        """The target position matching ``source_position`` (the next source offset to read)
        of a partition mirrored up to at least there: the target offset of the first copied
        record at or after it, else the offset after the last copied record (0 before any).
        In a thinned stretch, the end of the last run kept before it."""
        index = bisect.bisect_right(self._ends, source_position)
        if index < len(self.runs):
            run = self.runs[index]
            if source_position < run.source and self._gap_before[index]:
                return self._before(index)
            return run.target + max(0, source_position - run.source)
        return self._before(len(self.runs))

    def record(self, source_offset: int) -> Optional[int]:
        """The target offset of the copied record at ``source_offset`` (None: none copied
        there, or its run was thinned away)."""
        index = bisect.bisect_right(self._ends, source_offset)
        if index < len(self.runs) and self.runs[index].source <= source_offset:
            run = self.runs[index]
            return run.target + source_offset - run.source
        return None


def encode_sync(partition: TopicPartition, runs: Sequence[OffsetRun]) -> Tuple[bytes, bytes]:
    """(key, value) of the sync record of ``runs`` copied to ``partition``."""
    key = f"{partition.topic}/{partition.partition}".encode()
    value = json.dumps({"topic": partition.topic, "partition": partition.partition,
                        "runs": [list(run) for run in runs]}, separators=(",", ":")).encode()
    return key, value


def decode_sync(value: bytes) -> Tuple[TopicPartition, List[OffsetRun]]:
    data = json.loads(value)
    return TopicPartition(data["topic"], int(data["partition"])), [OffsetRun(*map(int, r)) for r in data["runs"]]
