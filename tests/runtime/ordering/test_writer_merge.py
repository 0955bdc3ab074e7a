"""The merge of a repartition partition's writers: one order, whatever the writers' pace,
the fetch boundaries and the restarts (see streamkit.runtime.ordering.writer_merge)."""
from __future__ import annotations

import random
from typing import Dict, List, Tuple

import pytest

from streamkit.runtime.ordering.repartition_stamps import (marker, read_stamp, strip_markers, with_writer_header, writer_name,
                                        writer_rank)
from streamkit.runtime.ordering.task_inputs import TaskInputs
from streamkit.runtime.ordering.writer_merge import CommitNote, WriterMerge
from streamkit.transport.base import TopicPartition

A, B, C = writer_rank(0, 0), writer_rank(0, 1), writer_rank(0, 2)
REP = TopicPartition("app-count-repartition", 0)


class Log:
    """A repartition partition being appended to: offsets in arrival order."""

    def __init__(self) -> None:
        self.records: List[tuple] = []

    def data(self, rank: int, stream_time: int, value: str, timestamp: int = -1) -> None:
        ts = stream_time if timestamp < 0 else timestamp
        self.records.append((len(self.records), ts, None, value.encode(), with_writer_header(None, rank, stream_time)))

    def marker(self, rank: int, stream_time: int, idle: bool = False) -> None:
        key, value, ts, headers = marker(rank, stream_time, idle)
        self.records.append((len(self.records), ts, key, value, headers))


def _values(records) -> List[str]:
    return [r[3].decode() for r in records]


def test_records_are_released_once_every_writer_has_passed_them() -> None:
    log = Log()
    log.data(A, 10, "a10")
    log.data(A, 20, "a20")
    log.data(B, 5, "b5")
    merge = WriterMerge(frozenset({A, B}))
    merge.add(log.records, now=0.0)
    out, keys, ranks = merge.release(0.0, 0.0)
    # b5 first; a10 waits: B may still send something between 5 and 10
    assert _values(out) == ["b5"] and keys == [5] and ranks == [B]
    log.marker(B, 15)
    merge.add(log.records[3:], now=0.0)
    assert _values(merge.release(0.0, 0.0)[0]) == ["a10"]  # a20 waits for B past 15
    log.marker(B, 20)
    merge.add(log.records[4:], now=0.0)
    # B at 20 with a larger rank than A: A's (20, A) goes first, nothing of B can precede it
    assert _values(merge.release(0.0, 0.0)[0]) == ["a20"]
    assert merge.held == 0


def test_a_writer_never_heard_from_holds_everything() -> None:
    log = Log()
    log.data(A, 1, "a1")
    log.marker(B, 1_000)
    merge = WriterMerge(frozenset({A, B, C}))
    merge.add(log.records, now=0.0)
    assert merge.release(5.0, 0.0) == ([], [], [])
    assert merge.busy(5.0, 0.0)


def test_an_idle_writer_is_waited_for_max_task_idle_then_not_at_all() -> None:
    log = Log()
    log.data(A, 50, "a50")
    log.marker(B, 10, idle=True)
    merge = WriterMerge(frozenset({A, B}))
    merge.add(log.records, now=100.0)
    assert merge.release(100.5, 1.0)[0] == []
    assert _values(merge.release(101.0, 1.0)[0]) == ["a50"]
    # a data record of B ends its idleness: B is waited for again
    log.data(B, 60, "b60")
    log.data(A, 70, "a70")
    merge.add(log.records[2:], now=102.0)
    assert _values(merge.release(102.0, 1.0)[0]) == ["b60"]


def test_unstamped_records_are_not_waited_for() -> None:
    merge = WriterMerge(frozenset({A}))
    merge.add([(0, 5, None, b"x", None)], now=0.0)
    assert _values(merge.release(0.0, 0.0)[0]) == ["x"]


def _writers_output(seed: int, writers: int, records: int) -> Dict[int, List[Tuple[int, str]]]:
    """Each writer's records for one partition in its own order: stream times never decrease."""
    rng = random.Random(seed)
    out = {}
    for w in range(writers):
        st, seq = 0, []
        for i in range(records):
            st += rng.choice([0, 0, 1, 3, 10])
            seq.append((st, f"{w}-{i}"))
        out[writer_rank(1, w)] = seq
    return out


def _expected(per_writer: Dict[int, List[Tuple[int, str]]]) -> List[str]:
    keyed = [(st, rank, i, v) for rank, seq in per_writer.items() for i, (st, v) in enumerate(seq)]
    return [v for *_k, v in sorted(keyed)]


def _interleave(per_writer, rng: random.Random, marker_every: int) -> Log:
    """The writers' records (and a progress marker now and then) appended in a random
    interleaving; each writer ends with an idle marker."""
    log = Log()
    cursors = {rank: 0 for rank in per_writer}
    while cursors:
        rank = rng.choice(sorted(cursors))
        i = cursors[rank]
        seq = per_writer[rank]
        if i == len(seq):
            log.marker(rank, seq[-1][0], idle=True)
            del cursors[rank]
            continue
        st, value = seq[i]
        log.data(rank, st, value, timestamp=max(0, st - rng.randrange(5)))
        cursors[rank] = i + 1
        if rng.randrange(marker_every) == 0:
            log.marker(rank, st)
    return log


@pytest.mark.parametrize("seed", range(25))
def test_the_merged_order_does_not_depend_on_interleaving_fetches_or_restarts(seed: int) -> None:
    """Property: for random writer sequences appended in a random interleaving, fetched in
    random slices, with commits and restarts from the committed position and cursor at
    random moments, the task processes exactly the sorted merge, each record once."""
    rng = random.Random(seed)
    per_writer = _writers_output(seed, rng.randint(1, 5), rng.randint(1, 60))
    log = _interleave(per_writer, rng, marker_every=rng.randint(1, 10))
    writers = {REP: frozenset(per_writer)}
    processed: List[str] = []
    inputs = TaskInputs([REP], writers)
    offset = 0
    while True:
        if rng.random() < 0.15:  # crash and restart from the last commit
            position = inputs.merge_positions().get(REP, 0)
            note = CommitNote(-1, inputs.cursors({REP: position}).get(REP, {}))
            decoded = CommitNote.decode(note.encode(position), position)
            inputs = TaskInputs([REP], writers, {REP: decoded.cursor})
            offset = position
        end = min(len(log.records), offset + rng.randint(1, 12))
        inputs.add(REP, log.records[offset:end], 0.0)
        offset = end
        for _tp, records in inputs.release(0.0, 0.0, lambda tp: False):
            processed.extend(_values(records))
        if offset == len(log.records) and inputs.pending() == 0:
            break
    assert processed == _expected(per_writer)


def test_task_inputs_merge_a_repartition_partition_with_a_source_partition_by_key() -> None:
    source = TopicPartition("ads", 0)
    log = Log()
    log.data(A, 10, "a10", timestamp=9)
    log.data(A, 30, "a30", timestamp=2)  # an out-of-order record: its key is A's stream time
    log.marker(A, 40, idle=True)
    inputs = TaskInputs([source, REP], {REP: frozenset({A})})
    inputs.add(REP, log.records, 0.0)
    inputs.add(source, [(0, 5, None, b"s5", None), (1, 20, None, b"s20", None), (2, 35, None, b"s35", None)], 0.0)
    runs = inputs.release(0.0, 0.0, lambda tp: False)
    assert [v for _tp, records in runs for v in _values(records)] == ["s5", "a10", "s20", "a30", "s35"]


def test_positions_and_cursors_after_out_of_offset_order_processing() -> None:
    log = Log()
    log.data(A, 50, "a50")   # offset 0: held (B may still send below 50)
    log.data(B, 10, "b10")   # offset 1: released first
    inputs = TaskInputs([REP], {REP: frozenset({A, B})})
    inputs.add(REP, log.records, 0.0)
    assert _values(inputs.release(0.0, 0.0, lambda tp: False)[0][1]) == ["b10"]
    positions = inputs.merge_positions()
    assert positions == {REP: 0}  # a50 was not processed
    assert inputs.cursors(positions) == {REP: {B: 1}}  # a restart from 0 skips b10


def test_commit_note_round_trip_and_foreign_metadata() -> None:
    note = CommitNote(1234, {A: 7, C: 9})
    assert note.encode(5) == "sk1 t=1234 0_0+2 0_2+4"
    assert CommitNote.decode(note.encode(5), 5) == note
    # 256 writers fit Kafka's default 4096 bytes of offset metadata
    many = CommitNote(1_700_000_000_000, {writer_rank(3, p): 10_000_000 + p for p in range(256)})
    assert len(many.encode(10_000_000)) < 4000
    assert CommitNote.decode("") == CommitNote()
    assert CommitNote.decode("written by another tool") == CommitNote()
    assert writer_name(writer_rank(3, 17)) == "3_17"


def test_stamps_are_removed_and_markers_dropped_for_display() -> None:
    log = Log()
    log.records.append((0, 1, None, b"v", with_writer_header((("user", b"h"),), A, 4)))
    log.marker(A, 4)
    stamp = read_stamp(log.records[0])
    assert (stamp.rank, stamp.stream_time, stamp.is_marker) == (A, 4, False)
    assert strip_markers(log.records) == [(0, 1, None, b"v", (("user", b"h"),))]


def test_data_after_an_idle_marker_ends_the_idleness_within_one_fetch() -> None:
    log = Log()
    log.data(A, 10, "a10")
    log.marker(A, 10, idle=True)
    log.data(A, 30, "a30")
    log.data(B, 40, "b40")
    merge = WriterMerge(frozenset({A, B}))
    merge.add(log.records, now=0.0)  # one fetch: A is busy again after a30
    out = _values(merge.release(10.0, 0.0)[0])
    assert out == ["a10", "a30"]  # b40 waits: A, no longer idle, may still send below 40
    assert merge.busy(10.0, 0.0)
