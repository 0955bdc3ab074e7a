"""Samples of a consumer group for the lag rules of :mod:`.lag`, read through a
transport's :class:`~streamkit.transport.base.Admin` (the embedded broker or Kafka).

A sample reads the group's committed offsets, then the log end offset of each of
those partitions (so a lag is never computed against an older end), then how many
live members the group has. Partitions of deleted topics are left out.

What the samples can tell apart, and what they cannot:

- A commit is seen only when it moves the offset. Neither broker says when a commit
  happened: the embedded broker rewrites a group's whole offsets file on every commit
  and keeps no time per partition, and Kafka's OffsetFetch returns offsets only. So
  "the same offset committed again" and "no commit at all" look alike.
- A streamkit worker stuck on a record commits nothing anyway: with
  ``processing_error_handler="fail"`` it exits before its next commit, and a function
  that blocks also blocks the loop that commits. Commit times would call every stuck
  worker STOP; the group's members tell a stuck worker (still a member: STALL) from a
  dead one (gone: STOP).
- Members are counted per group, not per partition: a partition whose consumer died
  while other members live is STALL, not STOP, until a live member takes it over
  (on the embedded broker a worker takes a dead worker's tasks within a poll; Kafka
  rebalances after the session timeout).
- A worker that exits on a poison record and is restarted by a supervisor is a member
  only between its start and that record: STALL when a sample catches it in the
  group, else STOP. Both are errors.
- A broker whose Admin cannot report members (``group_members`` gives None) gives no
  member count: a standing partition with lag is then STOP, never STALL. On Kafka
  (DescribeGroups) a killed worker stays a member until its session times out: STALL
  first, then STOP.
- The window, (N - 1) x the interval, must be longer than the group's commit
  interval (1 s by default for a worker): a shorter one can fall between two commits
  of a healthy group and see its offset stand still.
"""
from __future__ import annotations

import collections
import logging
import time
from typing import Callable, Deque, Dict, Optional, Tuple

from ..core.records import TopicPartition
from ..transport.base import Admin
from .lag import GroupLag, GroupSample, PartitionSample, evaluate_group

__all__ = ["live_members", "sample_group", "LagMonitor"]

log = logging.getLogger(__name__)


def live_members(admin: Admin, group: str) -> Optional[int]:
    """How many members ``group`` has now; None when the broker does not say."""
    found = admin.group_members(group)
    return None if found is None else len(found)


def sample_group(admin: Admin, group: str, *, clock: Callable[[], float] = time.time) -> GroupSample:
    """Read one sample of ``group``: its committed offsets, their log ends, its members."""
    taken_at = clock()
    committed = admin.committed_offsets(group)
    counts = admin.partition_counts(sorted({tp.topic for tp in committed}))
    partitions: Dict[TopicPartition, PartitionSample] = {}
    for tp in sorted(committed):
        count = counts.get(tp.topic)
        if count is None or tp.partition >= count:
            continue  # its topic was deleted: there is nothing left to lag behind
        end = admin.partition_offsets(tp.topic, tp.partition).end
        partitions[tp] = PartitionSample(committed[tp], end, clock())
    return GroupSample(taken_at, partitions, live_members(admin, group))


class LagMonitor:
    """One group's last ``window`` samples, and their evaluation with :mod:`.lag`'s rules.

    Call :meth:`sample` every interval (the caller keeps the pace) and
    :meth:`evaluate` whenever a verdict is wanted; the oldest sample drops out as a
    new one comes in."""

    def __init__(self, admin: Admin, group: str, *, window: int = 10) -> None:
        if not isinstance(window, int) or isinstance(window, bool) or window < 1:
            raise ValueError(f"window must be a whole number of samples >= 1, got {window!r}")
        self.admin = admin
        self.group = group
        self.window = window
        self._samples: Deque[GroupSample] = collections.deque(maxlen=window)

    @property
    def samples(self) -> Tuple[GroupSample, ...]:
        """The window's samples, oldest first."""
        return tuple(self._samples)

    def sample(self) -> GroupSample:
        """Take a sample now and slide the window over it."""
        sample = sample_group(self.admin, self.group)
        self._samples.append(sample)
        log.debug("group %s: %d partition(s), total lag %d, %s member(s)", self.group, len(sample.partitions),
                  sum(p.lag for p in sample.partitions.values()),
                  "unknown" if sample.live_members is None else sample.live_members)
        return sample

    def evaluate(self) -> GroupLag:
        """The window's evaluation (incomplete until ``window`` samples were taken)."""
        return evaluate_group(self.group, self.samples, self.window)
