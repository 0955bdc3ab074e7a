"""Keeps a worker's source partitions together in event time, across fetch rounds.

A fetch round returns up to a fixed number of records per partition, so a dense
partition covers less event time per round than a sparse one. Released as
fetched, the sparse partitions' tasks would run ahead, and the tasks reading what
they write would have to hold the fast writers' records until the slow one caught
up (see :mod:`.writer_merge`): correct, but memory grows with the skew.

So a worker releases source records only up to its *frontier*: the smallest
timestamp reached (largest fetched) by any source partition that still has
records to give (buffered, or unread on the broker), plus ``AHEAD_MS``. The
allowance matters for a live stream: there every partition has a few records
unread on the broker at any moment, a fetch apart, and holding the others back to
the slowest one's last fetch would add a fetch round trip to every record's
latency (about 5 ms of 30 at the median on Tansu). The rest stays buffered for
the next round, and a partition with more than ``PAUSE_AT`` records buffered is
paused (no fetches) until it is down to ``RESUME_AT``. A worker thus buffers at
most about ``PAUSE_AT`` plus one fetch (10,000 records on the embedded broker) per
source partition, whatever the skew.

This is about memory and latency; the order and every lateness decision are
already fixed by the merges.
"""
from __future__ import annotations

from typing import Callable, Dict, Iterable, List, Optional

from ...core.records import TopicPartition
from .record_order import TOLERANCE_MS
from .task_inputs import TaskInputs

PAUSE_AT = 30_000
"""Buffered records of one source partition above which it is no longer fetched."""
RESUME_AT = 10_000
"""Buffered records of a paused partition below which it is fetched again."""
AHEAD_MS = TOLERANCE_MS
"""How far in event time a source partition may run ahead of the frontier: as far as
a fetch round's interleaving lets one task run ahead of the others (record_order)."""

HasLag = Callable[[TopicPartition], Optional[bool]]


def frontier(inputs: Iterable[TaskInputs], has_lag: HasLag) -> Optional[int]:
    """The largest timestamp a source record may have to be released now: the smallest
    timestamp reached by a source partition with records to give, plus AHEAD_MS (None: no
    such partition, nothing to hold back)."""
    out: Optional[int] = None
    for task_inputs in inputs:
        if not task_inputs.sources_only:
            continue
        for tp in task_inputs.partitions:
            if task_inputs.pending(tp) or has_lag(tp):
                reached = task_inputs.reached.get(tp, -1)
                if out is None or reached < out:
                    out = reached
    return out if out is None or out < 0 else out + AHEAD_MS  # -1: one has given nothing yet


class Pauses:
    """Which source partitions are paused, and where each resumes."""

    def __init__(self) -> None:
        self.paused: Dict[TopicPartition, int] = {}
        """Paused partition -> the offset its next fetch starts from."""

    def update(self, inputs: Iterable[TaskInputs]) -> tuple:
        """(partitions to pause with their resume offsets, partitions to resume with theirs)."""
        pause: Dict[TopicPartition, int] = {}
        resume: Dict[TopicPartition, int] = {}
        for task_inputs in inputs:
            if not task_inputs.sources_only:
                continue
            for tp in task_inputs.partitions:
                buffered = task_inputs.pending(tp)
                if tp in self.paused:
                    if buffered <= RESUME_AT:
                        resume[tp] = self.paused.pop(tp)
                elif buffered > PAUSE_AT:
                    pause[tp] = self.paused[tp] = task_inputs.next_offset(tp)
        return pause, resume

    def forget(self, partitions: List[TopicPartition]) -> None:
        """The partitions' task closed, or is re-read from its positions."""
        for tp in partitions:
            self.paused.pop(tp, None)
