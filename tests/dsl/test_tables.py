"""Tables: updates and tombstones as changes; grouped-table aggregations with retraction."""
from __future__ import annotations

import pytest

import streamkit as sk
from streamkit.serdes import Int, String

from .conftest import rec

USERS = [
    ("ann", {"age": 20, "region": "eu"}, 1),
    ("bob", {"age": 10, "region": "eu"}, 2),
    ("bob", {"age": 11, "region": "eu"}, 3),
    ("ann", {"age": 17, "region": "eu"}, 4),
    ("bob", None, 5),          # delete
    ("zed", None, 6),          # delete of a key that never existed: no update
    ("ann", {"age": 30, "region": "us"}, 7),
]


def test_table_to_stream_gives_new_values_and_none_for_deletes(drive) -> None:
    driver = drive(lambda b: b.table("users").to_stream().to("changes"))
    driver.input_topic("users").pipe_records(USERS)
    assert driver.output_topic("changes").read_records() == [
        rec("ann", {"age": 20, "region": "eu"}, 1),
        rec("bob", {"age": 10, "region": "eu"}, 2),
        rec("bob", {"age": 11, "region": "eu"}, 3),
        rec("ann", {"age": 17, "region": "eu"}, 4),
        rec("bob", None, 5),
        rec("ann", {"age": 30, "region": "us"}, 7),
    ]


def test_table_is_materialized_in_a_store(drive) -> None:
    driver = drive(lambda b: b.table("users").to_stream().to("changes"))
    driver.input_topic("users").pipe_records(USERS)
    assert dict(driver.store("users-table").all()) == {"ann": {"age": 30, "region": "us"}}


def test_table_store_name(drive) -> None:
    driver = drive(lambda b: b.table("users", "people").to_stream().to("changes"))
    assert set(driver.topology.stores) == {"people"}
    driver.input_topic("users").pipe_input("ann", {"age": 1}, timestamp=0)
    assert driver.store("people").get("ann") == {"age": 1}


def test_table_named_like_its_topic(drive) -> None:
    driver = drive(lambda b: b.table("users", "users").to_stream().to("changes"))
    assert driver.topology.stores["users"].name == "users"
    driver.input_topic("users").pipe_input("ann", 1, timestamp=0)
    assert driver.output_topic("changes").read_key_values() == [("ann", 1)]


def test_table_null_key_is_dropped_and_counted(drive) -> None:
    driver = drive(lambda b: b.table("users").to_stream().to("changes"))
    driver.input_topic("users").pipe_records([(None, {"age": 1}, 1), ("ann", {"age": 2}, 2)])
    assert driver.output_topic("changes").read_key_values() == [("ann", {"age": 2})]
    assert driver.metrics()["null_key_records_dropped"] == 1


def test_table_filter_deletes_rows_that_stop_matching(drive) -> None:
    driver = drive(lambda b: b.table("users").filter(lambda k, v: v["age"] >= 18).to_stream().to("adults"))
    driver.input_topic("users").pipe_records(USERS)
    assert driver.output_topic("adults").read_records() == [
        rec("ann", {"age": 20, "region": "eu"}, 1),
        rec("ann", None, 4),                           # ann turned 17: no longer an adult
        rec("ann", {"age": 30, "region": "us"}, 7),    # matches again
    ]


def test_table_filter_not(drive) -> None:
    driver = drive(lambda b: b.table("users").filter_not(lambda k, v: v["age"] >= 18).to_stream().to("minors"))
    driver.input_topic("users").pipe_records(USERS)
    assert driver.output_topic("minors").read_records() == [
        rec("bob", {"age": 10, "region": "eu"}, 2),
        rec("bob", {"age": 11, "region": "eu"}, 3),
        rec("ann", {"age": 17, "region": "eu"}, 4),
        rec("bob", None, 5),
        rec("ann", None, 7),
    ]


def test_table_map_values(drive) -> None:
    driver = drive(lambda b: b.table("users").map_values(lambda v: v["age"]).to_stream().to("ages"))
    driver.input_topic("users").pipe_records(USERS[:5])
    assert driver.output_topic("ages").read_records() == [
        rec("ann", 20, 1), rec("bob", 10, 2), rec("bob", 11, 3), rec("ann", 17, 4), rec("bob", None, 5)]


def test_table_map_values_then_filter(drive) -> None:
    driver = drive(lambda b: (b.table("users").map_values(lambda v: v["age"]).filter(lambda k, age: age > 15)
                              .to_stream().to("out")))
    driver.input_topic("users").pipe_records(USERS)
    assert driver.output_topic("out").read_records() == [
        rec("ann", 20, 1), rec("ann", 17, 4), rec("ann", 30, 7)]


def test_aggregate_table_can_be_filtered(drive) -> None:
    driver = drive(lambda b: (b.stream("in").group_by_key().count(name="c").filter(lambda k, n: n % 2 == 0)
                              .to_stream().to("even")))
    driver.input_topic("in").pipe_records([("a", 1, 1), ("a", 1, 2), ("a", 1, 3), ("a", 1, 4)])
    assert driver.output_topic("even").read_records() == [
        rec("a", 2, 2), rec("a", None, 3), rec("a", 4, 4)]


# -- grouped tables -------------------------------------------------------------------

def _by_region(v):
    return v["region"], v


def test_grouped_table_count_moves_rows_between_groups(drive) -> None:
    driver = drive(lambda b: b.table("users").group_by(lambda k, v: (v["region"], v)).count(name="per-region")
                   .to_stream().to("out"), app_id="regions")
    assert driver.topology.repartition_topics == ("regions-per-region-repartition",)
    users = driver.input_topic("users")
    out = driver.output_topic("out")
    users.pipe_input("ann", {"region": "eu"}, timestamp=1)
    users.pipe_input("bob", {"region": "eu"}, timestamp=2)
    assert out.read_records() == [rec("eu", 1, 1), rec("eu", 2, 2)]
    users.pipe_input("ann", {"region": "us"}, timestamp=3)   # moves: retract from eu, add to us
    assert out.read_records() == [rec("eu", 1, 3), rec("us", 1, 3)]
    users.pipe_input("bob", None, timestamp=4)               # delete retracts
    assert out.read_records() == [rec("eu", 0, 4)]
    users.pipe_input("nobody", None, timestamp=5)            # deleting an absent row does nothing
    assert out.read_records() == []
    assert dict(driver.store("per-region").all()) == {"eu": 0, "us": 1}


def test_grouped_table_reduce_with_adder_and_subtractor(drive) -> None:
    def build(b: sk.StreamsBuilder) -> None:
        (b.table("accounts").group_by(lambda k, v: (v["branch"], v["balance"]))
         .reduce(lambda agg, v: agg + v, lambda agg, v: agg - v, name="branch-totals")
         .to_stream().to("out"))
    driver = drive(build)
    accounts = driver.input_topic("accounts")
    accounts.pipe_records([
        ("a1", {"branch": "north", "balance": 100}, 1),
        ("a2", {"branch": "north", "balance": 50}, 2),
        ("a3", {"branch": "south", "balance": 10}, 3),
        ("a1", {"branch": "south", "balance": 70}, 4),   # moves north -> south with a new balance
        ("a2", None, 5),                                 # closed
    ])
    assert driver.output_topic("out").read_records() == [
        rec("north", 100, 1), rec("north", 150, 2), rec("south", 10, 3),
        rec("north", 50, 4), rec("south", 80, 4),
        rec("north", 0, 5)]
    assert dict(driver.store("branch-totals").all()) == {"north": 0, "south": 80}


def test_grouped_table_aggregate_with_adder_and_subtractor(drive) -> None:
    def build(b: sk.StreamsBuilder) -> None:
        (b.table("users").group_by(lambda k, v: (v["region"], k))
         .aggregate(lambda: [],
                    lambda region, user, agg: sorted(agg + [user]),
                    lambda region, user, agg: [u for u in agg if u != user],
                    name="members")
         .to_stream().to("out"))
    driver = drive(build)
    driver.input_topic("users").pipe_records([
        ("ann", {"region": "eu"}, 1), ("bob", {"region": "eu"}, 2),
        ("ann", {"region": "us"}, 3), ("bob", None, 4)])
    assert driver.output_topic("out").read_records() == [
        rec("eu", ["ann"], 1), rec("eu", ["ann", "bob"], 2),
        rec("eu", ["bob"], 3), rec("us", ["ann"], 3),
        rec("eu", [], 4)]
    assert driver.store("members").get("us") == ["ann"]


def test_grouped_table_update_within_a_group_ends_correct(drive) -> None:
    driver = drive(lambda b: (b.table("accounts").group_by(lambda k, v: (v["branch"], v["balance"]))
                              .reduce(lambda a, v: a + v, lambda a, v: a - v, name="totals")
                              .to_stream().to("out")))
    driver.input_topic("accounts").pipe_records([("a1", {"branch": "n", "balance": 10}, 1),
                                                 ("a1", {"branch": "n", "balance": 25}, 2)])
    assert driver.output_topic("out").read_records()[-1] == rec("n", 25, 2)
    assert driver.store("totals").get("n") == 25


def test_grouped_table_update_within_a_group_emits_once(drive) -> None:
    driver = drive(lambda b: b.table("users").group_by(lambda k, v: (v["region"], v)).count(name="c")
                   .to_stream().to("out"))
    driver.input_topic("users").pipe_records([("ann", {"region": "eu", "age": 1}, 1),
                                              ("ann", {"region": "eu", "age": 2}, 2)])
    assert driver.output_topic("out").read_records() == [rec("eu", 1, 1), rec("eu", 1, 2)]


def test_grouped_table_with_explicit_serdes(drive) -> None:
    driver = drive(lambda b: (b.table("scores").group_by(lambda k, v: (k[0], v), key_serde=String(),
                                                         value_serde=Int())
                              .reduce(lambda a, v: a + v, lambda a, v: a - v, name="by-initial",
                                      value_serde=Int())
                              .to_stream().to("out")), app_id="s")
    spec = driver.topology.topics["s-by-initial-repartition"]
    assert spec.key_serde == String()
    driver.input_topic("scores").pipe_records([("ann", 3, 1), ("amy", 4, 2), ("ann", 1, 3)])
    # ann stays in group "a": one update (KIP-904), no transient ("a", 4)
    assert driver.output_topic("out").read_key_values() == [("a", 3), ("a", 7), ("a", 5)]
    assert list(driver.store("by-initial").prefix_scan(b"a")) == [("a", 5)]


def test_grouped_table_selector_to_a_null_key_is_dropped(drive) -> None:
    driver = drive(lambda b: b.table("users").group_by(lambda k, v: (v.get("region"), v)).count(name="c")
                   .to_stream().to("out"))
    driver.input_topic("users").pipe_records([("ann", {}, 1), ("bob", {"region": "eu"}, 2)])
    assert driver.output_topic("out").read_key_values() == [("eu", 1)]
    assert driver.metrics()["null_key_records_dropped"] == 1


def test_table_of_a_keyless_topic_is_a_build_error(app_factory) -> None:
    app = app_factory()
    lines = app.topic("lines", key_serde=sk.serdes.Void())
    app.topology(lambda b: b.table(lines))
    with pytest.raises(sk.TopologyError, match=r"table\('lines'\): a table needs keys.*key_serde="):
        app.build()


def test_grouped_table_selector_returning_a_none_value_is_skipped(drive) -> None:
    driver = drive(lambda b: b.table("users").group_by(lambda k, v: (v["region"], None)).count(name="c")
                   .to_stream().to("out"))
    driver.input_topic("users").pipe_input("ann", {"region": "eu"}, timestamp=1)
    assert driver.output_topic("out").read_records() == []
    assert list(driver.store("c").all()) == []
