"""Stream-global table joins (``stream.join(b.global_table(...), key_selector=..., joiner=...)``),
through the TopologyTestDriver.

Each stream record joins the global table's row for ``key_selector(key, value)`` as of
its processing (piping into the global table's topic updates the store at once);
``left_join`` joins ``None`` without a row; table updates emit nothing; ``None``
values delete rows; the result keeps the stream's key and nothing is repartitioned
for the join, even after a key change. Plus describe() and build-time errors.

Each table case lists its inputs as ``(topic, key, value, timestamp)`` ("P" products =
the global table, "O" orders = the stream) and the exact output as
``(key, value, timestamp)``, written out by hand, for the inner and the left join.
"""
from __future__ import annotations

from datetime import timedelta
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import pytest

import streamkit as sk
from streamkit.errors import RecordError, TopologyError
from streamkit.serdes import Void
from streamkit.testing import TopologyTestDriver

Step = Tuple[str, Any, Any, int]       # ("P" | "O", key, value, timestamp)
Output = Tuple[Any, Any, int]

TOPICS = {"P": "products", "O": "orders"}


def by_product(key: Any, value: Any) -> Any:
    return value["product"]


def enrich(value: Any, product: Any) -> Dict[str, Any]:
    return {"n": value["n"], "product": product}


def global_join_app(how: str, *, rekey: bool = False, app_id: str = "gt") -> sk.App:
    """orders [map: key := user] <how> global table of products (store "products-global") -> out."""
    app = sk.App(app_id)

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        products = b.global_table("products")
        orders = b.stream("orders")
        if rekey:
            orders = orders.map(lambda key, value: (value["user"], value))
        getattr(orders, how)(products, key_selector=by_product, joiner=enrich, name="J").to("out")
    return app


def pipe(driver: TopologyTestDriver, steps: Sequence[Step]) -> None:
    for topic, key, value, timestamp in steps:
        driver.input_topic(TOPICS[topic]).pipe_input(key, value, timestamp)


def read(driver: TopologyTestDriver, topic: str = "out") -> List[Output]:
    return [(r.key, r.value, r.timestamp) for r in driver.output_topic(topic).read_records()]


def o(n: int, product: Optional[str]) -> Dict[str, Any]:
    return {"n": n, "product": product}


CASES = [
    pytest.param(
        [("O", "o1", o(1, "p1"), 10),            # no row yet
         ("P", "p1", "Pen", 20),
         ("O", "o2", o(2, "p1"), 30),
         ("P", "p1", "Pen v2", 40),               # an update between stream records: nothing emitted
         ("O", "o3", o(3, "p1"), 50)],
        [("o2", {"n": 2, "product": "Pen"}, 30), ("o3", {"n": 3, "product": "Pen v2"}, 50)],
        [("o1", {"n": 1, "product": None}, 10), ("o2", {"n": 2, "product": "Pen"}, 30),
         ("o3", {"n": 3, "product": "Pen v2"}, 50)],
        id="updates-between-stream-records"),
    pytest.param(
        [("P", "p1", "Pen", 1), ("O", "o1", o(1, "p1"), 2),
         ("P", "p1", None, 3),                    # delete: nothing emitted
         ("O", "o2", o(2, "p1"), 4),
         ("P", "p1", "Pen again", 5), ("O", "o3", o(3, "p1"), 6)],
        [("o1", {"n": 1, "product": "Pen"}, 2), ("o3", {"n": 3, "product": "Pen again"}, 6)],
        [("o1", {"n": 1, "product": "Pen"}, 2), ("o2", {"n": 2, "product": None}, 4),
         ("o3", {"n": 3, "product": "Pen again"}, 6)],
        id="delete-removes-the-row"),
    pytest.param(
        [("P", "p1", "Pen", 1), ("P", "p2", "Ink", 1),
         ("O", "o1", o(1, "p2"), 2), ("O", "o1", o(2, "p1"), 3), ("O", "o1", o(3, "p9"), 4)],
        [("o1", {"n": 1, "product": "Ink"}, 2), ("o1", {"n": 2, "product": "Pen"}, 3)],
        [("o1", {"n": 1, "product": "Ink"}, 2), ("o1", {"n": 2, "product": "Pen"}, 3),
         ("o1", {"n": 3, "product": None}, 4)],
        id="each-record-selects-its-own-row"),
    pytest.param(
        [("P", "p1", "Pen", 1), ("O", "o1", o(1, None), 2), ("O", "o2", o(2, "p1"), 3)],
        [("o2", {"n": 2, "product": "Pen"}, 3)],
        [("o1", {"n": 1, "product": None}, 2), ("o2", {"n": 2, "product": "Pen"}, 3)],
        id="key-selector-returning-none"),
    pytest.param(
        [("P", "p1", "Pen", 1), ("O", None, o(1, "p1"), 2)],
        [(None, {"n": 1, "product": "Pen"}, 2)],
        [(None, {"n": 1, "product": "Pen"}, 2)],
        id="a-record-without-a-key-joins-through-its-value"),
    pytest.param(
        [("P", "p1", "Pen", 1), ("O", "o1", None, 2)],
        [], [],
        id="a-null-stream-value-joins-nothing"),
    pytest.param(
        [("P", "p1", "Pen", 1), ("P", "p2", "Ink", 2), ("P", "p1", None, 3), ("P", "p9", None, 4)],
        [], [],
        id="table-updates-alone-emit-nothing"),
]

SCENARIOS = [pytest.param(how, case.values[0], expected, id=f"{how}-{case.id}")
             for case in CASES
             for how, expected in (("join", case.values[1]), ("left_join", case.values[2]))]


@pytest.mark.parametrize("how, steps, expected", SCENARIOS)
def test_scenarios(how: str, steps: List[Step], expected: List[Output]) -> None:
    driver = TopologyTestDriver(global_join_app(how))
    pipe(driver, steps)
    assert read(driver) == expected


def test_the_global_store_follows_its_topic() -> None:
    driver = TopologyTestDriver(global_join_app("join"))
    pipe(driver, [("P", "p1", "Pen", 1), ("P", "p2", "Ink", 2), ("P", "p1", "Pen v2", 3), ("P", "p2", None, 4)])
    store = driver.store("products-global")
    assert store.get("p1") == "Pen v2"
    assert store.get("p2") is None
    assert list(store.all()) == [("p1", "Pen v2")]


def test_the_result_keeps_the_changed_key_without_a_repartition() -> None:
    app = global_join_app("left_join", rekey=True)
    topology = app.build()
    assert not topology.repartition_topics
    assert len(topology.sub_topologies) == 1
    driver = TopologyTestDriver(app)
    pipe(driver, [("P", "p1", "Pen", 1),
                  ("O", "o1", {"user": "u1", "n": 1, "product": "p1"}, 2),
                  ("O", "o2", {"user": "u2", "n": 2, "product": "p2"}, 3)])
    assert read(driver) == [("u1", {"n": 1, "product": "Pen"}, 2), ("u2", {"n": 2, "product": None}, 3)]


def test_a_key_change_still_repartitions_before_a_later_aggregation() -> None:
    """The join is stateless: a key changed before it still makes a later count
    repartition, and the join runs before the repartition topic."""
    app = sk.App("gt-count")

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        products = b.global_table("products")
        b.stream("orders").map(lambda key, value: (value["user"], value)).join(
            products, key_selector=by_product, joiner=lambda v, p: p, name="J"
        ).group_by_key().count(name="counts").to_stream().to("out")

    topology = app.build()
    assert len(topology.repartition_topics) == 1
    first = topology.sub_topology_of_topic("orders")
    assert first is not None and "J" in first.node_names
    driver = TopologyTestDriver(app)
    pipe(driver, [("P", "p1", "Pen", 1),
                  ("O", "o1", {"user": "u1", "product": "p1"}, 2),
                  ("O", "o2", {"user": "u1", "product": "p9"}, 3),    # no row: dropped
                  ("O", "o3", {"user": "u1", "product": "p1"}, 4)])
    assert driver.output_topic("out").read_key_values() == [("u1", 1), ("u1", 2)]


def test_a_named_global_table() -> None:
    app = sk.App("gt-named")

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        catalog = b.global_table("products", name="catalog")
        assert catalog.name == "catalog" and catalog.topic == "products"
        b.stream("orders").join(catalog, key_selector=by_product, joiner=enrich).to("out")

    driver = TopologyTestDriver(app)
    pipe(driver, [("P", "p1", "Pen", 1), ("O", "o1", o(1, "p1"), 2)])
    assert read(driver) == [("o1", {"n": 1, "product": "Pen"}, 2)]
    assert driver.store("catalog").get("p1") == "Pen"


@pytest.mark.parametrize("how, text", [("join", "join"), ("left_join", "left join")])
def test_describe_lists_the_global_table(how: str, text: str) -> None:
    described = global_join_app(how, rekey=True).describe()
    assert f"Processor: J ({text} with global table products-global)" in described
    assert "Global tables (every partition on every worker):\n    products-global (topic: products)" in described
    assert "Source: products" not in described


@pytest.mark.parametrize("key_selector, joiner, node", [
    pytest.param(lambda k, v: v["missing"], enrich, "J", id="key-selector-fails"),
    pytest.param(by_product, lambda v, p: 1 / 0, "J", id="joiner-fails"),
])
def test_user_function_errors_name_the_node(key_selector: Callable, joiner: Callable, node: str) -> None:
    app = sk.App("gt-fail")

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        b.stream("orders").join(b.global_table("products"), key_selector=key_selector, joiner=joiner,
                                name="J").to("out")

    driver = TopologyTestDriver(app)
    driver.input_topic("products").pipe_input("p1", "Pen", 1)
    with pytest.raises(RecordError) as failure:
        driver.input_topic("orders").pipe_input("o1", o(1, "p1"), 2)
    assert failure.value.node == node


# -- build-time errors ------------------------------------------------------------------------------

def _stream_then_global_table(b: sk.StreamsBuilder) -> None:
    stream = b.stream("products")
    stream.join(b.global_table("products"), key_selector=lambda k, v: k, joiner=enrich)


def _table_then_global_table(b: sk.StreamsBuilder) -> None:
    b.table("products")
    b.global_table("products")


def _global_table_twice(b: sk.StreamsBuilder) -> None:
    b.global_table("products")
    b.global_table("products", name="catalog")


def _global_store_name_twice(b: sk.StreamsBuilder) -> None:
    b.global_table("products")
    b.global_table("other", name="products-global")


ERRORS = [
    pytest.param(lambda b: b.stream("orders").join(b.global_table("products"), joiner=enrich),
                 "a global-table join needs key_selector=lambda key, value", id="key-selector-missing"),
    pytest.param(lambda b: b.stream("orders").left_join(b.global_table("products"), key_selector=by_product),
                 r"left_join\(\) needs a joiner", id="joiner-missing"),
    pytest.param(lambda b: b.stream("orders").join(b.global_table("products"), enrich, key_selector=lambda v: v),
                 r"key_selector must accept \(key, value\)", id="key-selector-arity"),
    pytest.param(lambda b: b.stream("orders").join(b.global_table("products"), lambda v: v,
                                                   key_selector=by_product),
                 r"joiner must accept \(value, table_value\)", id="joiner-arity"),
    pytest.param(_stream_then_global_table, "topic 'products' is read both as a stream/table and as a global table",
                 id="stream-then-global-table-on-one-topic"),
    pytest.param(_table_then_global_table, "topic 'products' is read both as a stream/table and as a global table",
                 id="table-then-global-table-on-one-topic"),
    pytest.param(_global_table_twice, "topic 'products' is read as a global table twice", id="global-table-twice"),
    pytest.param(_global_store_name_twice, "store name 'products-global' is used twice", id="store-name-twice"),
    pytest.param(lambda b: b.stream("orders").outer_join(b.global_table("products"), enrich, None),
                 "a stream has no outer join with a table", id="outer-join"),
    pytest.param(lambda b: b.stream("orders").join(b.global_table("products"), enrich,
                                                   sk.JoinWindows.of(timedelta(seconds=1)), key_selector=by_product),
                 "windows, late_records_topic and other_value_serde are for stream-stream joins", id="windows"),
    pytest.param(lambda b: b.stream("orders").join(b.table("customers"), enrich, key_selector=by_product),
                 "key_selector is for global-table joins", id="key-selector-with-a-table"),
    pytest.param(lambda b: b.table("orders").join(b.global_table("products"), enrich),
                 r"Table.join\(\) takes a table of the same topology", id="table-joins-a-global-table"),
]


@pytest.mark.parametrize("build, message", ERRORS)
def test_build_errors_say_what_to_change(build: Callable[[sk.StreamsBuilder], None], message: str) -> None:
    app = sk.App("gt-bad")
    app.topology(build)
    with pytest.raises(TopologyError, match=message):
        app.build()


def test_a_global_table_needs_keys() -> None:
    app = sk.App("gt-void")
    app.topic("products", key_serde=Void())

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        b.global_table("products")
    with pytest.raises(TopologyError, match="a table needs keys"):
        app.build()


def test_a_global_table_of_another_topology_is_refused() -> None:
    other = sk.App("other")
    tables: Dict[str, Any] = {}

    @other.topology
    def build_other(b: sk.StreamsBuilder) -> None:
        tables["products"] = b.global_table("products")
        b.stream("x").to("y")
    other.build()

    app = sk.App("gt-foreign")

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        b.stream("orders").join(tables["products"], key_selector=by_product, joiner=enrich)
    with pytest.raises(TopologyError, match="the global table belongs to another topology"):
        app.build()


def _global_table_then_stream(b: sk.StreamsBuilder) -> None:
    products = b.global_table("products")
    b.stream("products").join(products, key_selector=lambda k, v: k, joiner=lambda v, p: [v, p]).to("out")


def _global_table_then_table(b: sk.StreamsBuilder) -> None:
    b.global_table("products")
    b.table("products").to_stream().to("out")


@pytest.mark.parametrize("build", [
    pytest.param(_global_table_then_stream, id="global-table-then-stream"),
    pytest.param(_global_table_then_table, id="global-table-then-table"),
])
def test_reading_a_global_tables_topic_as_a_stream_afterwards_is_refused(
        build: Callable[[sk.StreamsBuilder], None]) -> None:
    app = sk.App("gt-bad-order")
    app.topology(build)
    with pytest.raises(TopologyError, match="topic 'products' is read both as a stream/table and as a global table"):
        app.build()


def test_a_later_store_cannot_take_a_global_tables_store_name() -> None:
    app = sk.App("gt-store-clash")

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        b.global_table("products")
        b.stream("orders").group_by_key().count(name="products-global").to_stream().to("out")
    with pytest.raises(TopologyError, match="'products-global' is used twice"):
        app.build()
