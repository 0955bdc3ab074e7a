"""count_distinct on grouped, time-windowed and session-windowed streams, through the
TopologyTestDriver: every update listed by hand as ``(key, value, timestamp)``, with
duplicates, None values and fields, out-of-order records inside grace, late records
after it, windows closing (suppressed finals), merged sessions, and the store's state
(the sorted JSON texts of the distinct values)."""
from __future__ import annotations

from datetime import timedelta
from typing import Any, Callable, List, Sequence, Tuple

import pytest

import streamkit as sk
from streamkit.errors import TopologyError
from streamkit.serdes import Bytes
from streamkit.testing import TopologyTestDriver

SEC = timedelta(seconds=1)
W = sk.Windowed
TUMBLING = sk.TumblingWindows(size=10 * SEC, grace=2 * SEC)  # [0,10000) closes at stream time 12000


def make_driver(build: Callable[[sk.StreamsBuilder], None]) -> TopologyTestDriver:
    app = sk.App("distinct")
    app.topology(build)
    return TopologyTestDriver(app)


def pipe(driver: TopologyTestDriver, inputs: Sequence[Tuple[Any, Any, int]]) -> None:
    source = driver.input_topic("in")
    for key, value, timestamp in inputs:
        source.pipe_input(key, value, timestamp)


def read(driver: TopologyTestDriver, topic: str = "out") -> List[Tuple[Any, Any, int]]:
    return [(r.key, r.value, r.timestamp) for r in driver.output_topic(topic).read_records()]


def test_tumbling_count_distinct_lists_every_update_and_drops_late_records() -> None:
    def build(b: sk.StreamsBuilder) -> None:
        (b.stream("in").group_by_key().windowed_by(TUMBLING)
         .count_distinct("user", name="agg", late_records_topic="late").to_stream().to("out"))

    driver = make_driver(build)
    pipe(driver, [
        ("page", {"user": "u1"}, 1000),
        ("page", {"user": "u2"}, 2000),
        ("page", {"user": "u1"}, 3000),    # seen: the count stays, the update is still emitted
        ("other", {"user": "u1"}, 4000),   # another key counts on its own
        ("page", {"user": None}, 5000),    # a None field is not counted
        ("page", None, 6000),              # nor a None value
        ("page", {"user": "u3"}, 11000),   # the next window; [0,10000) is open until 12000
        ("page", {"user": "u3"}, 9000),    # out of order, inside grace
        ("page", {"user": "u4"}, 12000),   # stream time 12000 closes [0,10000)
        ("page", {"user": "u5"}, 8000),    # late: dropped, written to "late"
        ("new", None, 13000),              # a None value still opens its window, at 0
    ])
    assert read(driver) == [
        (W("page", 0, 10000), 1, 1000), (W("page", 0, 10000), 2, 2000), (W("page", 0, 10000), 2, 3000),
        (W("other", 0, 10000), 1, 4000), (W("page", 0, 10000), 2, 5000), (W("page", 0, 10000), 2, 6000),
        (W("page", 10000, 20000), 1, 11000), (W("page", 0, 10000), 3, 9000),
        (W("page", 10000, 20000), 2, 12000), (W("new", 10000, 20000), 0, 13000)]
    assert driver.metrics()["late_records_dropped"] == 1
    late = driver.output_topic("late", key_serde=Bytes(), value_serde=Bytes()).read_records()
    assert [(r.key, r.value, r.timestamp) for r in late] == [(b"page", b'{"user":"u5"}', 8000)]
    # The store holds each window's distinct values (their JSON texts, sorted) for its retention
    # (size + grace: at stream time 13000 the windows [0,10000) are gone).
    assert sorted(driver.store("agg").fetch_all(0, 100_000), key=lambda kv: (kv[0].key, kv[0].start)) == [
        (W("new", 10000, 20000), []), (W("page", 10000, 20000), ['"u3"', '"u4"'])]


def test_suppressed_count_distinct_emits_each_window_once_when_it_closes() -> None:
    def build(b: sk.StreamsBuilder) -> None:
        (b.stream("in").group_by_key().windowed_by(TUMBLING).count_distinct("user", name="agg")
         .suppress(sk.Suppressed.until_window_closes()).to_stream().to("out"))

    driver = make_driver(build)
    pipe(driver, [("a", {"user": 1}, 1000), ("a", {"user": 2}, 2000), ("a", {"user": 1}, 3000),
                  ("b", {"user": 1}, 4000), ("a", {"user": 3}, 11000)])
    assert read(driver) == []  # stream time 11000: [0,10000) is open until 12000
    pipe(driver, [("a", {"user": 3}, 12000)])
    assert read(driver) == [(W("a", 0, 10000), 2, 3000), (W("b", 0, 10000), 1, 4000)]
    pipe(driver, [("a", {"user": 9}, 9999), ("c", {"user": 1}, 22000)])  # late; then [10000,20000) closes
    assert read(driver) == [(W("a", 10000, 20000), 1, 12000)]
    assert driver.metrics()["late_records_dropped"] == 1


def test_hopping_count_distinct_of_a_function_counts_each_window() -> None:
    hopping = sk.HoppingWindows(size=10 * SEC, advance=5 * SEC, grace=1 * SEC)

    def build(b: sk.StreamsBuilder) -> None:
        (b.stream("in").group_by_key().windowed_by(hopping)
         .count_distinct(lambda value: value % 3).to_stream().to("out"))

    driver = make_driver(build)
    pipe(driver, [("k", 1, 1000), ("k", 4, 6000), ("k", 2, 7000), ("k", 3, 12000), ("k", 5, 4000)])
    assert read(driver) == [
        (W("k", 0, 10000), 1, 1000),                                     # {1}
        (W("k", 0, 10000), 1, 6000), (W("k", 5000, 15000), 1, 6000),     # 4 % 3 == 1
        (W("k", 0, 10000), 2, 7000), (W("k", 5000, 15000), 2, 7000),     # {1, 2}
        (W("k", 5000, 15000), 3, 12000), (W("k", 10000, 20000), 1, 12000),  # 3 % 3 == 0
        # 4000 at stream time 12000: [0,10000) closed at 11000 and [-5000,5000) does not exist
    ]
    assert driver.metrics()["late_records_dropped"] == 1


def test_session_count_distinct_merges_the_values_of_bridged_sessions() -> None:
    sessions = sk.SessionWindows(inactivity_gap=5 * SEC, grace=10 * SEC)

    def build(b: sk.StreamsBuilder) -> None:
        (b.stream("in").group_by_key().windowed_by(sessions)
         .count_distinct("user", name="agg").to_stream().to("out"))

    driver = make_driver(build)
    pipe(driver, [("a", {"user": "x"}, 1000), ("a", {"user": "y"}, 10000), ("a", {"user": "x"}, 5500),
                  ("a", {"user": "z"}, 30000)])
    assert read(driver) == [
        (W("a", 1000, 1000), 1, 1000), (W("a", 10000, 10000), 1, 10000),
        (W("a", 1000, 1000), None, 1000), (W("a", 10000, 10000), None, 10000),  # merged away
        (W("a", 1000, 10000), 2, 10000),                                        # {x, y}
        (W("a", 30000, 30000), 1, 30000)]


def test_grouped_count_distinct_counts_per_key_and_skips_none_values() -> None:
    def build(b: sk.StreamsBuilder) -> None:
        b.stream("in").group_by(lambda key, value: value["page"]).count_distinct("user").to_stream().to("out")

    driver = make_driver(build)
    pipe(driver, [("e1", {"page": "home", "user": "u1"}, 1), ("e2", {"page": "home", "user": "u2"}, 2),
                  ("e3", {"page": "home", "user": "u1"}, 3), ("e4", {"page": "docs", "user": "u1"}, 4),
                  ("e5", {"page": "home", "user": [1, 2]}, 5), ("e6", {"page": "home", "user": (1, 2)}, 6)])
    assert read(driver) == [("home", 1, 1), ("home", 2, 2), ("home", 2, 3), ("docs", 1, 4),
                            ("home", 3, 5), ("home", 3, 6)]  # [1, 2] and (1, 2) are one value


@pytest.mark.parametrize("value_of, message", [
    ("", "the field name must not be empty"),
    (42, "value function must be callable"),
    (lambda key, value: key, "value function must accept (value)"),
])
def test_count_distinct_rejects_what_names_no_value(value_of: Any, message: str) -> None:
    def build(b: sk.StreamsBuilder) -> None:
        b.stream("in").group_by_key().windowed_by(TUMBLING).count_distinct(value_of)

    app = sk.App("distinct")
    app.topology(build)
    with pytest.raises(TopologyError, match=message.replace("(", r"\(").replace(")", r"\)")):
        app.build()


def test_describe_names_the_aggregation() -> None:
    app = sk.App("distinct")
    app.topology(lambda b: b.stream("in").group_by_key().windowed_by(TUMBLING)
                 .count_distinct("user", name="agg").to_stream().to("out"))
    text = app.describe()
    assert "Processor: agg (windowed_aggregate: count_distinct, TumblingWindows(" in text
    assert "Processor: agg.result (table_map_values)" in text


@pytest.mark.parametrize("backend", ["memory", "rocksdb"])
def test_with_caching_each_window_forwards_its_count_once_per_commit(backend: str, tmp_path: Any) -> None:
    """The cache holds the distinct values; at the commit the view turns each window's
    (new, old) sets into counts."""
    import orjson

    from streamkit.runtime.task.factory import TaskSettings, create_task
    from streamkit.runtime.context.collector import RecordCollector

    app = sk.App("distinct-cache")
    app.topology(lambda b: b.stream(app.topic("in", partitions=1)).group_by_key()
                 .windowed_by(sk.TumblingWindows(timedelta(milliseconds=10))).count_distinct("u", name="w")
                 .to_stream().to("out"))
    topology = app.build()
    collector = RecordCollector()
    task = create_task(topology, topology.sub_topologies[0], 0, partitions={t: 1 for t in topology.topics},
                       collector=collector, wall_clock=lambda: 0,
                       settings=TaskSettings(store_backend=backend, state_dir=str(tmp_path), caching=True))

    def outputs() -> List[Tuple[int, Any, int]]:
        return [(orjson.loads(k)["start"], orjson.loads(v), ts) for topic, _p, records in collector.drain()
                if topic == "out" for k, v, ts, _h in records]

    try:
        task.process("in", [(0, 1, b'"a"', b'{"u":1}', None), (1, 2, b'"a"', b'{"u":2}', None),
                            (2, 3, b'"a"', b'{"u":1}', None), (3, 12, b'"a"', b'{"u":1}', None)])
        assert outputs() == []
        task.prepare_commit()
        assert outputs() == [(0, 2, 3), (10, 1, 12)]
        task.stores.persist({})
        task.process("in", [(4, 13, b'"a"', b'{"u":5}', None)])
        task.prepare_commit()
        assert outputs() == [(10, 2, 13)]
    finally:
        task.stores.close()
