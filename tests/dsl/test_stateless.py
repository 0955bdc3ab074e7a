"""Stateless Stream operations through the TopologyTestDriver: full (key, value, timestamp) outputs."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any, List, Tuple

import pytest

import streamkit as sk
from streamkit.errors import RecordError
from streamkit.serdes import Bytes, Int, Json, String
from streamkit.testing import TestRecord

from .conftest import rec

INPUT = [("a", 1, 10), ("b", 20, 20), ("c", 3, 30), ("d", 40, 40)]


def pipe(driver, topic: str, records) -> None:
    driver.input_topic(topic).pipe_records(records)


# -- filter / filter_not ------------------------------------------------------------

def test_filter_keeps_matching_records_with_their_timestamps(drive) -> None:
    driver = drive(lambda b: b.stream("in").filter(lambda k, v: v > 10).to("out"))
    pipe(driver, "in", INPUT)
    assert driver.output_topic("out").read_records() == [rec("b", 20, 20), rec("d", 40, 40)]


def test_filter_not_drops_matching_records(drive) -> None:
    driver = drive(lambda b: b.stream("in").filter_not(lambda k, v: v > 10).to("out"))
    pipe(driver, "in", INPUT)
    assert driver.output_topic("out").read_records() == [rec("a", 1, 10), rec("c", 3, 30)]


def test_filter_predicate_sees_key_and_value(drive) -> None:
    driver = drive(lambda b: b.stream("in").filter(lambda k, v: k == "c" or v == 1).to("out"))
    pipe(driver, "in", INPUT)
    assert driver.output_topic("out").read_key_values() == [("a", 1), ("c", 3)]


# -- map / map_values / flat_map / flat_map_values / select_key ------------------------

def test_map_replaces_key_and_value(drive) -> None:
    driver = drive(lambda b: b.stream("in").map(lambda k, v: (k.upper(), v * 2)).to("out"))
    pipe(driver, "in", INPUT[:2])
    assert driver.output_topic("out").read_records() == [rec("A", 2, 10), rec("B", 40, 20)]


def test_map_values_keeps_the_key(drive) -> None:
    driver = drive(lambda b: b.stream("in").map_values(lambda v: {"doubled": v * 2}).to("out"))
    pipe(driver, "in", INPUT[:2])
    assert driver.output_topic("out").read_records() == [rec("a", {"doubled": 2}, 10),
                                                         rec("b", {"doubled": 40}, 20)]


def test_flat_map_emits_zero_one_or_many_records(drive) -> None:
    def explode(key: str, value: int) -> List[Tuple[str, int]]:
        return [(f"{key}{i}", i) for i in range(value)]
    driver = drive(lambda b: b.stream("in").flat_map(explode).to("out"))
    pipe(driver, "in", [("x", 0, 1), ("y", 1, 2), ("z", 3, 3)])
    assert driver.output_topic("out").read_records() == [
        rec("y0", 0, 2), rec("z0", 0, 3), rec("z1", 1, 3), rec("z2", 2, 3)]


def test_flat_map_accepts_generators_and_none(drive) -> None:
    def gen(key: str, value: int):
        if value:
            yield key, value
            yield key + "!", -value
    driver = drive(lambda b: b.stream("in").flat_map(lambda k, v: None if v < 0 else gen(k, v)).to("out"))
    pipe(driver, "in", [("a", -1, 1), ("b", 0, 2), ("c", 5, 3)])
    assert driver.output_topic("out").read_records() == [rec("c", 5, 3), rec("c!", -5, 3)]


def test_flat_map_values_keeps_the_key(drive) -> None:
    driver = drive(lambda b: b.stream("in").flat_map_values(lambda line: line.split()).to("out"))
    pipe(driver, "in", [("k1", "the cat", 5), ("k2", "", 6), ("k3", "dog", 7)])
    assert driver.output_topic("out").read_records() == [rec("k1", "the", 5), rec("k1", "cat", 5),
                                                         rec("k3", "dog", 7)]


def test_select_key_changes_only_the_key(drive) -> None:
    driver = drive(lambda b: b.stream("in").select_key(lambda k, v: v["user"]).to("out"))
    pipe(driver, "in", [("x", {"user": "ann"}, 3), (None, {"user": "bob"}, 4)])
    assert driver.output_topic("out").read_records() == [rec("ann", {"user": "ann"}, 3),
                                                         rec("bob", {"user": "bob"}, 4)]


# -- peek / foreach -----------------------------------------------------------------

def test_peek_sees_every_record_and_passes_it_on(drive) -> None:
    seen: List[Tuple[Any, Any]] = []
    driver = drive(lambda b: b.stream("in").peek(lambda k, v: seen.append((k, v))).filter(
        lambda k, v: v > 10).to("out"))
    pipe(driver, "in", INPUT)
    assert seen == [("a", 1), ("b", 20), ("c", 3), ("d", 40)]
    assert driver.output_topic("out").read_records() == [rec("b", 20, 20), rec("d", 40, 40)]


def test_foreach_is_terminal_and_sees_every_record(drive) -> None:
    seen: List[Tuple[Any, Any]] = []
    results = []

    def build(b: sk.StreamsBuilder) -> None:
        results.append(b.stream("in").map_values(lambda v: v + 1).foreach(lambda k, v: seen.append((k, v))))
    driver = drive(build)
    pipe(driver, "in", INPUT[:3])
    assert results == [None]
    assert seen == [("a", 2), ("b", 21), ("c", 4)]
    assert "foreach" in driver.app.describe()


# -- split / branch -----------------------------------------------------------------

def _split_app(with_default: bool):
    def build(b: sk.StreamsBuilder) -> None:
        splitter = (b.stream("in").split(name="route")
                    .branch(lambda k, v: v >= 100, name="huge")
                    .branch(lambda k, v: v >= 10, name="big"))
        branches = splitter.default_branch(name="small") if with_default else splitter.no_default_branch()
        for name, stream in branches.items():
            stream.to(f"out-{name}")
        build.branches = branches  # type: ignore[attr-defined]
    return build


def test_split_routes_to_the_first_matching_branch(drive) -> None:
    build = _split_app(with_default=True)
    driver = drive(build)
    assert list(build.branches) == ["huge", "big", "small"]
    assert all(isinstance(s, sk.Stream) for s in build.branches.values())
    pipe(driver, "in", [("a", 5, 1), ("b", 500, 2), ("c", 50, 3), ("d", 100, 4), ("e", 10, 5)])
    # 500 and 100 match both predicates: the first one wins, never both
    assert driver.output_topic("out-huge").read_records() == [rec("b", 500, 2), rec("d", 100, 4)]
    assert driver.output_topic("out-big").read_records() == [rec("c", 50, 3), rec("e", 10, 5)]
    assert driver.output_topic("out-small").read_records() == [rec("a", 5, 1)]


def test_no_default_branch_drops_unmatched_records(drive) -> None:
    build = _split_app(with_default=False)
    driver = drive(build)
    assert list(build.branches) == ["huge", "big"]
    pipe(driver, "in", [("a", 5, 1), ("b", 500, 2), ("c", 50, 3)])
    assert driver.output_topic("out-huge").read_key_values() == [("b", 500)]
    assert driver.output_topic("out-big").read_key_values() == [("c", 50)]
    assert "out-small" not in driver.topology.topics


def test_split_branch_names_default_to_positions(drive) -> None:
    captured = {}

    def build(b: sk.StreamsBuilder) -> None:
        branches = (b.stream("in").split().branch(lambda k, v: v % 2 == 0)
                    .branch(lambda k, v: v % 3 == 0).default_branch())
        captured.update(branches)
        branches["1"].to("even")
        branches["2"].to("odd-div3")
        branches["default"].to("other")
    driver = drive(build)
    assert list(captured) == ["1", "2", "default"]
    pipe(driver, "in", [("k", n, n) for n in range(1, 8)])
    assert driver.output_topic("even").read_values() == [2, 4, 6]
    assert driver.output_topic("odd-div3").read_values() == [3]
    assert driver.output_topic("other").read_values() == [1, 5, 7]


def test_split_branch_streams_can_be_chained(drive) -> None:
    def build(b: sk.StreamsBuilder) -> None:
        branches = b.stream("in").split().branch(lambda k, v: v > 0, name="pos").default_branch()
        branches["pos"].map_values(lambda v: v * 10).to("pos")
        branches["default"].map_values(abs).to("rest")
    driver = drive(build)
    pipe(driver, "in", [("a", 1, 1), ("b", -2, 2)])
    assert driver.output_topic("pos").read_records() == [rec("a", 10, 1)]
    assert driver.output_topic("rest").read_records() == [rec("b", 2, 2)]


# -- merge / repartition ----------------------------------------------------------------

def test_merge_interleaves_two_streams(drive) -> None:
    def build(b: sk.StreamsBuilder) -> None:
        left = b.stream("left").map_values(lambda v: f"L{v}")
        right = b.stream("right").map_values(lambda v: f"R{v}")
        left.merge(right).to("out")
    driver = drive(build)
    driver.input_topic("left").pipe_input("a", 1, timestamp=1)
    driver.input_topic("right").pipe_input("b", 2, timestamp=2)
    driver.input_topic("left").pipe_input("c", 3, timestamp=3)
    assert driver.output_topic("out").read_records() == [rec("a", "L1", 1), rec("b", "R2", 2),
                                                         rec("c", "L3", 3)]


def test_explicit_repartition_passes_records_through_an_internal_topic(drive) -> None:
    def build(b: sk.StreamsBuilder) -> None:
        b.stream("in").select_key(lambda k, v: v["id"]).repartition(name="by-id").to("out")
    driver = drive(build, app_id="rp")
    [internal] = driver.topology.repartition_topics
    assert internal.startswith("rp-by-id")
    assert len(driver.topology.sub_topologies) == 2
    pipe(driver, "in", [("x", {"id": "u1"}, 7), ("y", {"id": "u2"}, 8)])
    assert driver.output_topic("out").read_records() == [rec("u1", {"id": "u1"}, 7),
                                                         rec("u2", {"id": "u2"}, 8)]


def test_explicit_repartition_uses_given_serdes_and_partitions(drive) -> None:
    def build(b: sk.StreamsBuilder) -> None:
        (b.stream("in").repartition(name="re", partitions=4, key_serde=String(), value_serde=Int())
         .to("out"))
    driver = drive(build, app_id="rp")
    [internal] = driver.topology.repartition_topics
    spec = driver.topology.topics[internal]
    assert (spec.internal, spec.partitions, spec.key_serde, spec.value_serde) == (True, 4, String(), Int())
    driver.input_topic("in").pipe_input("k", 42, timestamp=9)
    internal = driver.output_topic(internal, key_serde=Bytes(), value_serde=Bytes()).read_records()
    assert internal == [rec(b"k", (42).to_bytes(8, "big"), 9)]
    assert driver.output_topic("out").read_records() == [rec("k", 42, 9)]


# -- to(): serdes ------------------------------------------------------------------

def test_to_uses_explicit_serdes(drive) -> None:
    driver = drive(lambda b: b.stream("in").to("out", key_serde=Json(), value_serde=Int()))
    driver.input_topic("in").pipe_input("k", 5, timestamp=1)
    raw = driver.output_topic("out", key_serde=Bytes(), value_serde=Bytes()).read_records()
    assert raw == [rec(b'"k"', b"\x00" * 7 + b"\x05", 1)]


def test_to_uses_the_declared_topic_serdes(app_factory, driver_factory) -> None:
    app = app_factory()
    out = app.topic("out", key_serde=Int(), value_serde=String())
    app.topology(lambda b: b.stream("in").map(lambda k, v: (v, str(v))).to(out))
    driver = driver_factory(app)
    driver.input_topic("in").pipe_input("k", 5, timestamp=1)
    raw = driver.output_topic("out", key_serde=Bytes(), value_serde=Bytes()).read_records()
    assert raw == [rec(b"\x00" * 7 + b"\x05", b"5", 1)]


def test_to_by_name_finds_the_declared_topic(app_factory, driver_factory) -> None:
    app = app_factory()
    app.topic("out", key_serde=Int(), value_serde=String())
    app.topology(lambda b: b.stream("in").map(lambda k, v: (v, str(v))).to("out"))
    driver = driver_factory(app)
    driver.input_topic("in").pipe_input("k", 7, timestamp=1)
    assert driver.output_topic("out", key_serde=Bytes(), value_serde=Bytes()).read_key_values() == [
        (b"\x00" * 7 + b"\x07", b"7")]


def test_explicit_serdes_win_over_declared_ones(app_factory, driver_factory) -> None:
    app = app_factory()
    app.topic("out", key_serde=Int(), value_serde=String())
    app.topology(lambda b: b.stream("in").map(lambda k, v: (len(k), v)).to("out", value_serde=Json()))
    driver = driver_factory(app)
    driver.input_topic("in").pipe_input("key", {"n": 1}, timestamp=1)
    raw = driver.output_topic("out", key_serde=Bytes(), value_serde=Bytes()).read_records()
    # value: the explicit Json serde; key: still the declared Int serde
    assert raw == [rec(b"\x00" * 7 + b"\x03", b'{"n":1}', 1)]


def test_undeclared_topics_use_the_app_default_serdes(drive) -> None:
    driver = drive(lambda b: b.stream("in").to("out"), default_key_serde=Int(), default_value_serde=String())
    driver.input_topic("in").pipe_input(3, "three", timestamp=1)
    assert driver.output_topic("out", key_serde=Bytes(), value_serde=Bytes()).read_records() == [
        rec(b"\x00" * 7 + b"\x03", b"three", 1)]


def test_default_app_serdes_are_string_keys_and_json_values(drive) -> None:
    driver = drive(lambda b: b.stream("in").to("out"))
    driver.input_topic("in").pipe_input("k", {"a": [1]}, timestamp=1)
    assert driver.output_topic("out", key_serde=Bytes(), value_serde=Bytes()).read_records() == [
        rec(b"k", b'{"a":[1]}', 1)]


def test_input_records_with_declared_serdes(app_factory, driver_factory) -> None:
    app = app_factory()
    numbers = app.topic("numbers", key_serde=Int(), value_serde=Int())
    app.topology(lambda b: b.stream(numbers).map(lambda k, v: (str(k), {"sum": k + v})).to("out"))
    driver = driver_factory(app)
    driver.input_topic("numbers").pipe_raw(b"\x00" * 7 + b"\x02", b"\x00" * 7 + b"\x03", timestamp=4)
    assert driver.output_topic("out").read_records() == [rec("2", {"sum": 5}, 4)]


def test_sink_serialization_error_names_the_topic(drive) -> None:
    driver = drive(lambda b: b.stream("in").to("out", value_serde=Int()))
    with pytest.raises(RecordError, match="writing to topic 'out'.*Int serde expects int, got str"):
        driver.input_topic("in").pipe_input("k", "not an int", timestamp=1)


# -- time and headers ------------------------------------------------------------------

def test_timestamps_propagate_through_a_chain(drive) -> None:
    driver = drive(lambda b: (b.stream("in").filter(lambda k, v: True).map_values(lambda v: v)
                              .select_key(lambda k, v: k).flat_map_values(lambda v: [v, v]).to("out")))
    pipe(driver, "in", [("a", 1, 1000), ("b", 2, 5)])  # out of order stays as is
    assert driver.output_topic("out").read_records() == [rec("a", 1, 1000), rec("a", 1, 1000),
                                                         rec("b", 2, 5), rec("b", 2, 5)]


def test_pipe_input_timestamp_defaults_to_the_wall_clock(drive) -> None:
    driver = drive(lambda b: b.stream("in").to("out"))
    driver.input_topic("in").pipe_input("a", 1)
    driver.advance_wall_clock(timedelta(seconds=2))
    driver.input_topic("in").pipe_input("b", 2)
    driver.input_topic("in").pipe_input("c", 3, timestamp=datetime(2024, 1, 1, tzinfo=timezone.utc))
    assert driver.output_topic("out").read_records() == [rec("a", 1, 0), rec("b", 2, 2000),
                                                         rec("c", 3, 1704067200000)]


def test_timestamp_extractor_returning_epoch_millis(drive) -> None:
    driver = drive(lambda b: b.stream("in", timestamp=lambda k, v: v["ts"]).to("out"))
    driver.input_topic("in").pipe_input("a", {"ts": 1234}, timestamp=1)
    with pytest.raises(RecordError, match="a float timestamp 99.9"):  # never rounded or truncated silently
        driver.input_topic("in").pipe_input("b", {"ts": 99.9}, timestamp=2)
    assert driver.output_topic("out").read_records() == [rec("a", {"ts": 1234}, 1234)]


@pytest.mark.parametrize("tz", [timezone.utc, timezone(timedelta(hours=2))], ids=["utc", "plus2"])
def test_timestamp_extractor_returning_an_aware_datetime(drive, tz) -> None:
    driver = drive(lambda b: b.stream("in", timestamp=lambda k, v: datetime.fromisoformat(v)).to("out"))
    when = datetime(2024, 3, 1, 12, 0, 0, 500000, tzinfo=tz)
    driver.input_topic("in").pipe_input("a", when.isoformat(), timestamp=1)
    expected = int(when.timestamp() * 1000)
    assert driver.output_topic("out").read_records() == [rec("a", when.isoformat(), expected)]
    if tz is timezone.utc:
        assert expected == 1709294400500


@pytest.mark.parametrize("bad, message", [
    ("2024-03-01T12:00:00", "naive datetime"),
    ("text", "must return epoch milliseconds"),
    (True, "must return epoch milliseconds"),
    (-1.5, "a float timestamp"),
], ids=["naive-datetime", "str", "bool", "negative-float"])
def test_timestamp_extractor_bad_results_are_record_errors(drive, bad, message) -> None:
    def extract(key: Any, value: Any) -> Any:
        return datetime.fromisoformat(bad) if bad == "2024-03-01T12:00:00" else bad
    driver = drive(lambda b: b.stream("in", timestamp=extract).to("out"))
    with pytest.raises(RecordError, match=message) as excinfo:
        driver.input_topic("in").pipe_input("a", 1, timestamp=1)
    assert excinfo.value.stage == "processing"
    assert driver.output_topic("out").read_records() == []


def test_timestamp_extractor_negative_int_is_rejected(drive) -> None:
    driver = drive(lambda b: b.stream("in", timestamp=lambda k, v: v).to("out"))
    with pytest.raises(RecordError, match="negative timestamp"):
        driver.input_topic("in").pipe_input("a", -5, timestamp=1)
    assert driver.output_topic("out").read_records() == []


def test_timestamp_extractor_exception_names_the_source(drive) -> None:
    driver = drive(lambda b: b.stream("in", timestamp=lambda k, v: v["ts"]).to("out"))
    with pytest.raises(RecordError, match=r"in node 'in \(timestamp extractor\)': KeyError"):
        driver.input_topic("in").pipe_input("a", {}, timestamp=1)


def test_headers_propagate_to_sinks(drive) -> None:
    headers = (("trace-id", b"abc"), ("source", b"test"))
    driver = drive(lambda b: b.stream("in").map_values(lambda v: v + 1).flat_map(
        lambda k, v: [(k, v), (k + "2", v)]).to("out"))
    driver.input_topic("in").pipe_input("a", 1, timestamp=3, headers=headers)
    driver.input_topic("in").pipe_input("b", 2, timestamp=4)
    assert driver.output_topic("out").read_records() == [
        rec("a", 2, 3, headers), rec("a2", 2, 3, headers), rec("b", 3, 4), rec("b2", 3, 4)]


def test_headers_survive_a_repartition(drive) -> None:
    headers = (("h", b"1"),)
    driver = drive(lambda b: b.stream("in").select_key(lambda k, v: v).repartition().to("out"))
    driver.input_topic("in").pipe_input("a", "x", timestamp=3, headers=headers)
    assert driver.output_topic("out").read_records() == [rec("x", "x", 3, headers)]


def test_pipe_records_accepts_test_records_and_tuples(drive) -> None:
    driver = drive(lambda b: b.stream("in").to("out"))
    driver.input_topic("in").pipe_records([TestRecord("a", 1, 5, (("h", b"v"),)), ("b", 2, 6), ("c", 3)])
    assert driver.output_topic("out").read_records() == [rec("a", 1, 5, (("h", b"v"),)), rec("b", 2, 6),
                                                         rec("c", 3, 0)]


def test_output_topic_reading_consumes(drive) -> None:
    driver = drive(lambda b: b.stream("in").to("out"))
    out = driver.output_topic("out")
    driver.input_topic("in").pipe_input("a", 1, timestamp=1)
    assert out.queue_size() == 1 and not out.is_empty()
    assert out.read_values() == [1]
    assert out.is_empty() and out.read_records() == []


def test_one_stream_feeding_several_operations(drive) -> None:
    def build(b: sk.StreamsBuilder) -> None:
        s = b.stream("in")
        s.filter(lambda k, v: v > 1).to("big")
        s.map_values(lambda v: -v).to("neg")
    driver = drive(build)
    pipe(driver, "in", [("a", 1, 1), ("b", 2, 2)])
    assert driver.output_topic("big").read_records() == [rec("b", 2, 2)]
    assert driver.output_topic("neg").read_records() == [rec("a", -1, 1), rec("b", -2, 2)]


def test_a_topic_written_and_read_by_the_app_is_processed_through(drive) -> None:
    def build(b: sk.StreamsBuilder) -> None:
        b.stream("raw").map_values(lambda v: v.strip()).to("clean")
        b.stream("clean").filter(lambda k, v: v).map_values(str.upper).to("shouted")
    driver = drive(build)
    driver.input_topic("raw").pipe_records([("a", " hi ", 1), ("b", "  ", 2)])
    assert driver.output_topic("clean").read_records() == [rec("a", "hi", 1), rec("b", "", 2)]
    assert driver.output_topic("shouted").read_records() == [rec("a", "HI", 1)]
