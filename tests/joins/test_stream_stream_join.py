"""Windowed stream-stream joins (inner, left, outer) through the TopologyTestDriver.

The kinds of cases Kafka Streams' KStreamKStreamJoinTest, KStreamKStreamLeftJoinTest and
KStreamKStreamOuterJoinTest cover: pairs inside and outside the window, exact window
bounds, asymmetric windows (before/after, a zero side), out-of-order records inside
grace and late ones beyond it, duplicates, many partners, the timing of left/outer
("no partner") results once no partner can arrive, a partner within grace preventing one, several
keys, self-joins, repartitioned inputs, stores, describe() and build-time errors.

The spec these tests hold the join to:

- A left record at ``t`` joins the buffered right records of its key with timestamps in
  ``[t - before, t + after]``; a right record at ``t`` joins the buffered left records in
  ``[t - after, t + before]``. Each pair gives ``joiner(left, right)`` at
  ``max(t_left, t_right)``, in order of the partner's timestamp, then arrival.
- Stream time is the largest record timestamp so far (the current record included), shared
  by both sides; each side's buffer also has its own time, the largest timestamp of that
  side's records with a key. A buffer keeps (and shows) records at most
  ``before + after + grace`` behind its own time (Kafka Streams 4.1's store retention, one
  ms more at the edge). An out-of-order record joins whatever the other buffer still keeps;
  it is buffered only if its own buffer would keep it. A record neither buffered nor giving
  any result is late: counted and written to the late topic.
- left/outer: a record with no partner gives ``joiner(value, None)`` (right side of an
  outer join: ``joiner(None, value)``) with its own timestamp: at once if its window has
  already ended (``t + after`` for a left record, ``t + before`` for a right one, behind
  stream time); else once its window plus grace has closed (stream time reaches
  ``t + after + grace + 1``, right: ``t + before + grace + 1``), unless a partner takes it
  out first. A partner arriving after that, still buffered, joins it as well.
- Due unmatched results are released, in timestamp order and before that record's own join
  results, by a record with a key and a value at stream time (an out-of-order record, a
  None key or value releases nothing), unless the earliest waiting timestamp plus the
  arriving side's window end (``after`` for a left record, ``before`` for a right one) plus
  grace is not behind stream time (Kafka Streams' shortcut).

Where one record releases several unmatched results, the table cases either give them
distinct timestamps or are duplicates of one key on one side (kept in arrival order); the
property test checks each released batch's timestamp order exactly and its contents as a
multiset, so nothing relies on the order of ties between sides or keys.

Each table case is a list of steps ``(side, key, value, timestamp, outputs)``: the record
piped into "left" (L) or "right" (R), and the exact ``(key, value, timestamp)`` records
that record makes the join write, worked out by hand. The joiner writes ``"<left>+<right>"``
so ``"A+None"`` is a left record without partner and ``"None+r"`` a right one.
"""
from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import pytest

import streamkit as sk
from streamkit.errors import TopologyError
from streamkit.serdes import Bytes
from streamkit.testing import TopologyTestDriver
from streamkit.topology.passes import resolve_partitions

MS = timedelta(milliseconds=1)

Output = Tuple[Any, Any, int]
Step = Tuple[str, Any, Any, int, List[Output]]

# Windows used by the table cases (all in ms).
W10 = sk.JoinWindows.of(10 * MS)                                   # [t-10, t+10], no grace
W10_GRACE5 = sk.JoinWindows.of(10 * MS, grace=5 * MS)              # late once t + 15 < stream time
W10_NEVER_LATE = sk.JoinWindows.of(10 * MS, grace=1000 * MS)       # bound tests: lateness out of the way
AFTER_ONLY = W10_NEVER_LATE.before(0 * MS)                         # left at t joins right in [t, t+10]
BEFORE_ONLY = W10_NEVER_LATE.after(0 * MS)                         # left at t joins right in [t-10, t]
ZERO = sk.JoinWindows.of(0 * MS, grace=1000 * MS)                  # equal timestamps only
BEFORE10_AFTER0 = sk.JoinWindows.of(10 * MS).after(0 * MS)         # no grace: left late when t < stream time
AFTER10_BEFORE0 = sk.JoinWindows.of(10 * MS).before(0 * MS)        # no grace: right late when t < stream time


def joiner(left: Any, right: Any) -> str:
    return f"{left}+{right}"


def join_app(how: str, windows: sk.JoinWindows, *, late_records_topic: Optional[str] = None,
             skip: bool = False) -> sk.App:
    """left, right -> <how> join named "j" -> out. With ``skip``, records whose value is
    "skip" are filtered out before the join: they move the task's stream time, not the join's."""
    app = sk.App("t")

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        left, right = b.stream("left"), b.stream("right")
        if skip:
            left, right = (s.filter(lambda key, value: value != "skip") for s in (left, right))
        operation = {"inner": left.join, "left": left.left_join, "outer": left.outer_join}[how]
        operation(right, joiner, windows, name="j", late_records_topic=late_records_topic).to("out")
    return app


def read(driver: TopologyTestDriver, topic: str = "out") -> List[Output]:
    return [(r.key, r.value, r.timestamp) for r in driver.output_topic(topic).read_records()]


def run_steps(driver: TopologyTestDriver, steps: Sequence[Step]) -> None:
    """Pipe each step's record and compare what it made the join write, step by step."""
    topics = {"L": driver.input_topic("left"), "R": driver.input_topic("right")}
    actual, expected = [], []
    for side, key, value, timestamp, outputs in steps:
        topics[side].pipe_input(key, value, timestamp)
        actual.append(((side, key, value, timestamp), read(driver)))
        expected.append(((side, key, value, timestamp), list(outputs)))
    assert actual == expected


# -- inner join -----------------------------------------------------------------------------

INNER_CASES = [
    pytest.param(W10, [
        ("L", "a", "A1", 100, []),
        ("R", "a", "a1", 105, [("a", "A1+a1", 105)]),
        ("R", "b", "b1", 106, []),
        ("L", "b", "B1", 107, [("b", "B1+b1", 107)]),
        ("L", "c", "C1", 108, []),
        ("R", "a", "a2", 110, [("a", "A1+a2", 110)]),
    ], 0, id="in-order-same-key-joins-other-keys-do-not"),
    pytest.param(W10, [
        ("L", "a", "A1", 100, []),
        ("R", "a", "a1", 111, []),                                  # 11 ms after A1
        ("L", "a", "A2", 121, [("a", "A2+a1", 121)]),               # 10 ms after a1
        ("R", "a", "a2", 132, []),                                  # 11 ms after A2
    ], 0, id="in-order-one-ms-outside-the-window-no-join"),
    pytest.param(W10, [
        ("R", "a", "a1", 100, []),
        ("L", "a", "A1", 95, [("a", "A1+a1", 100)]),                # out of order; result at the later time
        ("L", "a", "A2", 108, [("a", "A2+a1", 108)]),
        ("R", "a", "a2", 99, [("a", "A1+a2", 99), ("a", "A2+a2", 108)]),
    ], 0, id="out-of-order-inside-window-result-at-the-later-timestamp"),
    pytest.param(W10_NEVER_LATE, [
        ("R", "a", "r89", 89, []), ("R", "a", "r90", 90, []), ("R", "a", "r110", 110, []),
        ("R", "a", "r111", 111, []),
        ("L", "a", "A", 100, [("a", "A+r90", 100), ("a", "A+r110", 110)]),
    ], 0, id="left-record-bounds-t-minus-and-plus-d-inclusive"),
    pytest.param(W10_NEVER_LATE, [
        ("L", "a", "l89", 89, []), ("L", "a", "l90", 90, []), ("L", "a", "l110", 110, []),
        ("L", "a", "l111", 111, []),
        ("R", "a", "r", 100, [("a", "l90+r", 100), ("a", "l110+r", 110)]),
    ], 0, id="right-record-bounds-t-minus-and-plus-d-inclusive"),
    pytest.param(AFTER_ONLY, [
        ("R", "a", "r99", 99, []), ("R", "a", "r100", 100, []), ("R", "a", "r110", 110, []),
        ("R", "a", "r111", 111, []),
        ("L", "a", "A", 100, [("a", "A+r100", 100), ("a", "A+r110", 110)]),
    ], 0, id="before-0-after-10-left-joins-right-in-t-to-t-plus-10"),
    pytest.param(AFTER_ONLY, [
        ("L", "a", "l89", 89, []), ("L", "a", "l90", 90, []), ("L", "a", "l100", 100, []),
        ("L", "a", "l101", 101, []),
        ("R", "a", "r", 100, [("a", "l90+r", 100), ("a", "l100+r", 100)]),
    ], 0, id="before-0-after-10-right-joins-left-in-t-minus-10-to-t"),
    pytest.param(BEFORE_ONLY, [
        ("R", "a", "r89", 89, []), ("R", "a", "r90", 90, []), ("R", "a", "r100", 100, []),
        ("R", "a", "r101", 101, []),
        ("L", "a", "A", 100, [("a", "A+r90", 100), ("a", "A+r100", 100)]),
    ], 0, id="before-10-after-0-left-joins-right-in-t-minus-10-to-t"),
    pytest.param(BEFORE_ONLY, [
        ("L", "a", "l99", 99, []), ("L", "a", "l100", 100, []), ("L", "a", "l110", 110, []),
        ("L", "a", "l111", 111, []),
        ("R", "a", "r", 100, [("a", "l100+r", 100), ("a", "l110+r", 110)]),
    ], 0, id="before-10-after-0-right-joins-left-in-t-to-t-plus-10"),
    pytest.param(W10_NEVER_LATE.before(5 * MS).after(20 * MS), [
        ("R", "a", "r94", 94, []), ("R", "a", "r95", 95, []), ("R", "a", "r120", 120, []),
        ("R", "a", "r121", 121, []),
        ("L", "a", "A", 100, [("a", "A+r95", 100), ("a", "A+r120", 120)]),
        ("L", "b", "l79", 79, []), ("L", "b", "l80", 80, []), ("L", "b", "l105", 105, []),
        ("L", "b", "l106", 106, []),
        ("R", "b", "r", 100, [("b", "l80+r", 100), ("b", "l105+r", 105)]),
    ], 0, id="before-5-after-20-both-sides"),
    pytest.param(ZERO, [
        ("R", "a", "r99", 99, []), ("R", "a", "r100", 100, []), ("R", "a", "r101", 101, []),
        ("L", "a", "A", 100, [("a", "A+r100", 100)]),
    ], 0, id="zero-window-joins-equal-timestamps-only"),
    pytest.param(W10_GRACE5, [
        ("R", "a", "r", 100, []),
        ("R", "b", "x", 125, []),                                   # stream time 125
        ("L", "a", "A", 110, [("a", "A+r", 110)]),                  # the right buffer keeps >= 125 - 25
        ("L", "a", "A2", 109, [("a", "A2+r", 109)]),                # its own window closed: it joins all the same
        ("R", "a", "r2", 110, [("a", "A2+r2", 110), ("a", "A+r2", 110)]),
        ("R", "a", "r3", 109, [("a", "A2+r3", 109), ("a", "A+r3", 110)]),
        ("R", "a", "r4", 99, [("a", "A2+r4", 109)]),                # not buffered (99 < 125 - 25), joins A2
        ("R", "a", "r5", 95, []),                                   # not buffered, no partner: late
    ], 1, id="out-of-order-records-join-what-the-other-buffer-keeps"),
    pytest.param(W10, [
        ("R", "a", "r", 100, []),
        ("R", "b", "x", 125, []),
        ("L", "a", "A", 110, []),                                   # r (100 < 125 - 20) is gone; A is buffered
        ("R", "a", "r2", 120, [("a", "A+r2", 120)]),
    ], 0, id="no-grace-an-expired-partner-is-gone-the-record-is-buffered"),
    pytest.param(BEFORE10_AFTER0, [
        ("R", "a", "r1", 100, []),
        ("L", "a", "A", 99, []),                                    # r1 is after A's window [89, 99]; buffered
        ("L", "a", "B", 100, [("a", "B+r1", 100)]),
        ("R", "a", "r2", 91, [("a", "A+r2", 99), ("a", "B+r2", 100)]),
        ("R", "a", "r3", 89, [("a", "A+r3", 99)]),                  # not buffered (89 < 100 - 10), joins A
        ("L", "a", "C", 89, []),                                    # r3 was not buffered: late
    ], 1, id="asymmetric-buffers-keep-before-plus-after-plus-grace"),
    pytest.param(AFTER10_BEFORE0, [
        ("L", "a", "A", 100, []),
        ("R", "a", "r1", 99, []),                                   # A is after r1's window [89, 99]
        ("R", "a", "r2", 100, [("a", "A+r2", 100)]),
        ("L", "a", "B", 90, [("a", "B+r1", 99), ("a", "B+r2", 100)]),
        ("L", "a", "C", 89, [("a", "C+r1", 99)]),                   # not buffered (89 < 100 - 10), joins r1
    ], 0, id="before-0-out-of-order-records-on-both-sides-join"),
    pytest.param(W10, [
        ("L", "a", "A1", 100, []),
        ("L", "a", "A2", 100, []),                                  # same key and timestamp: both kept
        ("R", "a", "r1", 100, [("a", "A1+r1", 100), ("a", "A2+r1", 100)]),
        ("R", "a", "r2", 100, [("a", "A1+r2", 100), ("a", "A2+r2", 100)]),
        ("L", "a", "A1", 100, [("a", "A1+r1", 100), ("a", "A1+r2", 100)]),   # an exact duplicate too
    ], 0, id="duplicates-are-all-kept-in-arrival-order"),
    pytest.param(W10, [
        ("R", "a", "r103", 103, []), ("R", "a", "r101", 101, []), ("R", "a", "r102", 102, []),
        ("R", "a", "r101b", 101, []), ("R", "b", "x", 101, []),
        ("L", "a", "A", 100, [("a", "A+r101", 101), ("a", "A+r101b", 101), ("a", "A+r102", 102),
                              ("a", "A+r103", 103)]),
    ], 0, id="many-partners-by-partner-timestamp-then-arrival"),
    pytest.param(W10, [
        ("L", "a", "A", 100, []),
        ("L", "b", "B", 101, []),
        ("R", "c", "c", 102, []),
        ("R", "b", "b", 103, [("b", "B+b", 103)]),
        ("R", "a", "a", 104, [("a", "A+a", 104)]),
        ("L", "c", "C", 105, [("c", "C+c", 105)]),
        ("L", "b", "B2", 106, [("b", "B2+b", 106)]),
    ], 0, id="multiple-keys-interleaved"),
]


@pytest.mark.parametrize("windows, steps, late", INNER_CASES)
def test_inner_join(windows: sk.JoinWindows, steps: List[Step], late: int) -> None:
    driver = TopologyTestDriver(join_app("inner", windows))
    run_steps(driver, steps)
    assert driver.metrics()["late_records_dropped"] == late
    assert driver.metrics()["null_key_records_dropped"] == 0


# -- left join ------------------------------------------------------------------------------

LEFT_CASES = [
    # A left record without a partner is emitted once stream time passes its own window's
    # end plus grace, t + after + grace (Kafka Streams 4.1's rule).
    pytest.param(W10, [
        ("L", "a", "A", 100, []),                                   # closes at 100 + 10 + 0 + 1 = 111
        ("R", "b", "x", 110, []),                                   # A's own window [90, 110]: not yet
        ("R", "b", "y", 111, [("a", "A+None", 100)]),               # stream time 111: emitted, own timestamp
        ("R", "b", "z", 200, []),                                   # once only
    ], 0, id="unmatched-emitted-exactly-at-close-not-one-ms-earlier"),
    pytest.param(W10_GRACE5, [
        ("L", "a", "A", 100, []),                                   # closes at 100 + 10 + 5 + 1 = 116
        ("R", "b", "x", 115, []),
        ("R", "b", "y", 116, [("a", "A+None", 100)]),
    ], 0, id="grace-delays-the-unmatched-result"),
    pytest.param(W10_GRACE5, [
        ("L", "a", "A", 100, []),
        ("R", "b", "x", 115, []),
        ("R", "a", "r", 110, [("a", "A+r", 110)]),                  # out of order: 110 + 10 + 5 >= 115, on time
        ("R", "b", "y", 126, []),                                   # past A's close (100 + 16): it had a partner
        ("R", "b", "z", 300, []),
    ], 0, id="a-partner-arriving-within-grace-prevents-the-unmatched-result"),
    pytest.param(W10, [
        ("L", "a", "A", 100, []),
        ("R", "a", "r", 110, [("a", "A+r", 110)]),                  # at the edge of A's window
        ("R", "b", "x", 111, []),                                   # A's close
        ("R", "b", "y", 500, []),
    ], 0, id="partner-at-the-window-edge-prevents-the-unmatched-result"),
    pytest.param(W10, [
        ("L", "a", "A", 100, []),
        ("R", "a", "r1", 95, [("a", "A+r1", 100)]),
        ("R", "a", "r2", 108, [("a", "A+r2", 108)]),
        ("L", "z", "Z", 400, []),                                   # A's close long passed: no "A+None"
    ], 0, id="matched-left-record-gives-only-joined-results"),
    pytest.param(W10, [
        ("L", "a", "A", 100, []),                                   # closes at 111
        ("R", "b", "r", 105, []),                                   # a right record alone emits nothing
        ("L", "b", "B", 111, [("a", "A+None", 100), ("b", "B+r", 111)]),   # B joins r (105 in [101, 121])
    ], 0, id="unmatched-results-come-before-the-triggering-records-own-join"),
    pytest.param(W10, [
        ("R", "a", "r", 100, []),
        ("L", "c", "C", 300, []),                                   # r would have closed at 111: nothing
        ("R", "b", "s", 310, []),
        ("R", "b", "s2", 311, [("c", "C+None", 300)]),              # C's close: 300 + 11
    ], 0, id="right-records-without-partner-emit-nothing"),
    pytest.param(W10, [
        ("L", "a", "A1", 100, []),
        ("L", "b", "B", 102, []),
        ("L", "a", "A2", 104, []),
        ("R", "z", "x", 200, [("a", "A1+None", 100), ("b", "B+None", 102), ("a", "A2+None", 104)]),
    ], 0, id="several-unmatched-closed-by-one-record-in-timestamp-order"),
    pytest.param(W10, [
        ("L", "a", "A1", 100, []),
        ("L", "a", "A2", 100, []),
        ("R", "z", "x", 110, []),
        ("R", "z", "y", 111, [("a", "A1+None", 100), ("a", "A2+None", 100)]),
    ], 0, id="duplicate-unmatched-records-each-give-a-result"),
    pytest.param(W10, [
        ("L", "a", "A1", 100, []),
        ("L", "a", "A2", 100, []),
        ("R", "a", "r", 100, [("a", "A1+r", 100), ("a", "A2+r", 100)]),   # both duplicates matched
        ("R", "z", "x", 111, []),
    ], 0, id="one-partner-matches-every-duplicate"),
    pytest.param(W10, [
        ("L", "b", "B", 200, []),
        ("L", "a", "A", 100, [("a", "A+None", 100)]),               # its window ended (110 < 200): at once
        ("R", "z", "x", 300, [("b", "B+None", 200)]),
    ], 0, id="a-left-record-after-its-window-ended-is-emitted-unmatched-at-once"),
    pytest.param(sk.JoinWindows.of(100 * MS).after(0 * MS), [
        # after 0: a left record's own window [t - 100, t] ends at t, so it closes at t + 1.
        ("L", "a", "A1", 100, []),
        ("L", "a", "A2", 100, []),
        ("R", "z", "x", 100, []),
        ("R", "z", "y", 101, []),                                   # a right record's scan waits 100 + before 100
        ("L", "w", "W", 101, [("a", "A1+None", 100), ("a", "A2+None", 100)]),
    ], 0, id="after-0-left-record-closes-one-ms-after-its-timestamp"),
    pytest.param(sk.JoinWindows.of(100 * MS).after(0 * MS), [
        # before > after: a right record at 100 is late only once 100 + before < stream
        # time, so it may still come after A's own window [0, 100] has closed and A was
        # emitted unmatched. It joins A all the same: both results stand, as in Kafka Streams.
        ("L", "a", "A", 100, []),
        ("L", "b", "B", 101, [("a", "A+None", 100)]),               # A's close
        ("R", "z", "y", 200, []),                                   # B waits: 101 + before 100 >= 200
        ("R", "a", "r", 100, [("a", "A+r", 100)]),                  # A is still buffered: joins A
        ("R", "z", "w", 201, []),
        ("L", "z", "v", 500, [("b", "B+None", 101)]),
    ], 0, id="before-greater-than-after-a-partner-on-time-after-the-unmatched-result-joins-too"),
    pytest.param(sk.JoinWindows.of(100 * MS).before(0 * MS), [
        ("L", "a", "A", 100, []),                                   # closes at 100 + 0 + 100 + 1 = 201
        ("R", "a", "r", 99, []),                                    # A is after r's window [-1, 99]
        ("R", "z", "x", 200, []),
        ("R", "z", "y", 201, [("a", "A+None", 100)]),
    ], 0, id="before-0-a-right-record-before-the-left-one-does-not-match"),
]


@pytest.mark.parametrize("windows, steps, late", LEFT_CASES)
def test_left_join(windows: sk.JoinWindows, steps: List[Step], late: int) -> None:
    driver = TopologyTestDriver(join_app("left", windows))
    run_steps(driver, steps)
    assert driver.metrics()["late_records_dropped"] == late


# -- outer join -----------------------------------------------------------------------------

OUTER_CASES = [
    pytest.param(W10, [
        ("L", "a", "A", 100, []),                                   # closes at 100 + 10 + 1 = 111
        ("R", "b", "r", 103, []),                                   # closes at 103 + 10 + 1 = 114
        ("L", "c", "C", 110, []),                                   # one ms before A's close
        ("R", "c", "x", 111, [("a", "A+None", 100), ("c", "C+x", 111)]),
        ("L", "d", "D", 113, []),                                   # one ms before r's close
        ("L", "d", "D2", 114, [("b", "None+r", 103)]),
    ], 0, id="each-side-unmatched-emitted-exactly-at-its-close"),
    pytest.param(W10_GRACE5, [
        ("R", "a", "r", 100, []),                                   # closes at 100 + 16 = 116
        ("L", "b", "B", 114, []),                                   # closes at 130
        ("L", "a", "A", 109, [("a", "A+r", 109)]),                  # 109 + 10 + 5 >= 114: on time; both matched
        ("L", "b", "B2", 125, []),                                  # past r's (116) and A's (125) close: nothing
        ("L", "b", "B3", 130, [("b", "B+None", 114)]),
    ], 0, id="a-partner-within-grace-prevents-both-unmatched-results"),
    pytest.param(AFTER10_BEFORE0, [
        # before 0: a right record's own window [t - 10, t] ends at t: it closes at t + 0 + 1,
        # while a left record closes at t + 10 + 1. A left partner on time after that joins too.
        ("R", "a", "r", 100, []),                                   # closes at 101
        ("R", "b", "s", 101, [("a", "None+r", 100)]),               # closes at 102
        ("L", "z", "Z", 110, []),                                   # a left scan waits: 101 + after 10 >= 110
        ("L", "a", "A", 100, [("a", "A+r", 100)]),                  # r is still buffered: joins
        ("L", "z", "Z2", 111, []),                                  # A had a partner
        ("L", "z", "Z3", 500, [("b", "None+s", 101), ("z", "Z+None", 110), ("z", "Z2+None", 111)]),
    ], 0, id="asymmetric-each-side-closes-at-its-own-window-end"),
    pytest.param(W10, [
        ("R", "a", "r", 100, []),
        ("L", "a", "A", 105, [("a", "A+r", 105)]),
        ("L", "z", "Z", 500, [])
    ], 0, id="matched-records-never-give-unmatched-results"),
    pytest.param(W10, [
        ("R", "a", "r1", 100, []),                                  # both close at 111
        ("R", "a", "r2", 100, []),
        ("L", "b", "B", 101, []),                                   # closes at 112
        ("L", "z", "Z", 110, []),
        ("L", "z", "Z2", 111, [("a", "None+r1", 100), ("a", "None+r2", 100)]),
        ("L", "z", "Z3", 112, [("b", "B+None", 101)]),
    ], 0, id="duplicate-unmatched-right-records-each-give-a-result"),
    pytest.param(W10, [
        ("L", "b", "B", 200, []),
        ("R", "a", "r", 100, [("a", "None+r", 100)]),               # its window ended (110 < 200): at once
        ("L", "z", "Z", 300, [("b", "B+None", 200)]),
    ], 0, id="a-right-record-after-its-window-ended-is-emitted-unmatched-at-once"),
]


@pytest.mark.parametrize("windows, steps, late", OUTER_CASES)
def test_outer_join(windows: sk.JoinWindows, steps: List[Step], late: int) -> None:
    driver = TopologyTestDriver(join_app("outer", windows))
    run_steps(driver, steps)
    assert driver.metrics()["late_records_dropped"] == late


# -- out-of-order records (Kafka Streams 4.1's rule) ------------------------------------------------

@pytest.mark.parametrize("grace", [0, 3])
@pytest.mark.parametrize("how, expected", [
    ("inner", [("b", "l3+r1", 8)]),
    ("left", [("b", "l3+r1", 8), ("c", "l4+None", 3), ("a", "l2+None", 12)]),
    ("outer", [("b", "l3+r1", 8), ("c", "l4+None", 3), ("a", "l2+None", 12)]),
])
def test_an_out_of_order_record_joins_the_partners_still_buffered(how: str, expected: List[Output],
                                                                    grace: int) -> None:
    """Difference 7: ``right b@8, left a@12, left b@4``: b@4's own window [-3, 11] ended
    before stream time 12, but the right buffer keeps r1 (8 >= 8 - 14 - grace), so they
    join at 8. c@3 has no partner and its window ended: a left or outer join emits it at
    once. a@12 waits until 12 + 7 + grace + 1 and is released by a@30."""
    driver = TopologyTestDriver(join_app(how, sk.JoinWindows.of(7 * MS, grace=grace * MS)))
    driver.input_topic("right").pipe_input("b", "r1", 8)
    for key, value, timestamp in (("a", "l2", 12), ("b", "l3", 4), ("c", "l4", 3), ("a", "l5", 30)):
        driver.input_topic("left").pipe_input(key, value, timestamp)
    assert read(driver) == expected
    assert driver.metrics()["late_records_dropped"] == 0


# -- None keys and values -----------------------------------------------------------------------

@pytest.mark.parametrize("how", ["inner", "left", "outer"])
def test_none_keys_are_joined_with_none_at_once_or_dropped_none_values_ignored(how: str) -> None:
    """As Kafka Streams 3.7+ (KIP-962): a record with a None key can have no partner, so a
    left join emits a left one at once joined with None (an outer join either side's); an
    inner join drops it (counted). A None value joins nothing."""
    driver = TopologyTestDriver(join_app(how, W10))
    run_steps(driver, [
        ("L", None, "A", 100, [] if how == "inner" else [(None, "A+None", 100)]),
        ("R", None, "r", 100, [(None, "None+r", 100)] if how == "outer" else []),
        ("L", "a", None, 100, []),                                  # neither buffered nor waiting
        ("R", "a", None, 100, []),
        ("R", "a", "r", 101, []),                                   # nothing buffered to join
        ("L", "b", "B", 101, []),
        ("R", "b", "s", 101, [("b", "B+s", 101)]),
        ("L", "z", "Z", 200, [("a", "None+r", 101)] if how == "outer" else []),
    ])
    assert driver.metrics()["null_key_records_dropped"] == {"inner": 2, "left": 1, "outer": 0}[how]
    assert driver.metrics()["late_records_dropped"] == 0


# Steps after the waiting record (which is due from stream time 111 on); "due" marks where
# its unmatched result comes out.
_RELEASE_TRIGGERS = {
    # None keys and values move stream time but release nothing; the next record at stream time does.
    "none-key": [("R", None, "n", 111, []), ("L", "b", "B", 111, ["due"])],
    "none-value": [("L", "b", None, 111, []), ("R", "b", "s", 111, ["due"])],
    # An out-of-order record releases nothing, even past the close.
    "out-of-order": [("L", "b", "B", 112, ["due"])],
    "out-of-order-first": [("R", "c", None, 112, []), ("L", "b", "B", 105, []), ("R", "c", "s", 112, ["due"])],
    # A record filtered before the join does not move the join's stream time (Kafka
    # Streams' rule): nothing is released until a record reaching the join gets to 111.
    "filtered-record": [("R", "z", "skip", 111, []), ("L", "c", "C", 110, []), ("R", "d", "s", 111, ["due"])],
}


@pytest.mark.parametrize("how, waiting, result", [
    ("left", ("L", "a", "A", 100), ("a", "A+None", 100)),
    ("outer", ("R", "a", "r", 100), ("a", "None+r", 100)),
], ids=["left", "outer-right-side"])
@pytest.mark.parametrize("trigger", list(_RELEASE_TRIGGERS))
def test_due_unmatched_results_are_released_by_a_keyed_record_at_stream_time(
        how: str, waiting: Tuple[str, str, str, int], result: Output, trigger: str) -> None:
    # The waiting record closes at 100 + 10 + 0 + 1 = 111. Every other record here has its
    # own key and no partner; those still waiting at the end come out at 500.
    driver = TopologyTestDriver(join_app(how, W10, skip=True))
    pending: List[Output] = []

    def outputs(side: str, key: Any, value: Optional[str], timestamp: int, marks: List[str]) -> List[Output]:
        out = [result] if marks else []
        if value is None or value == "skip":
            return out
        own = (key, f"{value}+None" if side == "L" else f"None+{value}", timestamp)
        if key is None:
            if side == "L" or how == "outer":  # joined with None at once (KIP-962)
                out.append(own)
        elif side == "L" or how == "outer":
            pending.append(own)
        return out

    steps = [(*waiting, [])]
    steps.append(("L", None, "n0", 110, outputs("L", None, "n0", 110, [])))  # nothing due yet
    for side, key, value, timestamp, marks in _RELEASE_TRIGGERS[trigger]:
        steps.append((side, key, value, timestamp, outputs(side, key, value, timestamp, marks)))
    run_steps(driver, steps)
    run_steps(driver, [("L", "y", None, 500, []),                                # a None value: nothing
                       ("L", "z", "Z", 500, sorted(pending, key=lambda r: r[2]))])  # each once only
    assert driver.metrics()["late_records_dropped"] == 0


# -- self-join ---------------------------------------------------------------------------------

def _self_join_app(how: str) -> sk.App:
    app = sk.App("t")

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        s = b.stream("in")
        (s.join if how == "inner" else s.left_join)(s, joiner, W10, name="j").to("out")
    return app


def test_self_join_pairs_each_record_with_itself_and_earlier_records_both_ways() -> None:
    driver = TopologyTestDriver(_self_join_app("inner"))
    source = driver.input_topic("in")
    source.pipe_input("a", "X", 100)
    assert read(driver) == [("a", "X+X", 100)]
    # Y as a left record meets X; as a right record it meets X and itself (its left
    # entry runs first, as a join's inputs are wired left, right).
    source.pipe_input("a", "Y", 105)
    assert read(driver) == [("a", "Y+X", 105), ("a", "X+Y", 105), ("a", "Y+Y", 105)]
    source.pipe_input("b", "Z", 106)
    assert read(driver) == [("b", "Z+Z", 106)]
    source.pipe_input("a", "W", 116)                               # 16 and 11 ms after X and Y
    assert read(driver) == [("a", "W+W", 116)]


def test_left_self_join_never_emits_unmatched_results() -> None:
    driver = TopologyTestDriver(_self_join_app("left"))
    source = driver.input_topic("in")
    source.pipe_input("a", "X", 100)
    source.pipe_input("b", "Y", 500)
    source.pipe_input("c", "Z", 1000)
    assert read(driver) == [("a", "X+X", 100), ("b", "Y+Y", 500), ("c", "Z+Z", 1000)]


# -- repartitioned inputs and partition counts -------------------------------------------------

def _orders_payments_app(*, rekey_orders: bool, rekey_payments: bool = False) -> sk.App:
    app = sk.App("t")

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        orders, payments = b.stream("orders"), b.stream("payments")
        if rekey_orders:
            orders = orders.select_key(lambda order_id, order: order["customer"])
        if rekey_payments:
            payments = payments.map(lambda payment_id, p: (p["customer"], p))
        orders.join(payments, lambda o, p: f"{o['n']}+{p['amount']}", W10, name="j").to("out")
    return app


def test_a_rekeyed_side_goes_through_a_repartition_topic_and_joins_on_the_new_key() -> None:
    app = _orders_payments_app(rekey_orders=True)
    assert app.build().repartition_topics == ("t-j-left-repartition",)
    driver = TopologyTestDriver(app)
    orders, payments = driver.input_topic("orders"), driver.input_topic("payments")
    orders.pipe_input("order-1", {"customer": "c1", "n": 1}, 100)
    orders.pipe_input("order-2", {"customer": "c2", "n": 2}, 101)
    payments.pipe_input("c1", {"amount": 5}, 105)
    payments.pipe_input("order-2", {"amount": 6}, 106)             # keyed by order id: no match
    orders.pipe_input("order-3", {"customer": "c1", "n": 3}, 115)
    assert read(driver) == [("c1", "1+5", 105), ("c1", "3+5", 115)]


def test_both_sides_rekeyed_each_get_a_repartition_topic() -> None:
    app = _orders_payments_app(rekey_orders=True, rekey_payments=True)
    assert sorted(app.build().repartition_topics) == ["t-j-left-repartition", "t-j-right-repartition"]
    driver = TopologyTestDriver(app)
    driver.input_topic("orders").pipe_input("order-1", {"customer": "c1", "n": 1}, 100)
    driver.input_topic("payments").pipe_input("pay-9", {"customer": "c1", "amount": 7}, 95)
    assert read(driver) == [("c1", "1+7", 100)]


def test_inputs_with_different_partition_counts_fail_at_build_naming_both() -> None:
    topology = _orders_payments_app(rekey_orders=False).build()
    with pytest.raises(TopologyError, match=r"'orders' \(3 partitions\) and 'payments' \(4 partitions\)|"
                                            r"'payments' \(4 partitions\) and 'orders' \(3 partitions\)"):
        resolve_partitions(topology, {"orders": 3, "payments": 4})
    assert resolve_partitions(topology, {"orders": 4, "payments": 4})["out"] == 4


def test_a_repartitioned_side_takes_the_other_sides_partition_count() -> None:
    counts = resolve_partitions(_orders_payments_app(rekey_orders=True).build(), {"orders": 3, "payments": 5})
    assert counts["t-j-left-repartition"] == 5


def test_two_repartitioned_sides_take_the_larger_upstream_count() -> None:
    counts = resolve_partitions(_orders_payments_app(rekey_orders=True, rekey_payments=True).build(),
                                {"orders": 3, "payments": 5})
    assert counts["t-j-left-repartition"] == counts["t-j-right-repartition"] == 5


# -- late records topic ---------------------------------------------------------------------------

def test_late_records_of_either_side_are_written_raw_to_the_late_topic() -> None:
    """A record too old for its own buffer (more than before + after + grace behind its
    side's time) that finds no partner is late; one that is too old but joins is not."""
    driver = TopologyTestDriver(join_app("inner", W10, late_records_topic="late"))
    left, right = driver.input_topic("left"), driver.input_topic("right")
    left.pipe_input("a", "A", 200)
    left.pipe_input("a", "B", 179, headers=(("trace", b"1"),))     # 179 < 200 - 20, no partner: late
    right.pipe_input("a", "r", 190)                                # joins A
    right.pipe_input("b", "s", 169)                                # 169 < 190 - 20, no partner: late
    right.pipe_input("a", "r2", 169)                               # B in its window was not buffered: late
    left.pipe_input("a", "C", 180)                                 # buffered (180 >= 200 - 20): joins r
    right.pipe_input("a", "r3", 170)                               # at the right buffer's edge: joins C
    left.pipe_input("a", "D", 150)                                 # r2 (169) was not buffered: late
    right.pipe_input("a", "r4", 165)                               # C (180) is after its window [155, 175]: late
    assert read(driver) == [("a", "A+r", 200), ("a", "C+r", 190), ("a", "C+r3", 180)]
    assert driver.metrics()["late_records_dropped"] == 5
    late = driver.output_topic("late", key_serde=Bytes(), value_serde=Bytes()).read_records()
    assert [(r.key, r.value, r.timestamp, dict(r.headers)) for r in late][:2] == [
        (b"a", b'"B"', 179, {
            "trace": b"1", "streamkit.late.node": b"j", "streamkit.late.topic": b"left",
            "streamkit.late.partition": b"0", "streamkit.late.offset": b"1",
            "streamkit.late.timestamp": b"179", "streamkit.late.stream_time": b"200"}),
        (b"b", b'"s"', 169, {
            "streamkit.late.node": b"j", "streamkit.late.topic": b"right",
            "streamkit.late.partition": b"0", "streamkit.late.offset": b"1",
            "streamkit.late.timestamp": b"169", "streamkit.late.stream_time": b"200"}),
    ]


# -- stores and describe() --------------------------------------------------------------------------

@pytest.mark.parametrize("how, stores", [
    ("inner", ["j-left-buffer", "j-right-buffer"]),
    ("left", ["j-left-buffer", "j-right-buffer", "j-unmatched"]),
    ("outer", ["j-left-buffer", "j-right-buffer", "j-unmatched"]),
])
def test_stores_are_named_after_the_join(how: str, stores: List[str]) -> None:
    topology = join_app(how, W10).build()
    assert sorted(topology.stores) == stores
    assert topology.stores["j-left-buffer"].kind == topology.stores["j-right-buffer"].kind == "window"


def test_buffers_hold_each_sides_values_per_key_and_timestamp() -> None:
    driver = TopologyTestDriver(join_app("inner", W10))
    run_steps(driver, [
        ("L", "a", "A1", 100, []), ("L", "a", "A2", 100, []), ("L", "a", "A3", 105, []),
        ("R", "b", "r", 103, []),
    ])
    left, right = driver.store("j-left-buffer"), driver.store("j-right-buffer")
    assert [(w.key, w.start, values) for w, values in left.fetch("a", 0, 1000)] == [
        ("a", 100, ["A1", "A2"]), ("a", 105, ["A3"])]
    assert [(w.key, w.start, values) for w, values in right.fetch("b", 0, 1000)] == [("b", 103, ["r"])]
    assert list(right.fetch("a", 0, 1000)) == []


def test_each_sides_buffer_and_unmatched_values_use_that_sides_value_serde() -> None:
    # Left values are dicts (Json), right values ints (Int): a serde applied to the wrong
    # side would fail to serialize, in the buffers or in the unmatched store.
    app = sk.App("t")

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        left = b.stream("left")
        right = b.stream("right")                                 # Json on the wire, ints in the buffer
        left.outer_join(right, lambda l, r: [l, r], W10, name="j", key_serde=sk.serdes.String(),
                        value_serde=sk.serdes.Json(), other_value_serde=sk.serdes.Int()).to("out")
    driver = TopologyTestDriver(app)
    run_steps(driver, [
        ("L", "a", {"n": 1}, 100, []),
        ("R", "a", 7, 105, [("a", [{"n": 1}, 7], 105)]),
        ("L", "b", {"n": 2}, 106, []),
        ("R", "c", 8, 107, []),
        ("L", "a", {"n": 3}, 115, [("a", [{"n": 3}, 7], 115)]),
    ])
    assert driver.store("j-right-buffer").get("a", 105) == [7]
    assert driver.store("j-left-buffer").get("b", 106) == [{"n": 2}]
    run_steps(driver, [
        ("R", "z", 9, 127, [("b", [{"n": 2}, None], 106), ("c", [None, 8], 107)]),  # closed at 117, 118
    ])


def test_describe_shows_the_join_its_windows_and_stores() -> None:
    text = join_app("outer", sk.JoinWindows.of(10 * MS, grace=5 * MS).before(3 * MS)).describe()
    assert ("Processor: j (outer join of streams, JoinWindows(before=3ms, after=10ms, grace=5ms), "
            "stores: [j-left-buffer, j-right-buffer, j-unmatched])") in text
    assert "<-- left, right" in text
    for store in ("j-left-buffer (window", "j-right-buffer (window", "j-unmatched (key_value"):
        assert store in text


# -- build-time errors ------------------------------------------------------------------------------

def _join_without_windows(b: sk.StreamsBuilder) -> None:
    b.stream("left").join(b.stream("right"), joiner)


def _left_join_without_windows(b: sk.StreamsBuilder) -> None:
    b.stream("left").left_join(b.stream("right"), joiner)


def _outer_join_with_a_table(b: sk.StreamsBuilder) -> None:
    b.stream("left").outer_join(b.table("right"), joiner, W10)


def _key_selector_with_a_stream(b: sk.StreamsBuilder) -> None:
    b.stream("left").join(b.stream("right"), joiner, W10, key_selector=lambda k, v: k)


def _one_argument_joiner(b: sk.StreamsBuilder) -> None:
    b.stream("left").join(b.stream("right"), lambda value: value, W10)


def _three_argument_joiner(b: sk.StreamsBuilder) -> None:
    b.stream("left").outer_join(b.stream("right"), lambda key, value, other: value, W10)


def _tumbling_windows(b: sk.StreamsBuilder) -> None:
    b.stream("left").join(b.stream("right"), joiner, sk.TumblingWindows(size=10 * MS))


@pytest.mark.parametrize("build, fragments", [
    (_join_without_windows, ["left.join", "needs windows", "JoinWindows"]),
    (_left_join_without_windows, ["left.left_join", "needs windows"]),
    (_outer_join_with_a_table, ["left.outer_join"]),
    (_key_selector_with_a_stream, ["left.join", "key_selector"]),
    (_one_argument_joiner, ["left.join", "joiner", "(value, other_value)"]),
    (_three_argument_joiner, ["left.outer_join", "joiner", "(value, other_value)"]),
    (_tumbling_windows, ["left.join", "JoinWindows"]),
], ids=["join-no-windows", "left-join-no-windows", "outer-join-table", "key-selector-stream",
        "joiner-one-arg", "joiner-three-args", "tumbling-windows"])
def test_bad_arguments_fail_at_build(build: Callable[[sk.StreamsBuilder], None], fragments: List[str]) -> None:
    app = sk.App("t")
    app.topology(build)
    with pytest.raises(TopologyError) as info:
        app.build()
    for fragment in fragments:
        assert fragment in str(info.value)


# -- property test: the driver against a brute-force model of the spec -------------------------------

@dataclass
class _Record:
    side: str
    key: str
    value: str
    timestamp: int
    seq: int


Input = Tuple[str, Optional[str], Optional[str], int]


def brute_force(how: str, windows: sk.JoinWindows, inputs: Sequence[Input]
                ) -> Tuple[List[Tuple[List[Output], List[Output]]], int, int]:
    """Per input record: (unmatched results it releases, its own join results); the late
    count and the None-key count. Straight from the spec, with lists for buffers:

    - stream time: the largest timestamp of the records reaching the join (records with
      value "skip" are filtered out before it and move nothing); each side's time: the
      largest timestamp of its records with a key (None values too);
    - a None-key record of a side that waits for partners is joined with None at once
      (Kafka Streams 3.7+); other None keys and None values join nothing;
    - a record joins the other side's buffered records of its key in its window that are at
      most before + after + grace behind the other side's time, and is buffered if it is at
      most that much behind its own side's time;
    - a record of a waiting side without partners is emitted at once if ``t + after`` (left;
      right: ``t + before``) is behind stream time, else waits until stream time reaches
      that plus grace plus 1; a partner takes out every waiting record of its side, key and
      timestamp;
    - waiting records are released by a keyed, valued record at stream time, unless the
      earliest waiting timestamp (as of the last release, lowered by every record waiting
      since) plus the arriving side's reach plus grace is not behind stream time;
    - a record neither buffered nor giving any result is late."""
    before, after, grace = windows.before_ms, windows.after_ms, windows.grace_ms
    kept_for = before + after + grace
    reach = {"L": after, "R": before}
    waits = {"inner": "", "left": "L", "outer": "LR"}[how]
    buffers: Dict[str, List[_Record]] = {"L": [], "R": []}
    side_time = {"L": -1, "R": -1}
    waiting: List[_Record] = []
    earliest = None  # None: unknown, look
    stream_time, late, null_keys = -1, 0, 0
    steps: List[Tuple[List[Output], List[Output]]] = []
    for seq, (side, key, value, timestamp) in enumerate(inputs):
        if value == "skip":
            steps.append(([], []))
            continue
        stream_time = max(stream_time, timestamp)
        if key is None:
            if value is not None and side in waits:  # no partner possible: at once
                steps.append(([], [(None, joiner(value, None) if side == "L" else joiner(None, value),
                                    timestamp)]))
            else:
                null_keys += 1
                steps.append(([], []))
            continue
        side_time[side] = max(side_time[side], timestamp)
        if value is None:
            steps.append(([], []))
            continue
        released: List[Output] = []
        if timestamp == stream_time and (earliest is None or earliest + reach[side] + grace < stream_time):
            closed = sorted((w for w in waiting if w.timestamp + reach[w.side] + grace + 1 <= stream_time),
                            key=lambda w: (w.timestamp, w.seq))
            waiting = [w for w in waiting if w not in closed]
            released = [(w.key, joiner(w.value, None) if w.side == "L" else joiner(None, w.value), w.timestamp)
                        for w in closed]
            earliest = min((w.timestamp for w in waiting), default=2**63)
        other = "R" if side == "L" else "L"
        low, high = ((timestamp - before, timestamp + after) if side == "L"
                     else (timestamp - after, timestamp + before))
        low = max(low, side_time[other] - kept_for)
        partners = sorted((r for r in buffers[other] if r.key == key and low <= r.timestamp <= high),
                          key=lambda r: (r.timestamp, r.seq))
        joined = [(key, joiner(value, p.value) if side == "L" else joiner(p.value, value),
                   max(timestamp, p.timestamp)) for p in partners]
        taken = {(p.key, p.timestamp) for p in partners}
        waiting = [w for w in waiting if w.side == side or (w.key, w.timestamp) not in taken]
        record = _Record(side, key, value, timestamp, seq)
        buffered = timestamp >= side_time[side] - kept_for
        if buffered:
            buffers[side].append(record)
        if side in waits and not partners:
            if timestamp + reach[side] < stream_time:
                joined = [(key, joiner(value, None) if side == "L" else joiner(None, value), timestamp)]
            else:
                waiting.append(record)
                earliest = timestamp if earliest is None else min(earliest, timestamp)
        if not buffered and not joined and record not in waiting:
            late += 1
        steps.append((released, joined))
    return steps, late, null_keys


def _random_case(rng: random.Random) -> Tuple[sk.JoinWindows, List[Input]]:
    after = rng.randint(0, 6)
    before = rng.randint(0, 6)
    if after and rng.random() < 0.15:
        before = -rng.randint(1, after)                              # a window starting after the record
    windows = sk.JoinWindows(before, after, rng.choice([0, 0, 1, 3, 5]))
    inputs: List[Input] = []
    clock = 0
    for i in range(rng.randint(1, 30)):
        clock += rng.randint(0, 3)
        timestamp = max(0, clock - rng.choice([0, 0, 0, 1, 2, 4, 8, 12]))   # some disorder
        side = rng.choice("LR")
        key: Optional[str] = rng.choice("abc")
        value: Optional[str] = f"{side}{i}"
        odd = rng.random()
        if odd < 0.05:
            key = None                                               # dropped by the join, counted
        elif odd < 0.10:
            value = None                                             # ignored by the join
        elif odd < 0.18:
            value = "skip"                                           # filtered before the join: moves only the task's time
        inputs.append((side, key, value, timestamp))
    return windows, inputs


@pytest.mark.parametrize("how", ["inner", "left", "outer"])
def test_random_sequences_match_the_brute_force_model(how: str) -> None:
    rng = random.Random(20240611)
    for case in range(300):
        windows, inputs = _random_case(rng)
        model_steps, model_late, model_null_keys = brute_force(how, windows, inputs)
        driver = TopologyTestDriver(join_app(how, windows, skip=True))
        topics = {"L": driver.input_topic("left"), "R": driver.input_topic("right")}
        for index, ((side, key, value, timestamp), (released, joined)) in enumerate(zip(inputs, model_steps)):
            topics[side].pipe_input(key, value, timestamp)
            out = read(driver)
            # Released results come in timestamp order; ties (side, key) are not pinned: compare
            # the timestamps in order and the results as a multiset.
            got = ([t for _, _, t in out[:len(released)]], Counter(out[:len(released)]), out[len(released):])
            expected = ([t for _, _, t in released], Counter(released), joined)
            context = f"case {case}: {windows}, inputs {inputs}, step {index}"
            assert got == expected, context
        metrics = driver.metrics()
        assert metrics["late_records_dropped"] == model_late, f"case {case}: {windows}, inputs {inputs}"
        assert metrics["null_key_records_dropped"] == model_null_keys, f"case {case}: {windows}, inputs {inputs}"


def test_the_random_cases_exercise_what_they_are_meant_to() -> None:
    # Guard against a generator that no longer reaches the interesting paths.
    rng = random.Random(20240611)
    seen = Counter()
    for _ in range(300):
        windows, inputs = _random_case(rng)
        kept_for = windows.before_ms + windows.after_ms + windows.grace_ms
        for how in ("left", "outer"):
            steps, late, null_keys = brute_force(how, windows, inputs)
            seen["late"] += late
            stream_time, side_time = -1, {"L": -1, "R": -1}
            for (side, key, value, timestamp), (released, joined) in zip(inputs, steps):
                if value == "skip":
                    continue
                stream_time = max(stream_time, timestamp)
                if key is not None:
                    side_time[side] = max(side_time[side], timestamp)
                if released:
                    seen["released"] += 1
                    seen["released-with-joins"] += bool(joined)
                    seen["released-several"] += len(released) > 1
                if key is not None and value is not None:
                    at_once = [r for r in joined if r[1] in (f"{value}+None", f"None+{value}")]
                    seen["unmatched-at-once"] += bool(at_once)
                    not_buffered = timestamp < side_time[side] - kept_for
                    seen["not-buffered-but-joined"] += not_buffered and bool(joined) and not at_once
        seen["null-keys"] += sum(key is None for _side, key, _value, _ts in inputs)
    for what in ("late", "released", "released-with-joins", "released-several", "unmatched-at-once",
                 "not-buffered-but-joined", "null-keys"):
        assert seen[what] >= 5, (what, seen)


def test_kafka_streams_outer_join_example_emits_the_unmatched_right_record_at_its_own_close() -> None:
    """Issue 18's case: outer join, difference 3, ``right r4@0, right r5@5``: Kafka Streams 4.1
    emits the unmatched r4 once stream time passes 0 + before 3 + grace 0."""
    driver = TopologyTestDriver(join_app("outer", sk.JoinWindows.of(3 * MS)))
    run_steps(driver, [
        ("R", "k", "r4", 0, []),
        ("R", "k", "r5", 5, [("k", "None+r4", 0)]),
    ])
