"""Stream-table joins through the test driver: each stream record meets the table's
row for its key as of its processing; table updates emit nothing."""
from __future__ import annotations

import pytest

import streamkit as sk
from streamkit.errors import TopologyError
from streamkit.testing import TopologyTestDriver
from streamkit.topology.passes import resolve_partitions


def _enrichment_app(*, left: bool = False, rekey: bool = False, view: bool = False) -> sk.App:
    app = sk.App("enrich")

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        customers = b.table("customers", name="customers-table")
        if view:
            customers = customers.filter(lambda k, c: c["active"]).map_values(lambda c: c["name"])
        orders = b.stream("orders")
        if rekey:
            orders = orders.select_key(lambda order_id, order: order["customer"])
        join = orders.left_join if left else orders.join
        join(customers, lambda order, customer: {**order, "customer_row": customer}).to("enriched")
    return app


def test_each_record_meets_the_row_of_its_moment_and_table_updates_emit_nothing() -> None:
    driver = TopologyTestDriver(_enrichment_app())
    customers, orders = driver.input_topic("customers"), driver.input_topic("orders")
    orders.pipe_input("c1", {"n": 1}, 10)                     # no row yet: dropped (inner join)
    customers.pipe_input("c1", {"name": "Ann"}, 20)
    orders.pipe_input("c1", {"n": 2}, 30)
    customers.pipe_input("c1", {"name": "Ann B."}, 40)        # an update: nothing emitted
    orders.pipe_input("c1", {"n": 3}, 50)
    customers.pipe_input("c1", None, 60)                      # a delete (tombstone)
    orders.pipe_input("c1", {"n": 4}, 70)
    out = driver.output_topic("enriched").read_records()
    assert [(r.key, r.value, r.timestamp) for r in out] == [
        ("c1", {"n": 2, "customer_row": {"name": "Ann"}}, 30),
        ("c1", {"n": 3, "customer_row": {"name": "Ann B."}}, 50)]


def test_left_join_keeps_records_without_a_row() -> None:
    driver = TopologyTestDriver(_enrichment_app(left=True))
    driver.input_topic("orders").pipe_input("c9", {"n": 1}, 10)
    driver.input_topic("customers").pipe_input("c9", {"name": "Bo"}, 20)
    driver.input_topic("orders").pipe_input("c9", {"n": 2}, 30)
    driver.input_topic("orders").pipe_input(None, {"n": 3}, 40)   # no key: no row (Kafka Streams 3.7+)
    assert driver.output_topic("enriched").read_key_values() == [
        ("c9", {"n": 1, "customer_row": None}), ("c9", {"n": 2, "customer_row": {"name": "Bo"}}),
        (None, {"n": 3, "customer_row": None})]
    assert driver.metrics()["null_key_records_dropped"] == 0


def test_inner_join_drops_and_counts_records_without_a_key() -> None:
    driver = TopologyTestDriver(_enrichment_app(left=False))
    driver.input_topic("customers").pipe_input("c9", {"name": "Bo"}, 20)
    driver.input_topic("orders").pipe_input(None, {"n": 3}, 40)
    driver.input_topic("orders").pipe_input("c9", {"n": 4}, 50)
    assert driver.output_topic("enriched").read_key_values() == [("c9", {"n": 4, "customer_row": {"name": "Bo"}})]
    assert driver.metrics()["null_key_records_dropped"] == 1


def test_a_key_changed_before_the_join_goes_through_a_repartition_topic() -> None:
    app = _enrichment_app(rekey=True)
    topology = app.build()
    assert any(t.endswith("-repartition") for t in topology.topics)
    driver = TopologyTestDriver(app)
    driver.input_topic("customers").pipe_input("c1", {"name": "Ann"}, 1)
    driver.input_topic("orders").pipe_input("order-7", {"customer": "c1"}, 2)
    assert driver.output_topic("enriched").read_key_values() == [
        ("c1", {"customer": "c1", "customer_row": {"name": "Ann"}})]


def test_a_filtered_and_mapped_table_is_read_through_its_steps() -> None:
    driver = TopologyTestDriver(_enrichment_app(left=True, view=True))
    driver.input_topic("customers").pipe_input("c1", {"name": "Ann", "active": True}, 1)
    driver.input_topic("customers").pipe_input("c2", {"name": "Cy", "active": False}, 1)
    driver.input_topic("orders").pipe_input("c1", {"n": 1}, 2)
    driver.input_topic("orders").pipe_input("c2", {"n": 2}, 3)
    assert driver.output_topic("enriched").read_key_values() == [
        ("c1", {"n": 1, "customer_row": "Ann"}), ("c2", {"n": 2, "customer_row": None})]


def test_inputs_with_different_partition_counts_fail_at_build_naming_both() -> None:
    topology = _enrichment_app().build()
    with pytest.raises(TopologyError, match=r"'orders' \(3 partitions\) and 'customers' \(4 partitions\)|"
                                            r"'customers' \(4 partitions\) and 'orders' \(3 partitions\)"):
        resolve_partitions(topology, {"orders": 3, "customers": 4})
    assert resolve_partitions(topology, {"orders": 4, "customers": 4})["enriched"] == 4


def test_a_repartitioned_stream_takes_the_tables_partition_count() -> None:
    counts = resolve_partitions(_enrichment_app(rekey=True).build(), {"orders": 3, "customers": 5})
    repartition = next(t for t in counts if t.endswith("-repartition"))
    assert counts[repartition] == 5


def test_join_errors_say_what_to_change() -> None:
    app = sk.App("bad-join")

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        b.stream("orders").join(b.stream("payments"), lambda a, b: a)
    with pytest.raises(TopologyError, match="needs windows: sk.JoinWindows"):
        app.build()
