"""Cogrouped aggregations (Kafka Streams' cogroup): several grouped streams, one aggregate per
key, each stream folded with its own aggregator; unwindowed, per time window and per session.
Every case lists the whole output (the differential suite's ``cogroup`` family compares the
same operator with Kafka Streams on random inputs)."""
from __future__ import annotations

from datetime import timedelta

import pytest

import streamkit as sk
from streamkit.dsl.building.cogroup import CogroupedValue, CogroupedValueSerde
from streamkit.errors import TopologyError
from streamkit.serdes import Int, Json, String

from .conftest import rec

MS = timedelta(milliseconds=1)
W = sk.Windowed


def _amount(value: str) -> int:
    return int(value.split(":")[1])


def _cogrouped(b: sk.StreamsBuilder) -> "sk.dsl.CogroupedStream":
    """in1 (values "n", by key, weight 1) with in2 (values "g:n", grouped by g, weight 100)."""
    by_key = b.stream("in1").group_by_key()
    by_group = b.stream("in2").group_by(lambda k, v: v.split(":")[0])
    return by_key.cogroup(lambda k, v, total: total + int(v or 0)) \
        .cogroup(by_group, lambda k, v, total: total + 100 * _amount(v))


def test_cogroup_folds_each_stream_with_its_own_aggregator_into_one_aggregate(drive) -> None:
    driver = drive(lambda b: _cogrouped(b).aggregate(lambda: 0, name="agg").to_stream().to("out"))
    assert len(driver.topology.repartition_topics) == 1  # in2 is re-keyed by group
    in1, in2 = driver.input_topic("in1"), driver.input_topic("in2")
    in1.pipe_input("a", "1", timestamp=1)
    in2.pipe_input("x", "a:2", timestamp=5)
    in1.pipe_input("b", "4", timestamp=3)
    in1.pipe_input("a", None, timestamp=6)      # a None value is skipped, as by aggregate()
    in1.pipe_input(None, "5", timestamp=7)      # a None key is dropped
    in2.pipe_input("y", "b:1", timestamp=2)     # the result keeps the later timestamp, 3
    assert driver.output_topic("out").read_records() == [
        rec("a", 1, 1), rec("a", 201, 5), rec("b", 4, 3), rec("b", 104, 3)]
    assert dict(driver.store("agg").all()) == {"a": 201, "b": 104}


def test_a_windowed_cogroup_has_one_stream_time_for_all_its_inputs(drive) -> None:
    """in1's record at 12 closes [0,10) for in2 as well: in2's a@5 is late (Kafka Streams 4.1
    keeps one stream time per input and would still add it: defect K8 of tests/parity)."""
    windows = sk.TumblingWindows(size=10 * MS, grace=0 * MS)
    driver = drive(lambda b: _cogrouped(b).windowed_by(windows).aggregate(lambda: 0, name="agg")
                   .to_stream().to("out"))
    in1, in2 = driver.input_topic("in1"), driver.input_topic("in2")
    in1.pipe_input("a", "1", timestamp=12)
    in2.pipe_input("x", "a:2", timestamp=5)
    in2.pipe_input("x", "a:3", timestamp=15)
    in1.pipe_input("b", None, timestamp=16)     # a None value reaches its aggregator in windows
    assert [(r.key, r.value, r.timestamp) for r in driver.output_topic("out").read_records()] == [
        (W("a", 10, 20), 1, 12), (W("a", 10, 20), 301, 15), (W("b", 10, 20), 0, 16)]


def test_a_session_windowed_cogroup_merges_sessions_with_the_merger(drive) -> None:
    sessions = sk.SessionWindows(inactivity_gap=5 * MS, grace=0 * MS)
    driver = drive(lambda b: _cogrouped(b).windowed_by(sessions)
                   .aggregate(lambda: 0, lambda k, left, right: left + right, name="agg").to_stream().to("out"))
    in1, in2 = driver.input_topic("in1"), driver.input_topic("in2")
    in1.pipe_input("a", "1", timestamp=1)
    in2.pipe_input("x", "a:2", timestamp=4)
    in1.pipe_input("a", "7", timestamp=20)
    assert [(r.key, r.value, r.timestamp) for r in driver.output_topic("out").read_records()] == [
        (W("a", 1, 1), 1, 1), (W("a", 1, 1), None, 1), (W("a", 1, 4), 201, 4), (W("a", 20, 20), 7, 20)]


def test_session_cogroup_needs_a_merger_and_only_sessions_take_one(app_factory) -> None:
    def sessions_without_merger(b: sk.StreamsBuilder) -> None:
        _cogrouped(b).windowed_by(sk.SessionWindows(inactivity_gap=5 * MS)).aggregate(lambda: 0)

    def tumbling_with_merger(b: sk.StreamsBuilder) -> None:
        _cogrouped(b).windowed_by(sk.TumblingWindows(size=5 * MS)).aggregate(lambda: 0, lambda k, a, c: a + c)

    for build, message in ((sessions_without_merger, "needs merger"), (tumbling_with_merger, "session windows only")):
        with pytest.raises(TopologyError, match=message):
            app_factory(build).build()


def test_cogroup_refuses_the_same_grouped_stream_twice(app_factory) -> None:
    def twice(b: sk.StreamsBuilder) -> None:
        grouped = b.stream("in1").group_by_key()
        grouped.cogroup(lambda k, v, t: t).cogroup(grouped, lambda k, v, t: t)

    with pytest.raises(TopologyError, match="cogrouped twice"):
        app_factory(twice).build()


def test_cogroup_refuses_grouped_streams_with_different_key_serdes(app_factory) -> None:
    def mixed(b: sk.StreamsBuilder) -> None:
        b.stream("in1").group_by_key(key_serde=String()).cogroup(lambda k, v, t: t) \
            .cogroup(b.stream("in2").group_by_key(key_serde=Int()), lambda k, v, t: t)

    with pytest.raises(TopologyError, match="key serde"):
        app_factory(mixed).build()


@pytest.mark.parametrize("value", [CogroupedValue(0, "text"), CogroupedValue(1, 7), CogroupedValue(1, None)])
def test_cogrouped_values_round_trip_through_each_input_serde(value: CogroupedValue) -> None:
    serde = CogroupedValueSerde([String(), Int()])
    assert serde.deserialize(serde.serialize(value)) == value
    assert serde.serialize(None) is None and serde.deserialize(None) is None
    assert CogroupedValueSerde([Json()]).deserialize(CogroupedValueSerde([Json()]).serialize(
        CogroupedValue(0, {"k": 1}))) == CogroupedValue(0, {"k": 1})
