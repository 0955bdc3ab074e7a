"""The order in which a replayed task takes its input: the live runtime's order, as a sort key.

A live task takes the record with the smallest timestamp next across its input
partitions, each partition in offset order, ties going to the input listed first
(:mod:`streamkit.runtime.task_inputs`); what several tasks send to one partition
of a repartition topic is merged the same way (:func:`~streamkit.runtime.record_order.merge_by_timestamp`).

Such a greedy merge of sequences is a sort: a record's place is given by the
running maximum of the timestamps of its own sequence up to it (``pmax``), then
the sequence's rank, then its position in the sequence. (The record at the head
of a sequence whose earlier records had larger timestamps cannot be taken before
those records, and once they are taken nothing in the merge is below their
maximum, so it goes right after them.) A merged sequence's own running maximum is
again each record's ``pmax``, so the key composes through any number of
repartitions: ``(pmax, input index, sending task, sequence)``.

The live runtime reaches this order when all input is available, which is the
case for historical data; with input arriving while it runs, its order depends
on timing (and on ``max_task_idle``), so a replay is the run that had all of it.
"""
from __future__ import annotations

from typing import Iterable, Iterator, Tuple

from ..transport.base import RawRecord


SENDER_RANK = 1 << 20
"""A sent record's ``sender`` is the sending stage's rank (sub-topologies in dependency
order) times this, plus the sending task's partition."""


def with_running_max(records: Iterable[RawRecord]) -> Iterator[Tuple[int, RawRecord]]:
    """Each record of one partition (in offset order) with ``pmax``: the largest
    timestamp up to and including it."""
    pmax = -1
    for record in records:
        if record[1] > pmax:
            pmax = record[1]
        yield pmax, record


def input_order(task: int, pmax: int, input_index: int, sender: int, sequence: int) -> Tuple[int, int, int, int, int]:
    """The sort key of a task's input record (see the module docstring)."""
    return task, pmax, input_index, sender, sequence
