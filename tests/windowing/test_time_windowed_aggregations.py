"""Tumbling and hopping windowed count/reduce/aggregate, through the TopologyTestDriver.

The kinds of cases Kafka Streams' KStreamWindowAggregateTest covers: every update
emitted keyed by ``Windowed``, window bounds (start inclusive, end exclusive),
out-of-order records inside grace, late records after it (dropped, counted, written
raw to a late-records topic), hopping windows with some windows already closed,
result timestamps, store reads and retention, build-time errors.

Each table case lists its inputs as ``(key, value, timestamp)`` and the exact output
as ``(Windowed(key, start, end), value, timestamp)``, written out by hand.
"""
from __future__ import annotations

import logging
import random
from collections import Counter
from datetime import timedelta
from typing import Any, Callable, List, Optional, Sequence, Tuple

import pytest

import streamkit as sk
from streamkit.errors import TopologyError
from streamkit.serdes import Bytes
from streamkit.testing import TopologyTestDriver

SEC = timedelta(seconds=1)
W = sk.Windowed

TUMBLING = sk.TumblingWindows(size=10 * SEC, grace=2 * SEC)          # [0,10000) closes at 12000
TUMBLING_NO_GRACE = sk.TumblingWindows(size=10 * SEC)                # [0,10000) closes at 10000
HOPPING = sk.HoppingWindows(size=10 * SEC, advance=5 * SEC, grace=1 * SEC)  # [0,10000) closes at 11000

Input = Tuple[Any, Any, int]
Output = Tuple[Any, Any, int]


def windowed_agg(windows: Any, op: str = "count", **options: Any) -> Callable[[sk.StreamsBuilder], None]:
    """in -> group_by_key -> windowed_by(windows) -> <op> (store "agg") -> out."""
    def build(b: sk.StreamsBuilder) -> None:
        grouped = b.stream("in").group_by_key().windowed_by(windows)
        if op == "count":
            table = grouped.count(name="agg", **options)
        elif op == "reduce":
            table = grouped.reduce(lambda agg, v: agg + v, name="agg", **options)
        elif op == "aggregate":
            table = grouped.aggregate(lambda: [], lambda k, v, agg: agg + [f"{k}:{v}"], name="agg", **options)
        else:
            raise AssertionError(op)
        table.to_stream().to("out")
    return build


def make_driver(build: Callable[[sk.StreamsBuilder], None], **settings: Any) -> TopologyTestDriver:
    app = sk.App("t", **settings)
    app.topology(build)
    return TopologyTestDriver(app)


def pipe(driver: TopologyTestDriver, inputs: Sequence[Input], topic: str = "in") -> None:
    source = driver.input_topic(topic)
    for key, value, timestamp in inputs:
        source.pipe_input(key, value, timestamp)


def read(driver: TopologyTestDriver, topic: str = "out") -> List[Output]:
    return [(r.key, r.value, r.timestamp) for r in driver.output_topic(topic).read_records()]


# -- table: count / reduce / aggregate, bounds, grace, lateness, hopping -----------------

CASES = [
    pytest.param(
        TUMBLING, "count",
        [("a", "x", 1000), ("a", "x", 5000), ("b", "x", 6000), ("a", "x", 12000)],
        [(W("a", 0, 10000), 1, 1000), (W("a", 0, 10000), 2, 5000), (W("b", 0, 10000), 1, 6000),
         (W("a", 10000, 20000), 1, 12000)],
        0, id="tumbling-count"),
    pytest.param(
        TUMBLING, "reduce",
        [("a", 3, 1000), ("a", 4, 2000), ("b", 10, 2500), ("a", 5, 11000), ("a", 1, 11500)],
        [(W("a", 0, 10000), 3, 1000), (W("a", 0, 10000), 7, 2000), (W("b", 0, 10000), 10, 2500),
         (W("a", 10000, 20000), 5, 11000), (W("a", 10000, 20000), 6, 11500)],
        0, id="tumbling-reduce"),
    pytest.param(
        TUMBLING, "aggregate",
        [("a", "x", 1000), ("a", "y", 2000), ("b", "z", 3000), ("a", "w", 10000)],
        [(W("a", 0, 10000), ["a:x"], 1000), (W("a", 0, 10000), ["a:x", "a:y"], 2000),
         (W("b", 0, 10000), ["b:z"], 3000), (W("a", 10000, 20000), ["a:w"], 10000)],
        0, id="tumbling-aggregate"),
    pytest.param(
        TUMBLING, "count",
        [("a", "x", 0), ("a", "x", 9999), ("a", "x", 10000), ("a", "x", 19999), ("a", "x", 20000)],
        [(W("a", 0, 10000), 1, 0), (W("a", 0, 10000), 2, 9999), (W("a", 10000, 20000), 1, 10000),
         (W("a", 10000, 20000), 2, 19999), (W("a", 20000, 30000), 1, 20000)],
        0, id="tumbling-boundaries-start-inclusive-end-exclusive"),
    pytest.param(
        # 9000 arrives after stream time 11000, but [0,10000) is open until 12000.
        TUMBLING, "count",
        [("a", "x", 1000), ("a", "x", 11000), ("a", "x", 9000)],
        [(W("a", 0, 10000), 1, 1000), (W("a", 10000, 20000), 1, 11000), (W("a", 0, 10000), 2, 9000)],
        0, id="out-of-order-inside-grace"),
    pytest.param(
        # The result timestamp is the largest record timestamp in the window, not the last one's.
        TUMBLING, "reduce",
        [("a", 1, 8000), ("a", 1, 11000), ("a", 1, 2000)],
        [(W("a", 0, 10000), 1, 8000), (W("a", 10000, 20000), 1, 11000), (W("a", 0, 10000), 2, 8000)],
        0, id="result-timestamp-is-max-in-window"),
    pytest.param(
        # Stream time 11999 = end + grace - 1: [0,10000) still accepts records.
        TUMBLING, "count",
        [("a", "x", 11999), ("a", "x", 0)],
        [(W("a", 10000, 20000), 1, 11999), (W("a", 0, 10000), 1, 0)],
        0, id="stream-time-one-ms-before-end-plus-grace-accepted"),
    pytest.param(
        # Stream time 12000 = end + grace: [0,10000) is closed, the record is late.
        TUMBLING, "count",
        [("a", "x", 12000), ("a", "x", 9999), ("a", "x", 0)],
        [(W("a", 10000, 20000), 1, 12000)],
        2, id="stream-time-at-end-plus-grace-late"),
    pytest.param(
        # Stream time moved by another key closes the window for every key.
        TUMBLING, "count",
        [("a", "x", 1000), ("b", "x", 12000), ("a", "x", 2000), ("b", "x", 11000)],
        [(W("a", 0, 10000), 1, 1000), (W("b", 10000, 20000), 1, 12000), (W("b", 10000, 20000), 2, 12000)],
        1, id="other-keys-advance-stream-time"),
    pytest.param(
        TUMBLING_NO_GRACE, "count",
        [("a", "x", 9999), ("a", "x", 9998), ("a", "x", 10000), ("a", "x", 9999)],
        [(W("a", 0, 10000), 1, 9999), (W("a", 0, 10000), 2, 9999), (W("a", 10000, 20000), 1, 10000)],
        1, id="zero-grace-closes-at-end"),
    pytest.param(
        # Late records leave the windows and their result timestamps alone.
        TUMBLING, "count",
        [("a", "x", 1000), ("a", "x", 25000), ("a", "x", 1000), ("a", "x", 5000), ("a", "x", 19999),
         ("a", "x", 20000)],
        [(W("a", 0, 10000), 1, 1000), (W("a", 20000, 30000), 1, 25000), (W("a", 20000, 30000), 2, 25000)],
        3, id="late-after-grace-dropped"),
    pytest.param(
        HOPPING, "count",
        [("a", "x", 1000), ("a", "x", 5000), ("a", "x", 10000)],
        [(W("a", 0, 10000), 1, 1000),
         (W("a", 0, 10000), 2, 5000), (W("a", 5000, 15000), 1, 5000),
         (W("a", 5000, 15000), 2, 10000), (W("a", 10000, 20000), 1, 10000)],
        0, id="hopping-boundaries-and-no-window-before-zero"),
    pytest.param(
        # 8000 falls in [0,10000) (closed at 11000 <= 12000) and [5000,15000) (open): only
        # the open one is updated. 9999 at stream time 16000: both its windows closed: late.
        HOPPING, "count",
        [("a", "x", 3000), ("a", "x", 12000), ("a", "x", 8000), ("a", "x", 16000), ("a", "x", 9999)],
        [(W("a", 0, 10000), 1, 3000),
         (W("a", 5000, 15000), 1, 12000), (W("a", 10000, 20000), 1, 12000),
         (W("a", 5000, 15000), 2, 12000),
         (W("a", 10000, 20000), 2, 16000), (W("a", 15000, 25000), 1, 16000)],
        1, id="hopping-one-open-one-closed-window"),
    pytest.param(
        HOPPING, "reduce",
        [("a", 1, 7000), ("b", 100, 7500), ("a", 2, 14000), ("a", 4, 10500)],
        [(W("a", 0, 10000), 1, 7000), (W("a", 5000, 15000), 1, 7000),
         (W("b", 0, 10000), 100, 7500), (W("b", 5000, 15000), 100, 7500),
         (W("a", 5000, 15000), 3, 14000), (W("a", 10000, 20000), 2, 14000),
         (W("a", 5000, 15000), 7, 14000), (W("a", 10000, 20000), 6, 14000)],
        0, id="hopping-reduce"),
    pytest.param(
        HOPPING, "aggregate",
        [("a", "p", 4000), ("a", "q", 6000), ("a", "r", 11500)],
        [(W("a", 0, 10000), ["a:p"], 4000),
         (W("a", 0, 10000), ["a:p", "a:q"], 6000), (W("a", 5000, 15000), ["a:q"], 6000),
         (W("a", 5000, 15000), ["a:q", "a:r"], 11500), (W("a", 10000, 20000), ["a:r"], 11500)],
        0, id="hopping-aggregate"),
]


@pytest.mark.parametrize("caching", [False, True], ids=["caching-off", "caching-on"])
@pytest.mark.parametrize("windows, op, inputs, expected, late", CASES)
def test_windowed_aggregation(windows: Any, op: str, inputs: List[Input], expected: List[Output],
                              late: int, caching: bool) -> None:
    # The driver never caches (every update is emitted), whatever the app says.
    driver = make_driver(windowed_agg(windows, op), caching=caching)
    pipe(driver, inputs)
    assert read(driver) == expected
    metrics = driver.metrics()
    assert metrics["late_records_dropped"] == late
    assert metrics["null_key_records_dropped"] == 0


# -- None keys and values ----------------------------------------------------------------
# As in Kafka Streams 4.1 (KStreamWindowAggregate): only a None key is skipped (and counted);
# a None value is counted and reaches the reducer/aggregator, which must handle it.

def _add_or_keep(agg: Any, value: Any) -> Any:
    return agg if value is None else agg + value


NULL_CASES = [
    pytest.param(
        "count", [(None, "x", 1000), ("a", None, 2000), ("a", "x", 3000), (None, "y", 4000)],
        [(W("a", 0, 10000), 1, 2000), (W("a", 0, 10000), 2, 3000)], 2, id="count"),
    pytest.param(
        # The first value of a window is the reduction as is, None included (a None result
        # is a deletion); later ones go through the reducer.
        "reduce", [("a", None, 500), ("a", 2, 1000), ("a", None, 2000), ("a", 3, 1500), (None, 5, 1600)],
        [(W("a", 0, 10000), None, 500), (W("a", 0, 10000), 2, 1000), (W("a", 0, 10000), 2, 2000),
         (W("a", 0, 10000), 5, 2000)], 1, id="reduce"),
    pytest.param(
        "aggregate", [("a", None, 1000), (None, "v", 1000), ("b", "v", 1000)],
        [(W("a", 0, 10000), ["a:None"], 1000), (W("b", 0, 10000), ["b:v"], 1000)], 1, id="aggregate"),
]


@pytest.mark.parametrize("op, inputs, expected, null_keys", NULL_CASES)
def test_none_keys_are_dropped_and_counted_none_values_aggregated(op: str, inputs: List[Input],
                                                                 expected: List[Output], null_keys: int) -> None:
    def build(b: sk.StreamsBuilder) -> None:
        grouped = b.stream("in").group_by_key().windowed_by(TUMBLING)
        if op == "reduce":
            table = grouped.reduce(_add_or_keep, name="agg")
        elif op == "count":
            table = grouped.count(name="agg")
        else:
            table = grouped.aggregate(lambda: [], lambda k, v, agg: agg + [f"{k}:{v}"], name="agg")
        table.to_stream().to("out")
    driver = make_driver(build)
    pipe(driver, inputs)
    assert read(driver) == expected
    assert driver.metrics()["null_key_records_dropped"] == null_keys
    assert driver.metrics()["late_records_dropped"] == 0


@pytest.mark.parametrize("seed", range(8))
def test_property_counts_take_every_record_with_a_key_none_values_included(seed: int) -> None:
    """Random keys (some None), values (some None) and out-of-order timestamps, nothing late:
    every hopping window's final count is the number of records with a key in it, and the
    None keys are exactly the records counted as dropped."""
    rng = random.Random(seed)
    windows = sk.HoppingWindows(size=timedelta(milliseconds=10), advance=timedelta(milliseconds=5),
                                grace=timedelta(days=1))
    driver = make_driver(windowed_agg(windows))
    inputs = [(rng.choice(["a", "b", None]), rng.choice(["x", None]), rng.randint(0, 100)) for _ in range(80)]
    pipe(driver, inputs)
    final = {(k.key, k.start): v for k, v, _ts in read(driver)}
    expected: Counter = Counter()
    for key, _value, t in inputs:
        if key is not None:
            for start in range(max(0, t - t % 5 - 5), t + 1, 5):
                if start <= t < start + 10:
                    expected[(key, start)] += 1
    assert final == dict(expected)
    assert driver.metrics()["null_key_records_dropped"] == sum(1 for k, _v, _t in inputs if k is None)


def test_a_none_value_counts_in_every_hopping_window_holding_it() -> None:
    driver = make_driver(windowed_agg(sk.HoppingWindows(size=timedelta(seconds=10), advance=timedelta(seconds=5),
                                                        grace=timedelta(seconds=5))))
    pipe(driver, [("a", None, 7000)])
    assert read(driver) == [(W("a", 0, 10000), 1, 7000), (W("a", 5000, 15000), 1, 7000)]


def test_group_by_selector_returning_none_drops_the_record() -> None:
    def build(b: sk.StreamsBuilder) -> None:
        (b.stream("in").group_by(lambda k, v: v.get("page"))
         .windowed_by(TUMBLING).count(name="agg").to_stream().to("out"))
    driver = make_driver(build)
    pipe(driver, [("u1", {"page": None}, 1000), ("u1", {"page": "home"}, 2000)])
    assert read(driver) == [(W("home", 0, 10000), 1, 2000)]
    assert driver.metrics()["null_key_records_dropped"] == 1


# -- grouping through a repartition topic --------------------------------------------------

def _by_page_group_by(b: sk.StreamsBuilder) -> None:
    (b.stream("views", timestamp=lambda k, v: v["ts"])
     .group_by(lambda k, v: v["page"])
     .windowed_by(TUMBLING).count(name="agg").to_stream().to("out"))


def _by_page_prekeyed(b: sk.StreamsBuilder) -> None:
    b.stream("views").map(lambda k, v: (v["page"], v)).to("by-page")
    (b.stream("by-page", timestamp=lambda k, v: v["ts"])
     .group_by_key().windowed_by(TUMBLING).count(name="agg").to_stream().to("out"))


@pytest.mark.parametrize("build, repartitions", [
    (_by_page_group_by, ("t-agg-repartition",)), (_by_page_prekeyed, ()),
], ids=["group_by", "group_by_key"])
def test_grouping_with_or_without_repartition_gives_the_same_windows(build, repartitions) -> None:
    driver = make_driver(build)
    assert driver.topology.repartition_topics == repartitions
    # The record timestamp (0) is not the event time: the extractor reads v["ts"].
    pipe(driver, [("u1", {"page": "home", "ts": 1000}, 0), ("u2", {"page": "home", "ts": 2000}, 0),
                  ("u1", {"page": "about", "ts": 3000}, 0), ("u3", {"page": "home", "ts": 11000}, 0),
                  ("u4", {"page": "about", "ts": 9500}, 0), ("u4", {"page": "about", "ts": 500}, 0),
                  ("u5", {"page": "home", "ts": 12000}, 0), ("u5", {"page": "home", "ts": 1500}, 0)],
         topic="views")
    assert read(driver) == [
        (W("home", 0, 10000), 1, 1000), (W("home", 0, 10000), 2, 2000), (W("about", 0, 10000), 1, 3000),
        (W("home", 10000, 20000), 1, 11000), (W("about", 0, 10000), 2, 9500),
        (W("about", 0, 10000), 3, 9500), (W("home", 10000, 20000), 2, 12000)]
    assert driver.metrics()["late_records_dropped"] == 1
    assert sorted(driver.store("agg").fetch_all(0, 100_000), key=lambda kv: (kv[0].key, kv[0].start)) == [
        (W("about", 0, 10000), 3), (W("home", 0, 10000), 2), (W("home", 10000, 20000), 2)]


# -- the late-records topic ------------------------------------------------------------------

def test_late_records_are_written_raw_with_late_headers(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="streamkit.late")
    driver = make_driver(windowed_agg(TUMBLING, "count", late_records_topic="late"))
    source = driver.input_topic("in")
    source.pipe_input("a", {"n": 1}, 1000)
    source.pipe_input("a", {"n": 2}, 22000)
    source.pipe_input("b", {"n": 3}, 5000, headers=(("trace-id", b"abc"),))   # late: [0,10000) closed
    source.pipe_input("a", {"n": 4}, 19999)                                    # late: closed at 22000
    source.pipe_input("a", {"n": 5}, 20000)                                    # on time
    assert read(driver) == [(W("a", 0, 10000), 1, 1000), (W("a", 20000, 30000), 1, 22000),
                            (W("a", 20000, 30000), 2, 22000)]
    assert driver.metrics()["late_records_dropped"] == 2
    late = driver.output_topic("late", key_serde=Bytes(), value_serde=Bytes()).read_records()
    assert [(r.key, r.value, r.timestamp, r.headers) for r in late] == [
        (b"b", b'{"n":3}', 5000, (
            ("trace-id", b"abc"),
            ("streamkit.late.node", b"agg"), ("streamkit.late.topic", b"in"),
            ("streamkit.late.partition", b"0"), ("streamkit.late.offset", b"2"),
            ("streamkit.late.timestamp", b"5000"), ("streamkit.late.stream_time", b"22000"))),
        (b"a", b'{"n":4}', 19999, (
            ("streamkit.late.node", b"agg"), ("streamkit.late.topic", b"in"),
            ("streamkit.late.partition", b"0"), ("streamkit.late.offset", b"3"),
            ("streamkit.late.timestamp", b"19999"), ("streamkit.late.stream_time", b"22000"))),
    ]
    assert [r.getMessage() for r in caplog.records if r.name == "streamkit.late"] == [
        "agg: dropped a late record (in[0]@2): key 'b' at 5000, stream time 22000, window [0,10000) closed",
        "agg: dropped a late record (in[0]@3): key 'a' at 19999, stream time 22000, window [10000,20000) closed",
    ]


def test_late_record_keeps_its_own_timestamp_and_reports_the_extracted_one() -> None:
    def build(b: sk.StreamsBuilder) -> None:
        (b.stream("in", timestamp=lambda k, v: v["ts"]).group_by_key().windowed_by(HOPPING)
         .count(name="agg", late_records_topic="late").to_stream().to("out"))
    driver = make_driver(build)
    pipe(driver, [("a", {"ts": 16000}, 7), ("a", {"ts": 9999}, 8)])   # 9999: [0,10000) and [5000,15000) closed
    assert read(driver) == [(W("a", 10000, 20000), 1, 16000), (W("a", 15000, 25000), 1, 16000)]
    late = driver.output_topic("late", key_serde=Bytes(), value_serde=Bytes()).read_records()
    assert [(r.key, r.value, r.timestamp, dict(r.headers)) for r in late] == [
        (b"a", b'{"ts":9999}', 8, {
            "streamkit.late.node": b"agg", "streamkit.late.topic": b"in", "streamkit.late.partition": b"0",
            "streamkit.late.offset": b"1", "streamkit.late.timestamp": b"9999",
            "streamkit.late.stream_time": b"16000"})]


def test_late_records_through_a_repartition_topic_name_it() -> None:
    def build(b: sk.StreamsBuilder) -> None:
        (b.stream("in").group_by(lambda k, v: v).windowed_by(TUMBLING)
         .count(name="agg", late_records_topic="late").to_stream().to("out"))
    driver = make_driver(build)
    pipe(driver, [("u1", "home", 30000), ("u2", "home", 100)])
    assert read(driver) == [(W("home", 30000, 40000), 1, 30000)]
    late = driver.output_topic("late", key_serde=Bytes(), value_serde=Bytes()).read_records()
    assert len(late) == 1
    headers = dict(late[0].headers)
    assert headers["streamkit.late.topic"] == b"t-agg-repartition"
    assert headers["streamkit.late.timestamp"] == b"100"
    assert headers["streamkit.late.stream_time"] == b"30000"
    assert late[0].timestamp == 100


def test_without_a_late_records_topic_late_records_are_only_counted() -> None:
    driver = make_driver(windowed_agg(TUMBLING, "count"))
    pipe(driver, [("a", "x", 50000), ("a", "x", 1), ("a", "x", 2)])
    assert read(driver) == [(W("a", 50000, 60000), 1, 50000)]
    assert driver.metrics()["late_records_dropped"] == 2
    assert set(driver.topology.topics) == {"in", "out", "t-agg-changelog"}


# -- the output topic's wire format ----------------------------------------------------------

def test_output_keys_are_windowed_json_on_the_wire() -> None:
    driver = make_driver(windowed_agg(HOPPING, "count"))
    pipe(driver, [("page-1", "x", 7000)])
    raw = driver.output_topic("out", key_serde=Bytes(), value_serde=Bytes()).read_records()
    assert [(r.key, r.value, r.timestamp) for r in raw] == [
        (b'{"key":"page-1","start":0,"end":10000}', b"1", 7000),
        (b'{"key":"page-1","start":5000,"end":15000}', b"1", 7000)]


def test_output_keys_after_group_by_are_windowed_json_on_the_wire() -> None:
    driver = make_driver(_by_page_group_by)
    pipe(driver, [("u1", {"page": "home", "ts": 12345}, 0)], topic="views")
    raw = driver.output_topic("out", key_serde=Bytes(), value_serde=Bytes()).read_records()
    assert [(r.key, r.value) for r in raw] == [(b'{"key":"home","start":10000,"end":20000}', b"1")]


# -- store reads --------------------------------------------------------------------------------

def test_store_fetch_fetch_all_and_get_after_processing() -> None:
    driver = make_driver(windowed_agg(HOPPING, "count", retention=60 * SEC))
    pipe(driver, [("a", "x", 3000), ("a", "x", 7000), ("b", "x", 6000), ("a", "x", 12000)])
    store = driver.store("agg")
    assert list(store.fetch("a", 0, 20000)) == [
        (W("a", 0, 10000), 2), (W("a", 5000, 15000), 2), (W("a", 10000, 20000), 1)]
    assert list(store.fetch("a", 5000, 9999)) == [(W("a", 5000, 15000), 2)]   # by window start
    assert list(store.fetch("a", 5000, 10000)) == [(W("a", 5000, 15000), 2), (W("a", 10000, 20000), 1)]
    assert list(store.fetch("a", 1, 4999)) == []
    assert list(store.fetch("b", 0, 100_000)) == [(W("b", 0, 10000), 1), (W("b", 5000, 15000), 1)]
    assert list(store.fetch("nobody", 0, 100_000)) == []
    assert list(store.fetch_all(5000, 10000)) == [
        (W("a", 5000, 15000), 2), (W("a", 10000, 20000), 1), (W("b", 5000, 15000), 1)]
    assert list(store.fetch_all(0, 0)) == [(W("a", 0, 10000), 2), (W("b", 0, 10000), 1)]
    assert store.get("a", 0) == 2
    assert store.get("a", 10000) == 1
    assert store.get("b", 10000) is None
    assert store.get("a", 1000) is None           # no window starts there
    assert store.get("nobody", 0) is None


def test_store_reads_after_reduce_and_aggregate() -> None:
    reduced = make_driver(windowed_agg(TUMBLING, "reduce"))
    pipe(reduced, [("a", 2, 100), ("a", 5, 200), ("a", 7, 10100)])
    assert list(reduced.store("agg").fetch("a", 0, 10000)) == [(W("a", 0, 10000), 7), (W("a", 10000, 20000), 7)]
    aggregated = make_driver(windowed_agg(TUMBLING, "aggregate"))
    pipe(aggregated, [("a", "p", 100), ("a", "q", 200)])
    assert aggregated.store("agg").get("a", 0) == ["a:p", "a:q"]


# -- retention -----------------------------------------------------------------------------

EVERY_TEN_SECONDS = [("a", "x", t) for t in range(0, 100_001, 10_000)]   # one record per window, 0 .. 100000


@pytest.mark.parametrize("retention, kept_starts", [
    # Windows are kept while start >= stream time (100000) - retention.
    (30 * SEC, [70000, 80000, 90000, 100000]),
    (None, [90000, 100000]),                        # default: size + grace = 12 s
    (45 * SEC, [60000, 70000, 80000, 90000, 100000]),
], ids=["30s", "default", "45s"])
def test_windows_older_than_retention_disappear_from_the_store(retention: Optional[timedelta],
                                                                 kept_starts: List[int]) -> None:
    options = {} if retention is None else {"retention": retention}
    driver = make_driver(windowed_agg(TUMBLING, "count", **options))
    pipe(driver, EVERY_TEN_SECONDS)
    expected = [(W("a", start, start + 10000), 1) for start in kept_starts]
    store = driver.store("agg")
    assert list(store.fetch("a", 0, 1_000_000)) == expected
    assert list(store.fetch_all(0, 1_000_000)) == expected
    assert store.get("a", kept_starts[0]) == 1
    assert store.get("a", kept_starts[0] - 10000) is None
    assert store.get("a", 0) is None
    assert len(read(driver)) == len(EVERY_TEN_SECONDS)


# -- build-time errors ---------------------------------------------------------------------

def _retention_too_short(b: sk.StreamsBuilder) -> None:
    b.stream("in").group_by_key().windowed_by(TUMBLING).count(name="agg", retention=11 * SEC)


def _hopping_retention_too_short(b: sk.StreamsBuilder) -> None:
    b.stream("in").group_by_key().windowed_by(HOPPING).reduce(lambda a, v: v, name="hop", retention=10 * SEC)


def _windowed_by_timedelta(b: sk.StreamsBuilder) -> None:
    b.stream("in").group_by_key().windowed_by(10 * SEC).count(name="agg")


def _windowed_by_string(b: sk.StreamsBuilder) -> None:
    b.stream("in").filter(lambda k, v: True, name="keep").group_by_key().windowed_by("10s")


def _final_on_plain_table(b: sk.StreamsBuilder) -> None:
    (b.stream("in").group_by_key().count(name="counts")
     .suppress(sk.Suppressed.until_window_closes()).to_stream().to("out"))


def _final_on_plain_table_named(b: sk.StreamsBuilder) -> None:
    (b.stream("in").group_by_key().count(name="counts")
     .suppress(sk.Suppressed.until_window_closes(), name="finals").to_stream().to("out"))


def _zero_idle(b: sk.StreamsBuilder) -> None:
    b.stream("in").group_by_key().windowed_by(TUMBLING).count(name="agg", close_idle_windows_after=timedelta(0))


@pytest.mark.parametrize("build, fragments", [
    (_retention_too_short, ["agg:", "retention", "12000 ms"]),
    (_hopping_retention_too_short, ["hop:", "retention", "11000 ms"]),
    (_windowed_by_timedelta, ["windowed_by()", "'in'", "TumblingWindows"]),
    (_windowed_by_string, ["windowed_by()", "'keep'", "'10s'"]),
    (_final_on_plain_table, ["counts.suppress:", "until_window_closes", "'counts' is not windowed"]),
    (_final_on_plain_table_named, ["finals:", "until_window_closes", "'counts' is not windowed"]),
    (_zero_idle, ["agg:", "close_idle_windows_after"]),
], ids=["retention", "hopping-retention", "windowed_by-timedelta", "windowed_by-str", "final-not-windowed",
        "final-not-windowed-named", "zero-idle"])
def test_build_errors_name_the_node(build: Callable[[sk.StreamsBuilder], None], fragments: List[str]) -> None:
    app = sk.App("t")
    app.topology(build)
    with pytest.raises(TopologyError) as info:
        app.build()
    for fragment in fragments:
        assert fragment in str(info.value)


def test_retention_equal_to_size_plus_grace_is_accepted() -> None:
    driver = make_driver(windowed_agg(TUMBLING, "count", retention=12 * SEC))
    pipe(driver, [("a", "x", 1)])
    assert read(driver) == [(W("a", 0, 10000), 1, 1)]
