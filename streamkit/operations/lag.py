"""Consumer lag judged over a sliding window of samples, with Burrow's rules.

A sample (taken by :mod:`.lag_sampling`) holds, for one consumer group at one moment,
each partition's committed offset and log end offset, and how many live members the
group has. The last N samples form the window. No threshold is involved: a partition
is judged by how its committed offset and its lag moved across the window. The lag at
a sample is ``max(log end offset - committed offset, 0)``.

The rules, per partition, applied in this order (the first that matches decides):

1. OK when the lag at the newest sample is 0.
2. REWIND when the newest committed offset is below the highest committed offset of
   the window: the offset moved backwards and has not got back to where it was.
   Checked before rule 3, so a group moved back after it had caught up is reported.
3. OK when the lag was 0 at any sample of the window.
4. OK when the window holds a single sample: there is nothing to compare yet.
5. When the committed offset is the same at every sample (by rule 3 the lag is then
   above 0 at each): STALL if the group had a live member at one of these samples (a
   consumer is there but its offset does not move: stuck on a record, or committing
   the same offset again and again); STOP if it had none at any of them, or the
   broker cannot tell (nobody consumes: the commits stopped).
6. WARN when the committed offset moved but the lag never went down from one sample
   to the next: the consumer works, and falls behind.
7. OK otherwise.

Severities follow Burrow's order: NOTFOUND < OK < WARN < ERR < STOP < STALL < REWIND.
The group's status is its worst partition's (NOTFOUND when it has no partition).
Burrow's JSON states a group as OK, WARN or ERR, ERR standing for any of STOP, STALL
and REWIND, and so does :meth:`GroupLag.to_json`; its partitions keep their own.

A window holding fewer than N samples (the sampling just started, or a partition's
first commit came within the window) is judged with the samples it has, and reported
incomplete (``complete: false``).

Where this differs from Burrow, which reads every commit, with its time, from
``__consumer_offsets``: Burrow's window is a partition's last N commits, ours the last
N samples taken a fixed interval apart. A sample cannot see a commit that leaves the
offset where it was, so rule 5 tells "the same offset committed again" from "no commit"
by the group's live members instead of by commit times (:mod:`.lag_sampling` says what
that can and cannot tell apart). Burrow's STOP also fires when the offset moved early
in the window and then stood still for longer than it had moved; here it must stand
still for the whole window, which a sliding window reaches N samples after the stop.
Burrow gives a lone commit a verdict; rule 4 does not. Burrow's ``complete`` is the
fraction of complete partitions; here it is true or false.

>>> frozen = [GroupSample(t, {TopicPartition("orders", 0): PartitionSample(5, 9 + t, t)}, live_members=0)
...           for t in range(3)]
>>> result = evaluate_group("billing", frozen, window=3)
>>> result.status.name, result.burrow_status.name, result.complete, result.total_lag
('STOP', 'ERR', True, 6)
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from ..core.records import TopicPartition

__all__ = ["LagStatus", "PartitionSample", "GroupSample", "PartitionLag", "GroupLag", "partition_status",
           "evaluate_group"]


class LagStatus(enum.IntEnum):
    """A lag status; the value is its severity, in Burrow's order."""

    NOTFOUND = 0
    OK = 1
    WARN = 2
    ERR = 3
    STOP = 4
    STALL = 5
    REWIND = 6


@dataclass(frozen=True)
class PartitionSample:
    """One partition of a group, read at one moment."""

    committed: int
    """The group's committed offset: the next offset it will read."""
    end: int
    """The log end offset: the offset the next record appended will get."""
    taken_at: float
    """When it was read, in seconds since the epoch."""

    @property
    def lag(self) -> int:
        """Records appended that the group has not committed past (never negative)."""
        return max(self.end - self.committed, 0)

    def to_json(self) -> dict:
        """Burrow's form of an offset in a window: offset, lag, timestamp in epoch ms."""
        return {"offset": self.committed, "lag": self.lag, "timestamp": int(self.taken_at * 1000)}


@dataclass(frozen=True)
class GroupSample:
    """One consumer group, read at one moment: its partitions with a committed offset."""

    taken_at: float
    partitions: Mapping[TopicPartition, PartitionSample]
    live_members: Optional[int] = None
    """How many consumers were members of the group; None when the broker cannot tell."""


@dataclass(frozen=True)
class PartitionLag:
    """A partition's status over the window, with the window's first and last sample."""

    topic: str
    partition: int
    status: LagStatus
    start: PartitionSample
    end: PartitionSample
    complete: bool
    """Whether the window held as many samples of this partition as it should."""

    @property
    def current_lag(self) -> int:
        return self.end.lag

    def to_json(self) -> dict:
        return {"topic": self.topic, "partition": self.partition, "status": self.status.name,
                "start": self.start.to_json(), "end": self.end.to_json(), "current_lag": self.current_lag,
                "complete": self.complete}


@dataclass(frozen=True)
class GroupLag:
    """A group's evaluation: each partition's status, and the worst of them."""

    group: str
    status: LagStatus
    """The worst partition status (NOTFOUND without partitions)."""
    partitions: Tuple[PartitionLag, ...]
    complete: bool
    """Whether the window was full, for the group and each of its partitions."""
    samples: int
    """How many samples the window held."""
    window: int
    """How many samples it holds when full."""
    live_members: Optional[int]
    """The group's members at the newest sample (None: unknown)."""

    @property
    def total_lag(self) -> int:
        return sum(p.current_lag for p in self.partitions)

    @property
    def max_lag(self) -> Optional[PartitionLag]:
        """The partition with the largest current lag (the first of equals), None without partitions."""
        return max(self.partitions, key=lambda p: p.current_lag, default=None)

    @property
    def burrow_status(self) -> LagStatus:
        """The group's status as Burrow states it: NOTFOUND, OK, WARN, or ERR for anything worse."""
        return min(self.status, LagStatus.ERR)

    def to_json(self) -> dict:
        """The evaluation shaped like Burrow's consumer status response."""
        worst = self.max_lag
        return {"group": self.group, "status": self.burrow_status.name, "complete": self.complete,
                "partitions": [p.to_json() for p in self.partitions], "partition_count": len(self.partitions),
                "maxlag": worst.to_json() if worst is not None else None, "totallag": self.total_lag}


def partition_status(samples: Sequence[PartitionSample], members_seen: bool) -> LagStatus:
    """Rules 1 to 7 of the module docstring for one partition's window (oldest first).

    ``members_seen``: the group had a live member at one of these samples (False also
    when the broker cannot tell)."""
    if not samples:
        raise ValueError("a partition's window needs at least one sample")
    lags = [s.lag for s in samples]
    offsets = [s.committed for s in samples]
    if lags[-1] == 0:  # 1.
        return LagStatus.OK
    if offsets[-1] < max(offsets):  # 2.
        return LagStatus.REWIND
    if 0 in lags or len(samples) == 1:  # 3. and 4.
        return LagStatus.OK
    if len(set(offsets)) == 1:  # 5.
        return LagStatus.STALL if members_seen else LagStatus.STOP
    if all(later >= earlier for earlier, later in zip(lags, lags[1:])):  # 6.
        return LagStatus.WARN
    return LagStatus.OK  # 7.


def evaluate_group(group: str, samples: Sequence[GroupSample], window: int) -> GroupLag:
    """Judge the last ``window`` of ``samples`` (oldest first), partition by partition.

    The partitions judged are those of the newest sample; each is judged on the samples
    of the window that hold it."""
    if window < 1:
        raise ValueError(f"window must be at least 1 sample, got {window!r}")
    recent = list(samples)[-window:]
    if not recent:
        return GroupLag(group, LagStatus.NOTFOUND, (), False, 0, window, None)
    history: Dict[TopicPartition, List[PartitionSample]] = {}
    members_seen: Dict[TopicPartition, bool] = {}
    for sample in recent:
        for tp, reading in sample.partitions.items():
            history.setdefault(tp, []).append(reading)
            members_seen[tp] = members_seen.get(tp, False) or bool(sample.live_members)
    results = []
    for tp in sorted(recent[-1].partitions):
        readings = history[tp]
        results.append(PartitionLag(tp.topic, tp.partition, partition_status(readings, members_seen[tp]),
                                    readings[0], readings[-1], len(readings) == window))
    worst = max((p.status for p in results), default=LagStatus.NOTFOUND)
    complete = len(recent) == window and all(p.complete for p in results)
    return GroupLag(group, worst, tuple(results), complete, len(recent), window, recent[-1].live_members)
