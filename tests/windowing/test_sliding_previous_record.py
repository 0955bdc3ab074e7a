"""Sliding windows: which earlier record is "the previous record" (issue 33).

Kafka Streams 4.1 knows a key's earlier records only through its stored windows. For a new
record at ``t`` it reads them from the latest start down and takes as the previous record
the latest record of the first window ending before ``t`` (or of ``t``'s stored left
window); it creates that record's right window if ``t`` falls in it. A window holding
``t`` that ends after it is never where the previous record comes from. So a record whose
own left window was already closed when it came (it made only its right window) is no
one's previous record: no right window of it is created later.

Every expected output below is Kafka Streams 4.1.0's own (its TopologyTestDriver, values
``1, 2, 4, 8, ...`` so a sum names the records), listed per input record: count, reduce
(sum) and aggregate (sum from 0) of the same windows.
"""
from __future__ import annotations

from datetime import timedelta
from typing import Dict, List, Sequence, Tuple

import pytest

import streamkit as sk
from streamkit.testing import TopologyTestDriver

MS = timedelta(milliseconds=1)

Row = Tuple[str, int, int, int, int, int]
"""``(key, start, end, count, sum, timestamp)``: one forwarded window update."""


def sliding_driver(difference: int, grace: int) -> TopologyTestDriver:
    """in -> group_by_key -> sliding windows -> count, reduce (sum) and aggregate (sum)."""
    app = sk.App("sliding-previous-record")
    windows = sk.SlidingWindows(time_difference=difference * MS, grace=grace * MS)

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        grouped = b.stream("in").group_by_key()
        grouped.windowed_by(windows).count(name="cnt").to_stream().to("cnt-out")
        grouped.windowed_by(windows).reduce(lambda agg, v: agg + v, name="red").to_stream().to("red-out")
        (grouped.windowed_by(windows).aggregate(lambda: 0, lambda k, v, agg: agg + v, name="agg")
         .to_stream().to("agg-out"))
    return TopologyTestDriver(app)


def outputs_per_record(difference: int, grace: int, records: Sequence[Tuple[str, int]]) -> List[List[Row]]:
    """Pipe ``(key, timestamp)`` records (the i-th with value ``2**i``) and return, per record,
    the window updates it caused; the three aggregations must agree on windows and times."""
    driver = sliding_driver(difference, grace)
    result = []
    for i, (key, timestamp) in enumerate(records):
        driver.input_topic("in").pipe_input(key, 2 ** i, timestamp)
        per_topic: Dict[str, list] = {
            topic: [(r.key.key, r.key.start, r.key.end, r.value, r.timestamp)
                    for r in driver.output_topic(topic).read_records()]
            for topic in ("cnt-out", "red-out", "agg-out")}
        counts, sums, aggregates = per_topic["cnt-out"], per_topic["red-out"], per_topic["agg-out"]
        assert sums == aggregates, (i, sums, aggregates)
        assert [row[:3] + row[4:] for row in counts] == [row[:3] + row[4:] for row in sums], (i, counts, sums)
        result.append([(key_, start, end, count, total, ts)
                       for (key_, start, end, count, ts), (*_w, total, _ts) in zip(counts, sums)])
    return result


CASES = [
    # The minimal case (difference 5, grace 0). c@15 comes at stream time 16: its left
    # window [10,15] is closed, its previous record 13's right window [14,19] is created. c@18:
    # the window ending before it is [8,13], so its previous record is 13 (whose right window
    # exists), not 15: no [16,21]. Its left window [13,18] starts from [8,13]: 13 and 18.
    pytest.param(5, 0, [("c", 13), ("a", 16), ("c", 15), ("c", 18)], [
        [("c", 8, 13, 1, 1, 13)],
        [("a", 11, 16, 1, 2, 16)],
        [("c", 14, 19, 1, 4, 15)],
        [("c", 14, 19, 2, 12, 18), ("c", 13, 18, 2, 9, 18)],
    ], id="out of order, left window closed: no right window later"),
    # Grace 1: c@15's left window [10,15] is still open at stream time 16, so it is stored;
    # c@18 finds it, 15 is its previous record, and 15's right window [16,21] is created.
    pytest.param(5, 1, [("c", 13), ("a", 16), ("c", 15), ("c", 18)], [
        [("c", 8, 13, 1, 1, 13)],
        [("a", 11, 16, 1, 2, 16)],
        [("c", 14, 19, 1, 4, 15), ("c", 10, 15, 2, 5, 15)],
        [("c", 14, 19, 2, 12, 18), ("c", 16, 21, 1, 8, 18), ("c", 13, 18, 3, 13, 18)],
    ], id="out of order, left window open (grace 1): right window created"),
    # The same records in order (grace 0): nothing is closed, every window is exact.
    pytest.param(5, 0, [("c", 13), ("c", 15), ("a", 16), ("c", 18)], [
        [("c", 8, 13, 1, 1, 13)],
        [("c", 14, 19, 1, 2, 15), ("c", 10, 15, 2, 3, 15)],
        [("a", 11, 16, 1, 4, 16)],
        [("c", 14, 19, 2, 10, 18), ("c", 16, 21, 1, 8, 18), ("c", 13, 18, 3, 11, 18)],
    ], id="in order"),
    # Difference 2, grace 2, one key. k@3 at stream time 7: its left window [1,3] is closed;
    # it updates nothing and creates its previous record 2's right window [3,5]. k@4 updates
    # it. k@6: the window ending before it is [3,5] (latest 4), so [4,6] starts from [3,5]'s
    # aggregate, which holds 3 as well (outside [4,6]: Kafka's copy assumes [3,5] is 4's left
    # window). Its right window [7,9] copies [5,7] as it was: 7.
    pytest.param(2, 2, [("k", 2), ("k", 7), ("k", 3), ("k", 4), ("k", 6)], [
        [("k", 0, 2, 1, 1, 2)],
        [("k", 5, 7, 1, 2, 7)],
        [("k", 3, 5, 1, 4, 3)],
        [("k", 3, 5, 2, 12, 4)],
        [("k", 5, 7, 2, 18, 7), ("k", 4, 6, 3, 28, 6), ("k", 7, 9, 1, 2, 7)],
    ], id="left window copied from a window that holds an earlier record"),
    # An early record (t < difference, left window the shared [0, 5]) at stream time 8: [0,5]
    # is closed; its right window [4,9] copies [0,5] (4). c@6: previous record 4 (from [0,5]),
    # so 4's right window [5,10] is created with 6 only; 3 is in no window.
    pytest.param(5, 0, [("c", 4), ("a", 8), ("c", 3), ("c", 6)], [
        [("c", 0, 5, 1, 1, 4)],
        [("a", 3, 8, 1, 2, 8)],
        [("c", 4, 9, 1, 1, 4)],
        [("c", 4, 9, 2, 9, 6), ("c", 5, 10, 1, 8, 6)],
    ], id="early record out of order"),
]


@pytest.mark.parametrize("difference, grace, records, expected", CASES)
def test_windows_as_kafka_streams_creates_them(difference, grace, records, expected):
    assert outputs_per_record(difference, grace, records) == expected
