"""Grouped-stream aggregations: every update is emitted, stores hold the latest value."""
from __future__ import annotations

from typing import Callable

import pytest

import streamkit as sk
from streamkit.serdes import Bytes, Int, String

from .conftest import rec

WORDS = [("u1", "apple", 1), ("u2", "banana", 2), ("u1", "apple", 3), ("u3", "apricot", 4),
         ("u2", "apple", 5)]


def counts_by_key(b: sk.StreamsBuilder) -> None:
    b.stream("in").group_by_key().count(name="counts").to_stream().to("out")


# -- count ------------------------------------------------------------------------------

def test_count_emits_every_update(drive) -> None:
    driver = drive(counts_by_key)
    driver.input_topic("in").pipe_records([("a", "x", 1), ("b", "y", 2), ("a", "z", 3), ("a", "w", 4)])
    assert driver.output_topic("out").read_records() == [
        rec("a", 1, 1), rec("b", 1, 2), rec("a", 2, 3), rec("a", 3, 4)]
    assert driver.store("counts").get("a") == 3
    assert driver.store("counts").get("b") == 1
    assert driver.store("counts").get("nope") is None


# The same answer three ways: keys already right, re-keyed then grouped (repartition),
# and group_by (repartition).
def _count_prekeyed(b: sk.StreamsBuilder) -> None:
    b.stream("in").map(lambda k, v: (v, v)).to("keyed")
    b.stream("keyed").group_by_key().count(name="counts").to_stream().to("out")


def _count_select_key(b: sk.StreamsBuilder) -> None:
    b.stream("in").select_key(lambda k, v: v).group_by_key().count(name="counts").to_stream().to("out")


def _count_group_by(b: sk.StreamsBuilder) -> None:
    b.stream("in").group_by(lambda k, v: v).count(name="counts").to_stream().to("out")


@pytest.mark.parametrize("build, repartitions", [
    (_count_prekeyed, 0), (_count_select_key, 1), (_count_group_by, 1),
], ids=["group_by_key", "select_key+group_by_key", "group_by"])
def test_grouping_gives_the_same_counts_with_or_without_repartition(drive, build, repartitions) -> None:
    driver = drive(build, app_id="wc")
    assert len(driver.topology.repartition_topics) == repartitions
    driver.input_topic("in").pipe_records(WORDS)
    assert driver.output_topic("out").read_records() == [
        rec("apple", 1, 1), rec("banana", 1, 2), rec("apple", 2, 3), rec("apricot", 1, 4), rec("apple", 3, 5)]
    assert dict(driver.store("counts").all()) == {"apple": 3, "banana": 1, "apricot": 1}


def test_group_by_writes_rekeyed_records_to_the_repartition_topic(drive) -> None:
    driver = drive(_count_group_by, app_id="wc")
    assert driver.topology.repartition_topics == ("wc-counts-repartition",)
    driver.input_topic("in").pipe_records(WORDS[:2])
    internal = driver.output_topic("wc-counts-repartition").read_records()
    assert internal == [rec("apple", "apple", 1), rec("banana", "banana", 2)]


def test_count_of_a_keyless_topic_after_group_by(app_factory, driver_factory) -> None:
    app = app_factory(app_id="wordcount")
    lines = app.topic("lines", key_serde=sk.serdes.Void(), value_serde=String())
    app.topology(lambda b: (b.stream(lines).flat_map_values(lambda line: line.split())
                            .group_by(lambda _, word: word).count(name="word-counts").to_stream()
                            .to("word-counts")))
    driver = driver_factory(app)
    driver.input_topic("lines").pipe_value("the cat the", timestamp=10)
    driver.input_topic("lines").pipe_value("dog", timestamp=11)
    assert driver.output_topic("word-counts").read_records() == [
        rec("the", 1, 10), rec("cat", 1, 10), rec("the", 2, 10), rec("dog", 1, 11)]


# -- reduce / aggregate ----------------------------------------------------------------

def test_reduce_emits_every_update(drive) -> None:
    driver = drive(lambda b: b.stream("in").group_by_key().reduce(lambda agg, v: agg + v, name="sums")
                   .to_stream().to("out"))
    driver.input_topic("in").pipe_records([("a", 5, 1), ("b", 1, 2), ("a", 7, 3), ("a", -2, 4)])
    assert driver.output_topic("out").read_records() == [
        rec("a", 5, 1), rec("b", 1, 2), rec("a", 12, 3), rec("a", 10, 4)]
    assert dict(driver.store("sums").all()) == {"a": 10, "b": 1}


def test_reduce_first_value_is_taken_as_is(drive) -> None:
    calls = []

    def reducer(agg, value):
        calls.append((agg, value))
        return max(agg, value)
    driver = drive(lambda b: b.stream("in").group_by_key().reduce(reducer, name="max").to_stream().to("out"))
    driver.input_topic("in").pipe_records([("a", 3, 1), ("a", 9, 2), ("a", 4, 3)])
    assert calls == [(3, 9), (9, 4)]
    assert driver.output_topic("out").read_values() == [3, 9, 9]


def test_aggregate_folds_from_the_initializer(drive) -> None:
    def build(b: sk.StreamsBuilder) -> None:
        (b.stream("in").group_by_key()
         .aggregate(lambda: {"n": 0, "items": []},
                    lambda key, value, agg: {"n": agg["n"] + 1, "items": agg["items"] + [f"{key}:{value}"]},
                    name="agg")
         .to_stream().to("out"))
    driver = drive(build)
    driver.input_topic("in").pipe_records([("a", "x", 1), ("b", "y", 2), ("a", "z", 3)])
    assert driver.output_topic("out").read_records() == [
        rec("a", {"n": 1, "items": ["a:x"]}, 1),
        rec("b", {"n": 1, "items": ["b:y"]}, 2),
        rec("a", {"n": 2, "items": ["a:x", "a:z"]}, 3)]
    assert driver.store("agg").get("a") == {"n": 2, "items": ["a:x", "a:z"]}


def test_aggregate_initializer_is_called_once_per_new_key(drive) -> None:
    inits = []

    def init():
        inits.append(1)
        return 0
    driver = drive(lambda b: b.stream("in").group_by_key().aggregate(init, lambda k, v, a: a + v, name="s")
                   .to_stream().to("out"))
    driver.input_topic("in").pipe_records([("a", 1, 1), ("a", 2, 2), ("b", 3, 3), ("a", 4, 4)])
    assert len(inits) == 2
    assert driver.output_topic("out").read_key_values() == [("a", 1), ("a", 3), ("b", 3), ("a", 7)]


@pytest.mark.parametrize("operation", ["reduce", "aggregate"])
def test_null_values_are_ignored_by_reduce_and_aggregate(drive, operation) -> None:
    def build(b: sk.StreamsBuilder) -> None:
        grouped = b.stream("in").group_by_key()
        table = (grouped.reduce(lambda agg, v: agg + v, name="agg") if operation == "reduce"
                 else grouped.aggregate(lambda: 0, lambda k, v, agg: agg + v, name="agg"))
        table.to_stream().to("out")
    driver = drive(build)
    driver.input_topic("in").pipe_records([("a", 1, 1), ("a", None, 2), ("b", None, 3), ("a", 2, 4)])
    assert driver.output_topic("out").read_records() == [rec("a", 1, 1), rec("a", 3, 4)]
    assert dict(driver.store("agg").all()) == {"a": 3}


def test_null_values_are_ignored_by_count(drive) -> None:
    driver = drive(counts_by_key)
    driver.input_topic("in").pipe_records([("a", "x", 1), ("a", None, 2), ("a", "y", 3)])
    assert driver.output_topic("out").read_records() == [rec("a", 1, 1), rec("a", 2, 3)]


@pytest.mark.parametrize("operation", ["count", "reduce", "aggregate"])
def test_null_keys_are_dropped_and_counted(drive, operation) -> None:
    def build(b: sk.StreamsBuilder) -> None:
        grouped = b.stream("in").group_by_key()
        if operation == "count":
            table = grouped.count(name="agg")
        elif operation == "reduce":
            table = grouped.reduce(lambda agg, v: agg + v, name="agg")
        else:
            table = grouped.aggregate(lambda: 0, lambda k, v, agg: agg + v, name="agg")
        table.to_stream().to("out")
    driver = drive(build)
    driver.input_topic("in").pipe_records([(None, 1, 1), ("a", 1, 2), (None, 5, 3)])
    assert driver.output_topic("out").read_records() == [rec("a", 1, 2)]
    assert driver.metrics()["null_key_records_dropped"] == 2
    assert dict(driver.store("agg").all()) == {"a": 1}


def test_group_by_to_a_null_key_is_dropped_after_the_repartition_and_counted(drive) -> None:
    driver = drive(lambda b: b.stream("in").group_by(lambda k, v: v.get("user")).count(name="c")
                   .to_stream().to("out"))
    driver.input_topic("in").pipe_records([("x", {"user": "ann"}, 1), ("y", {}, 2), ("z", {"user": "ann"}, 3)])
    assert driver.output_topic("out").read_records() == [rec("ann", 1, 1), rec("ann", 2, 3)]
    assert driver.metrics()["null_key_records_dropped"] == 1


def test_aggregate_result_timestamp_never_goes_back(drive) -> None:
    driver = drive(counts_by_key)
    driver.input_topic("in").pipe_records([("a", "x", 100), ("a", "y", 50)])
    assert driver.output_topic("out").read_records() == [rec("a", 1, 100), rec("a", 2, 100)]


def test_several_aggregations_of_one_grouped_stream(drive) -> None:
    def build(b: sk.StreamsBuilder) -> None:
        grouped = b.stream("in").group_by_key()
        grouped.count().to_stream().to("counts")
        grouped.reduce(lambda agg, v: agg + v).to_stream().to("sums")
    driver = drive(build)
    assert set(driver.topology.stores) == {"in.count", "in.reduce"}
    driver.input_topic("in").pipe_records([("a", 2, 1), ("a", 3, 2)])
    assert driver.output_topic("counts").read_key_values() == [("a", 1), ("a", 2)]
    assert driver.output_topic("sums").read_key_values() == [("a", 2), ("a", 5)]
    assert driver.store("in.count").get("a") == 2


def test_aggregation_value_serde_is_the_store_serde(drive) -> None:
    driver = drive(lambda b: b.stream("in").group_by_key().reduce(lambda a, v: a + v, name="s",
                                                                   value_serde=Int()).to_stream().to("out"))
    assert driver.topology.stores["s"].value_serde == Int()
    driver.input_topic("in").pipe_records([("a", 2, 1), ("a", 3, 2)])
    assert driver.store("s").get("a") == 5
    with pytest.raises(sk.RecordError, match="Int serde expects int, got str"):
        driver.input_topic("in").pipe_input("b", "text", timestamp=3)


# -- stores ---------------------------------------------------------------------------

@pytest.fixture
def fruit_driver(drive) -> Callable:
    def make(key_serde=None):
        driver = drive(lambda b: b.stream("in").group_by_key(key_serde=key_serde).count(name="counts")
                       .to_stream().to("out"))
        for fruit in ["banana", "apple", "cherry", "apricot", "apple", "avocado"]:
            driver.input_topic("in").pipe_input(fruit, 1, timestamp=0)
        return driver
    return make


def test_store_get_all_range_and_size(fruit_driver) -> None:
    store = fruit_driver().store("counts")
    assert store.get("apple") == 2
    assert list(store.all()) == [("apple", 2), ("apricot", 1), ("avocado", 1), ("banana", 1), ("cherry", 1)]
    assert list(store.range("apricot", "banana")) == [("apricot", 1), ("avocado", 1), ("banana", 1)]
    assert list(store.range(None, "apricot")) == [("apple", 2), ("apricot", 1)]
    assert list(store.range("b", None)) == [("banana", 1), ("cherry", 1)]
    assert store.approximate_num_entries() == 5


def test_store_prefix_scan_is_on_serialized_keys(fruit_driver) -> None:
    json_keys = fruit_driver().store("counts")  # default key serde: Json, so keys start with '"'
    assert list(json_keys.prefix_scan(b'"ap')) == [("apple", 2), ("apricot", 1)]
    assert list(json_keys.prefix_scan(b'"z')) == []
    string_keys = fruit_driver(key_serde=String()).store("counts")
    assert list(string_keys.prefix_scan(b"a")) == [("apple", 2), ("apricot", 1), ("avocado", 1)]
    assert list(string_keys.prefix_scan(b"ch")) == [("cherry", 1)]


def test_store_is_writable_from_the_test(fruit_driver) -> None:
    driver = fruit_driver()
    store = driver.store("counts")
    assert store.delete("cherry") == 1
    assert store.delete("cherry") is None
    assert store.put_if_absent("apple", 99) == 2
    assert store.put_if_absent("kiwi", 5) is None
    store.put("banana", None)  # None deletes
    assert dict(store.all()) == {"apple": 2, "apricot": 1, "avocado": 1, "kiwi": 5}
    driver.output_topic("out").read_records()
    driver.input_topic("in").pipe_input("kiwi", 1, timestamp=1)
    assert driver.output_topic("out").read_key_values() == [("kiwi", 6)]


def test_unknown_store_is_a_clear_error(drive) -> None:
    driver = drive(counts_by_key)
    with pytest.raises(sk.StreamkitError, match="no store named 'nope' \\(stores: counts\\)"):
        driver.store("nope")


def test_store_keys_with_an_int_key_serde_scan_in_numeric_order(drive) -> None:
    driver = drive(lambda b: b.stream("in").group_by(lambda k, v: v, key_serde=Int()).count(name="c")
                   .to_stream().to("out", key_serde=Int()))
    for n in [300, 2, 10, 2]:
        driver.input_topic("in").pipe_input("k", n, timestamp=0)
    assert list(driver.store("c").all()) == [(2, 2), (10, 1), (300, 1)]
    raw = driver.output_topic("out", key_serde=Bytes(), value_serde=Bytes()).read_key_values()
    assert raw[0] == ((300).to_bytes(8, "big"), b"1")
