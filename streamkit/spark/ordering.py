"""The order in which a replayed task takes its input: the live runtime's order, as a sort key.

A live task takes the record with the smallest order key next across its input
partitions, ties going to the input listed first (:mod:`streamkit.runtime.ordering.task_inputs`).
A source partition is read in offset order and its key is the record's timestamp;
a repartition partition's writers are merged by (writer stream time, writer rank,
offset) (:mod:`streamkit.runtime.ordering.writer_merge`), and its key is the writer stream time.

Such a greedy merge of sequences is a sort: a record's place is given by the
running maximum of the keys of its own sequence up to it (``pmax``), then the
sequence's rank, then its position in the sequence. (The record at the head of a
sequence whose earlier records had larger keys cannot be taken before those
records, and once they are taken nothing in the merge is below their maximum, so
it goes right after them.) For a source partition ``pmax`` is the running maximum
timestamp; for a repartition record it is the writer stream time the record carries
(never decreasing per writer), and the sending task is the writer's rank. So the
key is ``(pmax, input index, sending task, sequence)`` at every stage.

The live runtime reaches this order whatever the timing, except where an input
stayed empty for longer than ``max_task_idle`` while more of it was still to be
produced (see docs/time-and-ordering.md); a replay is the run that had all of it.
"""
from __future__ import annotations

from itertools import accumulate
from typing import Iterable, List

SENDER_RANK = 1 << 20
"""A sent record's ``sender`` is the sending stage's rank (sub-topologies in dependency
order) times this, plus the sending task's partition."""

ORDER_COLUMNS = ("pmax", "index", "sender", "sequence")
"""The sort key of a task's input record (see the module docstring), as the columns a
stage's input has (:mod:`.stages`); the task comes first, as the Spark partition."""


def running_max(timestamps: Iterable[int], start: int = -1) -> List[int]:
    """Each record's ``pmax``: the largest of ``start`` and the timestamps of its sequence
    up to and including its own."""
    out = list(accumulate(timestamps, max, initial=start))
    del out[0]
    return out
