"""runtime.record_order: the order a worker runs one fetch round's records in, and the
order of several tasks' output to one partition."""
from __future__ import annotations

import random

from streamkit.core.records import TopicPartition
from streamkit.runtime.ordering.record_order import TOLERANCE_MS, interleave_lanes, merge_by_timestamp

A, B, C = (TopicPartition("in", p) for p in range(3))


def _records(*timestamps):
    return [(offset, ts, None, None, None) for offset, ts in enumerate(timestamps)]


def _flatten(runs):
    return [(tp.partition, record[1]) for tp, records in runs for record in records]


def test_one_lane_with_one_partition_is_cut_into_runs_of_max_run():
    runs = list(interleave_lanes([[(A, _records(*range(10)))]], max_run=4))
    assert [len(records) for _tp, records in runs] == [4, 4, 2]


def test_the_earliest_lane_runs_while_its_records_stay_within_the_tolerance_of_the_others():
    t = TOLERANCE_MS
    lanes = [[(A, _records(0, t // 2, 5 * t // 2))], [(B, _records(t // 10, 2 * t))]]
    runs = [(tp.partition, [r[1] for r in records]) for tp, records in interleave_lanes(lanes, max_run=100)]
    # A from 0 may go up to B's next (t/10) + t; then B up to A's next (5t/2) + t; then A
    assert runs == [(0, [0, t // 2]), (1, [t // 10, 2 * t]), (0, [5 * t // 2])]


def test_every_record_comes_out_once_and_each_lane_keeps_its_order():
    rng = random.Random(7)
    for _case in range(50):
        lanes = []
        for lane_index in range(rng.randint(1, 4)):
            runs = [(TopicPartition(f"t{lane_index}", run), _records(*sorted(rng.randint(0, 20_000)
                                                                              for _ in range(rng.randint(1, 30)))))
                    for run in range(rng.randint(1, 3))]
            lanes.append(runs)
        out = list(interleave_lanes(lanes, max_run=rng.randint(1, 8)))
        unsent = {lane[0][0].topic: [r[1] for _tp, records in lane for r in records] for lane in lanes}
        for tp, records in out:  # no record runs while another lane holds one older by more than the tolerance
            for record in records:
                others = [ts[0] for topic, ts in unsent.items() if topic != tp.topic and ts]
                assert not others or record[1] <= min(others) + TOLERANCE_MS
                assert unsent[tp.topic].pop(0) == record[1]
        for lane in lanes:
            expected = [(tp, r) for tp, records in lane for r in records]
            got = [(tp, r) for tp, records in out for r in records if tp.topic == lane[0][0].topic]
            assert got == expected


def test_outputs_of_several_tasks_to_one_partition_merge_by_timestamp_keeping_each_tasks_order():
    first = [("out", 0, [(b"a", b"1", 10, None), (b"a", b"2", 30, None)]), ("out", 1, [(b"x", b"", 5, None)])]
    second = [("out", 0, [(b"b", b"1", 20, None), (b"b", b"2", 20, None)])]
    merged = dict(((topic, partition), records) for topic, partition, records in
                  merge_by_timestamp([first, second]))
    assert [r[1] for r in merged[("out", 0)]] == [b"1", b"1", b"2", b"2"]
    assert [r[0] for r in merged[("out", 0)]] == [b"a", b"b", b"b", b"a"]
    assert merged[("out", 1)] == [(b"x", b"", 5, None)]
