"""Session windows through the TopologyTestDriver: count, reduce and aggregate with a merger.

Semantics under test (Kafka Streams'): a session is ``[first, last]``, both ends
inclusive. A record at ``t`` merges every session of its key with ``end >= t - gap``
and ``start <= t + gap`` into one session with itself. Merged-away sessions are
deleted and retracted downstream (value ``None`` under their old ``Windowed`` key)
before the merged session is emitted; a session whose bounds do not change is updated
in place (no retraction). A record is late (dropped, counted) when the merged session
is closed: stream time >= end + 1 + grace. Every result is timestamped with its
session's end. Count merges by adding, reduce merges with the reducer, aggregate with
the merger.

The tables give each session's content as the sorted list of its records' timestamps
(the reduce concatenates ``[t]`` values); counts are the lengths of those lists.
"""
from __future__ import annotations

import random
from datetime import timedelta
from typing import Dict, List, Optional, Sequence, Tuple

import pytest

import streamkit as sk
from streamkit.testing import TopologyTestDriver

MS = timedelta(milliseconds=1)
W = sk.Windowed
Session = Tuple[int, int]
BIG_GRACE = 1_000_000   # ms: nothing is ever late in the tests that use it
RETENTION = 10**13      # ms: keep every session queryable
GAP = 5                 # the inactivity gap of the hand-written cases, in ms


def session_driver(gap: int, grace: int, *, retention: Optional[int] = RETENTION,
                   merger_calls: Optional[list] = None) -> TopologyTestDriver:
    """in -> group_by_key -> sessions(gap, grace) -> count ("cnt"), reduce ("red") and
    aggregate ("agg"), each to "<name>-out". The reduce and the aggregate build sorted lists
    of the list values, so a session's value names its records; the aggregate's merger is the
    only function that accepts two aggregates (the aggregator would nest a list)."""
    app = sk.App("session-test")
    windows = sk.SessionWindows(inactivity_gap=gap * MS, grace=grace * MS)
    options = {} if retention is None else {"retention": retention * MS}

    def merger(key, agg1, agg2):
        if merger_calls is not None:
            merger_calls.append((key, agg1, agg2))
        return sorted(agg1 + agg2)

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        grouped = b.stream("in").group_by_key()
        grouped.windowed_by(windows).count(name="cnt", **options).to_stream().to("cnt-out")
        grouped.windowed_by(windows).reduce(lambda agg, v: sorted(agg + v), name="red",
                                            **options).to_stream().to("red-out")
        grouped.windowed_by(windows).aggregate(
            lambda: [], lambda key, value, agg: sorted(agg + [value[0]]), merger,
            name="agg", **options).to_stream().to("agg-out")
    return TopologyTestDriver(app)


def pipe(driver: TopologyTestDriver, records: Sequence[Tuple[str, int]]) -> None:
    for key, t in records:
        driver.input_topic("in").pipe_input(key, [t], t)


def sessions_of(driver: TopologyTestDriver, store: str, key: str) -> Dict[Session, object]:
    return {(w.start, w.end): v for w, v in driver.store(store).fetch(key)}


def emitted(driver: TopologyTestDriver, topic: str = "cnt-out") -> List[Tuple[W, object, int]]:
    return [(r.key, r.value, r.timestamp) for r in driver.output_topic(topic).read_records()]


def late_dropped(driver: TopologyTestDriver) -> int:
    """Late records per aggregation: each of the three aggregations drops (and counts) them."""
    total = driver.metrics()["late_records_dropped"]
    assert total % 3 == 0, total
    return total // 3


# --- hand-written cases: final store contents ------------------------------------------------

# (id, grace, [(key, t)] in arrival order, {key: {session: sorted timestamps}}, late records)
CASES = [
    ("new sessions per key and far apart", BIG_GRACE, [("a", 0), ("b", 0), ("a", 100)],
     {"a": {(0, 0): [0], (100, 100): [100]}, "b": {(0, 0): [0]}}, 0),
    ("extension to the right", BIG_GRACE, [("a", 0), ("a", 3), ("a", 8)],
     {"a": {(0, 8): [0, 3, 8]}}, 0),
    ("extension to the left", BIG_GRACE, [("a", 10), ("a", 6), ("a", 1)],
     {"a": {(1, 10): [1, 6, 10]}}, 0),
    ("a bridging record merges two sessions", BIG_GRACE, [("a", 0), ("a", 10), ("a", 5)],
     {"a": {(0, 10): [0, 5, 10]}}, 0),
    ("a bridging record merges into an existing multi-record session", BIG_GRACE,
     [("a", 0), ("a", 10), ("a", 20), ("a", 5), ("a", 15)],
     {"a": {(0, 20): [0, 5, 10, 15, 20]}}, 0),
    ("a record inside a session does not change its bounds", BIG_GRACE, [("a", 0), ("a", 4), ("a", 2)],
     {"a": {(0, 4): [0, 2, 4]}}, 0),
    ("duplicate timestamps", BIG_GRACE, [("a", 3), ("a", 3)],
     {"a": {(3, 3): [3, 3]}}, 0),
    ("exactly gap apart: one session", BIG_GRACE, [("a", 0), ("a", 5)],
     {"a": {(0, 5): [0, 5]}}, 0),
    ("exactly gap apart, out of order", BIG_GRACE, [("a", 5), ("a", 0)],
     {"a": {(0, 5): [0, 5]}}, 0),
    ("gap + 1 apart: two sessions", BIG_GRACE, [("a", 0), ("a", 6)],
     {"a": {(0, 0): [0], (6, 6): [6]}}, 0),
    ("gap + 1 apart, out of order", BIG_GRACE, [("a", 6), ("a", 0)],
     {"a": {(0, 0): [0], (6, 6): [6]}}, 0),
    ("gap + 1 from both neighbours: three sessions", BIG_GRACE, [("a", 0), ("a", 12), ("a", 6)],
     {"a": {(0, 0): [0], (6, 6): [6], (12, 12): [12]}}, 0),
    ("keys never merge", BIG_GRACE, [("a", 0), ("b", 3), ("a", 6), ("b", 8)],
     {"a": {(0, 0): [0], (6, 6): [6]}, "b": {(3, 8): [3, 8]}}, 0),
    # A session closes when stream time passes end + gap + grace (Kafka Streams): gap 5.
    # grace 5, stream time 100: [89,89] closes at 100: late; [94,94] closes at 105: on time;
    # 95 bridges it and [100,100] into [94,100].
    ("late unless merged into an open session", 5, [("a", 100), ("a", 89), ("a", 94), ("a", 95)],
     {"a": {(94, 100): [94, 95, 100]}}, 1),
    # grace 0, stream time 20: the merged session [0,3] closed at 9.
    ("late when the merged session is closed", 0, [("a", 0), ("b", 20), ("a", 3)],
     {"a": {(0, 0): [0]}, "b": {(20, 20): [20]}}, 1),
    # grace 0, stream time 7: [0,0] closed at 6; a@4 starts [4,4] beside it (closes at 10).
    ("a record within the gap of a closed session starts a new one beside it", 0,
     [("a", 0), ("b", 7), ("a", 4)],
     {"a": {(0, 0): [0], (4, 4): [4]}, "b": {(7, 7): [7]}}, 0),
    # grace 2: [10,10] closes at 18. At stream time 17 another 10 joins it; at 18 a third is
    # late, while 11 starts [11,11] beside the closed [10,10] (it closes at 19): on time.
    ("late boundary is exact", 2, [("a", 10), ("b", 17), ("a", 10), ("b", 18), ("a", 10), ("a", 11)],
     {"a": {(10, 10): [10, 10], (11, 11): [11]}, "b": {(17, 18): [17, 18]}}, 1),
    # Kafka Streams 4.1 (gap 3, grace 5; here gap 5, grace 3): c@8 then c@0 is on time, since
    # [0,0] closes at 0 + 5 + 3 + 1 = 9.
    ("on time until end + gap + grace", 3, [("c", 8), ("c", 0)],
     {"c": {(0, 0): [0], (8, 8): [8]}}, 0),
]


@pytest.mark.parametrize("grace, records, expected, late", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_final_store_contents(grace, records, expected, late):
    driver = session_driver(GAP, grace)
    pipe(driver, records)
    for key, sessions in expected.items():
        assert sessions_of(driver, "red", key) == sessions
        assert sessions_of(driver, "agg", key) == sessions
        assert sessions_of(driver, "cnt", key) == {s: len(ts) for s, ts in sessions.items()}
    assert late_dropped(driver) == late


def test_tables_without_lateness_agree_with_the_model():
    for name, grace, records, expected, late in CASES:
        if grace == BIG_GRACE:
            for key, sessions in expected.items():
                assert sessionize([t for k, t in records if k == key], GAP) == sessions, name


# --- hand-written cases: exact emitted sequences ---------------------------------------------

def test_new_sessions_are_emitted_timestamped_with_their_end():
    driver = session_driver(GAP, BIG_GRACE)
    pipe(driver, [("a", 0), ("b", 0), ("a", 100)])
    assert emitted(driver) == [(W("a", 0, 0), 1, 0), (W("b", 0, 0), 1, 0), (W("a", 100, 100), 1, 100)]


def test_extension_retracts_the_old_session_then_emits_the_new_one():
    driver = session_driver(GAP, BIG_GRACE)
    pipe(driver, [("a", 0)])
    emitted(driver)
    pipe(driver, [("a", 3)])
    assert emitted(driver) == [(W("a", 0, 0), None, 0), (W("a", 0, 3), 2, 3)]
    pipe(driver, [("a", 1)])  # inside [0,3]: updated in place
    assert emitted(driver) == [(W("a", 0, 3), 3, 3)]


def test_bridging_record_retracts_both_sessions():
    driver = session_driver(GAP, BIG_GRACE)
    pipe(driver, [("a", 0), ("a", 10)])
    assert emitted(driver) == [(W("a", 0, 0), 1, 0), (W("a", 10, 10), 1, 10)]
    pipe(driver, [("a", 5)])
    assert emitted(driver) == [(W("a", 0, 0), None, 0), (W("a", 10, 10), None, 10), (W("a", 0, 10), 3, 10)]
    assert emitted(driver, "red-out") == [
        (W("a", 0, 0), [0], 0), (W("a", 10, 10), [10], 10),
        (W("a", 0, 0), None, 0), (W("a", 10, 10), None, 10), (W("a", 0, 10), [0, 5, 10], 10)]


def test_out_of_order_record_inside_a_session_emits_no_tombstone():
    driver = session_driver(GAP, BIG_GRACE)
    pipe(driver, [("a", 0), ("a", 4), ("a", 8)])
    emitted(driver)
    pipe(driver, [("a", 2), ("a", 8), ("a", 0)])
    assert emitted(driver) == [(W("a", 0, 8), 4, 8), (W("a", 0, 8), 5, 8), (W("a", 0, 8), 6, 8)]
    assert emitted(driver, "agg-out")[-1] == (W("a", 0, 8), [0, 0, 2, 4, 8, 8], 8)


def test_late_records_emit_nothing():
    driver = session_driver(GAP, 5)
    pipe(driver, [("a", 100)])
    emitted(driver)
    pipe(driver, [("a", 88), ("a", 89)])  # [88,88] and [89,89] close at 99 and 100
    assert emitted(driver) == [] and late_dropped(driver) == 2
    pipe(driver, [("a", 95)])
    assert emitted(driver) == [(W("a", 100, 100), None, 100), (W("a", 95, 100), 2, 100)]


def sum_driver(grace: int = 0, retention: Optional[int] = RETENTION) -> TopologyTestDriver:
    """Sessions(GAP, grace) summing int values with reduce ("sum" -> sum-out)."""
    app = sk.App("session-reduce")
    options = {} if retention is None else {"retention": retention * MS}

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        b.stream("in").group_by_key().windowed_by(
            sk.SessionWindows(inactivity_gap=GAP * MS, grace=grace * MS)).reduce(
            lambda agg, v: agg + v, name="sum", **options).to_stream().to("sum-out")
    return TopologyTestDriver(app)


def test_reduce_merges_sessions_with_the_reducer():
    driver = sum_driver(grace=10)  # [0,0] is still open at stream time 10
    topic = driver.input_topic("in")
    topic.pipe_input("a", 1, 0)
    topic.pipe_input("a", 10, 10)
    topic.pipe_input("a", 100, 5)
    assert emitted(driver, "sum-out") == [
        (W("a", 0, 0), 1, 0), (W("a", 10, 10), 10, 10),
        (W("a", 0, 0), None, 0), (W("a", 10, 10), None, 10), (W("a", 0, 10), 111, 10)]
    assert driver.store("sum").fetch_session("a", 0, 10) == 111


def test_a_none_value_counts_and_reaches_the_aggregator_a_none_key_is_skipped():
    """As in Kafka Streams 4.1 (KStreamSessionWindowAggregate): only a None key is skipped."""
    app = sk.App("session-nulls")

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        grouped = b.stream("in").group_by_key().windowed_by(sk.SessionWindows(inactivity_gap=GAP * MS))
        grouped.count(name="cnt").to_stream().to("cnt-out")
        grouped.aggregate(lambda: [], lambda key, value, agg: agg + [value], lambda k, a, b: a + b,
                          name="agg").to_stream().to("agg-out")
    driver = TopologyTestDriver(app)
    topic = driver.input_topic("in")
    topic.pipe_input("a", None, 10)
    topic.pipe_input(None, "x", 11)
    topic.pipe_input("a", "y", 12)
    assert emitted(driver) == [(W("a", 10, 10), 1, 10), (W("a", 10, 10), None, 10), (W("a", 10, 12), 2, 12)]
    assert emitted(driver, "agg-out") == [(W("a", 10, 10), [None], 10), (W("a", 10, 10), None, 10),
                                          (W("a", 10, 12), [None, "y"], 12)]
    assert driver.metrics()["null_key_records_dropped"] == 2


def test_aggregate_merges_sessions_with_the_merger():
    calls: list = []
    driver = session_driver(GAP, BIG_GRACE, merger_calls=calls)
    pipe(driver, [("a", 0), ("a", 10)])
    assert calls == []   # nothing to merge yet
    pipe(driver, [("a", 5)])
    assert calls and all(call[0] == "a" for call in calls)
    # the two sessions' aggregates were combined by the merger (possibly after folding them
    # into the initializer's aggregate, as Kafka Streams does)
    assert any(sorted(a1 + a2) == [0, 10] for _key, a1, a2 in calls), calls
    assert emitted(driver, "agg-out")[-3:] == [
        (W("a", 0, 0), None, 0), (W("a", 10, 10), None, 10), (W("a", 0, 10), [0, 5, 10], 10)]
    assert sessions_of(driver, "agg", "a") == {(0, 10): [0, 5, 10]}


def test_count_merges_by_adding():
    driver = session_driver(GAP, BIG_GRACE)
    pipe(driver, [("a", 0), ("a", 1), ("a", 2), ("a", 20), ("a", 21), ("a", 11)])
    assert sessions_of(driver, "cnt", "a") == {(0, 2): 3, (11, 11): 1, (20, 21): 2}
    pipe(driver, [("a", 7), ("a", 16)])   # 7 joins [0,2] and [11,11]; 16 joins that and [20,21]
    assert sessions_of(driver, "cnt", "a") == {(0, 21): 8}
    assert emitted(driver)[-6:] == [
        (W("a", 0, 2), None, 2), (W("a", 11, 11), None, 11), (W("a", 0, 11), 5, 11),
        (W("a", 0, 11), None, 11), (W("a", 20, 21), None, 21), (W("a", 0, 21), 8, 21)]


@pytest.mark.parametrize("retention", [None, 30])
def test_a_record_never_merges_a_closed_session_whatever_the_retention(retention):
    """Gap 5, grace 0: at stream time 18, [0,0] closed at 6 (0 + 5 + 0 + 1) and is final:
    the record at 5, on time since its session [5,18] closes at 24, merges only the open
    [10,18], as Kafka Streams 4.1 does, however long the store keeps [0,0]."""
    driver = sum_driver(grace=0, retention=retention)
    topic = driver.input_topic("in")
    for value, t in [(1, 0), (10, 10), (20, 14), (40, 18), (100, 5)]:
        topic.pipe_input("a", value, t)
    assert driver.metrics()["late_records_dropped"] == 0
    assert emitted(driver, "sum-out") == [
        (W("a", 0, 0), 1, 0), (W("a", 10, 10), 10, 10), (W("a", 10, 10), None, 10), (W("a", 10, 14), 30, 14),
        (W("a", 10, 14), None, 14), (W("a", 10, 18), 70, 18), (W("a", 10, 18), None, 18), (W("a", 5, 18), 170, 18)]
    assert driver.store("sum").fetch_session("a", 5, 18) == 170
    # The closed [0,0] stays queryable while the store keeps it (the default keeps 2 * gap + grace).
    assert driver.store("sum").fetch_session("a", 0, 0) == (None if retention is None else 1)


@pytest.mark.parametrize("grace, expected", [
    (0, [(W("a", 10, 10), 1, 10), (W("b", 19, 19), 1, 19), (W("a", 17, 17), 1, 17)]),
    # grace 2: [10,10] is open until stream time 20, so a@17 merges it.
    (2, [(W("a", 10, 10), 1, 10), (W("b", 19, 19), 1, 19), (W("a", 10, 10), None, 10),
         (W("a", 10, 17), 2, 17)]),
])
def test_a_closed_session_stays_final_and_a_record_in_its_gap_starts_a_new_one(grace, expected):
    """Gap 8: ``a@10, b@19, a@17``. With grace 0, [10,10] closed at 19 (10 + 8 + 0 + 1):
    Kafka Streams 4.1 starts [17,17] beside it, nothing is retracted."""
    driver = session_driver(8, grace)
    pipe(driver, [("a", 10), ("b", 19), ("a", 17)])
    assert emitted(driver, "cnt-out") == expected
    assert late_dropped(driver) == 0


# --- store reads -----------------------------------------------------------------------------

def test_session_store_reads():
    driver = session_driver(GAP, BIG_GRACE)
    pipe(driver, [("a", 0), ("a", 3), ("a", 20), ("a", 40), ("a", 42), ("b", 1)])
    store = driver.store("cnt")
    assert list(store.fetch("a")) == [(W("a", 0, 3), 2), (W("a", 20, 20), 1), (W("a", 40, 42), 2)]
    assert list(store.fetch("b")) == [(W("b", 1, 1), 1)]
    assert list(store.fetch("c")) == []
    assert list(store.find_sessions("a", 3, 20)) == [(W("a", 0, 3), 2), (W("a", 20, 20), 1)]
    assert list(store.find_sessions("a", 4, 40)) == [(W("a", 20, 20), 1), (W("a", 40, 42), 2)]
    assert list(store.find_sessions("a", 21, 39)) == []
    assert list(store.find_sessions("a", 0, 100)) == list(store.fetch("a"))
    assert store.fetch_session("a", 0, 3) == 2
    assert store.fetch_session("a", 0, 0) is None        # merged away into [0,3]
    assert store.fetch_session("a", 40, 42) == 2
    assert store.fetch_session("a", 40, 41) is None
    assert store.fetch_session("b", 1, 1) == 1
    assert store.fetch_session("c", 1, 1) is None
    assert driver.store("red").fetch_session("a", 40, 42) == [40, 42]


# --- the brute-force model and property tests ------------------------------------------------

def sessionize(timestamps: Sequence[int], gap: int, ids: Optional[Sequence[int]] = None
               ) -> Dict[Session, List[int]]:
    """Sort the records and cut where consecutive ones are more than ``gap`` apart.
    Each session holds its records' ids (default: their timestamps), sorted."""
    ids = list(timestamps) if ids is None else list(ids)
    sessions: List[list] = []
    for t, ident in sorted(zip(timestamps, ids)):
        if sessions and t - sessions[-1][1] <= gap:
            sessions[-1][1] = t
            sessions[-1][2].append(ident)
        else:
            sessions.append([t, t, [ident]])
    return {(start, end): sorted(members) for start, end, members in sessions}


def simulate_with_lateness(records: Sequence[Tuple[str, int]], gap: int, grace: int
                           ) -> Tuple[Dict[str, Dict[Session, List[int]]], int]:
    """The merging and lateness rules applied in arrival order with plain lists; record ids
    are ``100 * t + i``. A record merges the sessions within its gap that are still open
    (stream time not past ``end + gap + grace``). Returns the sessions per key and the
    number of late records."""
    stream_time, late = -1, 0
    state: Dict[str, Dict[Session, List[int]]] = {}
    for i, (key, t) in enumerate(records):
        stream_time = max(stream_time, t)
        sessions = state.setdefault(key, {})
        overlapping = [s for s in sessions if s[1] >= t - gap and s[0] <= t + gap
                       and stream_time <= s[1] + gap + grace]
        start = min([t] + [s[0] for s in overlapping])
        end = max([t] + [s[1] for s in overlapping])
        if stream_time >= end + gap + grace + 1:
            late += 1
            continue
        members = [100 * t + i]
        for s in overlapping:
            members += sessions.pop(s)
        sessions[(start, end)] = sorted(members)
    return state, late


def random_records(rng: random.Random, gap: int) -> List[Tuple[str, int]]:
    span = rng.choice([gap, 3 * gap, 6 * gap, 20 * gap])
    return [(rng.choice("xy"), rng.randint(0, span)) for _ in range(rng.randint(1, 16))]


def pipe_ids(driver: TopologyTestDriver, records: Sequence[Tuple[str, int]]) -> None:
    for i, (key, t) in enumerate(records):
        driver.input_topic("in").pipe_input(key, [100 * t + i], t)


def replay_changelog(driver: TopologyTestDriver, topic: str) -> Dict[Tuple[str, Session], object]:
    """Apply the emitted updates and retractions; every one must carry its session's end."""
    table: Dict[Tuple[str, Session], object] = {}
    for r in driver.output_topic(topic).read_records():
        assert r.timestamp == r.key.end, r
        if r.value is None:
            assert (r.key.key, r.key.window) in table, f"retraction of an unknown session: {r}"
            del table[(r.key.key, r.key.window)]
        else:
            table[(r.key.key, r.key.window)] = r.value
    return table


def test_property_final_sessions_equal_brute_force_sessionization():
    rng = random.Random(4242)
    for run in range(250):
        gap = rng.choice([1, 2, 3, 5, 10])
        records = random_records(rng, gap)
        driver = session_driver(gap, BIG_GRACE)
        pipe_ids(driver, records)
        context = f"run {run}: gap={gap} records {records}"
        changelogs = {name: replay_changelog(driver, f"{name}-out") for name in ("cnt", "red", "agg")}
        for key in "xy":
            mine = [(t, 100 * t + i) for i, (k, t) in enumerate(records) if k == key]
            expected = sessionize([t for t, _ in mine], gap, [ident for _, ident in mine])
            counts = {s: len(ids) for s, ids in expected.items()}
            assert sessions_of(driver, "red", key) == expected, context
            assert sessions_of(driver, "agg", key) == expected, context
            assert sessions_of(driver, "cnt", key) == counts, context
            for name, want in (("cnt", counts), ("red", expected), ("agg", expected)):
                assert {s: v for (k, s), v in changelogs[name].items() if k == key} == want, context
        assert driver.metrics()["late_records_dropped"] == 0, context


def test_property_small_grace_matches_the_arrival_order_simulation():
    rng = random.Random(99)
    for run in range(250):
        gap = rng.choice([1, 2, 3, 5, 10])
        grace = rng.choice([0, 0, 1, 2, gap])
        records = random_records(rng, gap)
        driver = session_driver(gap, grace)
        pipe_ids(driver, records)
        expected, late = simulate_with_lateness(records, gap, grace)
        context = f"run {run}: gap={gap} grace={grace} records {records}"
        for key in "xy":
            sessions = expected.get(key, {})
            assert sessions_of(driver, "red", key) == sessions, context
            assert sessions_of(driver, "agg", key) == sessions, context
            assert sessions_of(driver, "cnt", key) == {s: len(v) for s, v in sessions.items()}, context
        assert late_dropped(driver) == late, context
