"""Foreign-key table-table joins (``Table.join/left_join(..., foreign_key_extractor=...)``),
through the TopologyTestDriver.

The kinds of cases Kafka Streams' KTableKTableForeignKeyJoinIntegrationTest covers:
joins from either side, left and right deletes, a left row changing its foreign key
(to an existing or a missing right row), a ``None`` foreign key, several left rows
sharing a foreign key and a right update fanning out to all of them, deletes of rows
that do not exist. Also: filter/map_values views, serdes, the results store, the two
internal topics (no co-partitioning needed), chained and self joins, build-time
errors, and a seeded randomized comparison with a brute-force join.

Each table case lists its inputs as ``(side, key, value)`` ("O" orders = left table,
"C" customers = right table; timestamps increase by one per input) and the exact
``(key, value)`` output of ``to_stream().to("out")``, written out by hand, for the
inner and the left join.
"""
from __future__ import annotations

import random
from datetime import timedelta
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import pytest

import streamkit as sk
from streamkit.errors import RecordError, TopologyError
from streamkit.serdes import Int, Json, String
from streamkit.testing import TopologyTestDriver
from streamkit.topology.passes import resolve_partitions

Step = Tuple[str, Any, Any]              # ("O" | "C", key, value)
KV = Tuple[Any, Any]

TOPICS = {"O": "orders", "C": "customers"}


def order(item: str, customer: Optional[str]) -> Dict[str, Any]:
    return {"item": item, "cust": customer}


def describe_order(o: Dict[str, Any], customer: Any) -> str:
    return f"{o['item']}@{customer}"


def fk_app(how: str, *, app_id: str = "fk",
           left_view: Optional[Callable[[sk.Table], sk.Table]] = None,
           right_view: Optional[Callable[[sk.Table], sk.Table]] = None) -> sk.App:
    """orders (store "O") <how> customers (store "C") on order["cust"], named "J" -> out."""
    app = sk.App(app_id)

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        orders = b.table("orders", name="O")
        customers = b.table("customers", name="C")
        if left_view is not None:
            orders = left_view(orders)
        if right_view is not None:
            customers = right_view(customers)
        getattr(orders, how)(customers, describe_order, foreign_key_extractor=lambda o: o["cust"],
                             name="J").to_stream().to("out")
    return app


def pipe(driver: TopologyTestDriver, steps: Sequence[Step], start: int = 1) -> None:
    for timestamp, (side, key, value) in enumerate(steps, start):
        driver.input_topic(TOPICS[side]).pipe_input(key, value, timestamp)


def read(driver: TopologyTestDriver, topic: str = "out") -> List[KV]:
    return driver.output_topic(topic).read_key_values()


def current_results(outputs: Sequence[KV]) -> Dict[Any, Any]:
    """The last value per key, without deleted keys."""
    last = dict(outputs)
    return {k: v for k, v in last.items() if v is not None}


# -- scenarios, inner and left -----------------------------------------------------------------------

CASES = [
    pytest.param(
        [("C", "c1", "Ann"), ("O", "o1", order("pen", "c1")), ("O", "o1", None)],
        [("o1", "pen@Ann"), ("o1", None)],
        [("o1", "pen@Ann"), ("o1", None)],
        id="join-from-left-then-delete-left"),
    pytest.param(
        [("O", "o1", order("pen", "c1")), ("C", "c1", "Ann"), ("C", "c1", None)],
        [("o1", "pen@Ann"), ("o1", None)],
        [("o1", "pen@None"), ("o1", "pen@Ann"), ("o1", "pen@None")],
        id="join-from-right-then-delete-right"),
    pytest.param(
        [("C", "c1", "Ann"), ("C", "c1", "Ann B"), ("C", "c2", "Bo"), ("O", "o1", order("pen", "c1"))],
        [("o1", "pen@Ann B")],
        [("o1", "pen@Ann B")],
        id="right-rows-without-subscribers-emit-nothing"),
    pytest.param(
        [("C", "c1", "Ann"), ("O", "o1", order("pen", "c1")), ("O", "o1", order("pens", "c1"))],
        [("o1", "pen@Ann"), ("o1", "pens@Ann")],
        [("o1", "pen@Ann"), ("o1", "pens@Ann")],
        id="left-update-with-the-same-foreign-key"),
    pytest.param(
        [("C", "c1", "Ann"), ("C", "c2", "Bo"), ("O", "o1", order("pen", "c1")), ("O", "o1", order("pen", "c2")),
         ("C", "c1", "Ann B"),                   # o1 no longer refers to c1: nothing
         ("C", "c2", "Bo B")],
        [("o1", "pen@Ann"), ("o1", "pen@Bo"), ("o1", "pen@Bo B")],
        [("o1", "pen@Ann"), ("o1", "pen@Bo"), ("o1", "pen@Bo B")],
        id="foreign-key-change-to-an-existing-right-row"),
    pytest.param(
        [("C", "c1", "Ann"), ("O", "o1", order("pen", "c1")), ("O", "o1", order("pen", "c9")),
         ("C", "c1", "Ann B"),                   # unsubscribed: nothing
         ("C", "c9", "Cy")],
        [("o1", "pen@Ann"), ("o1", None), ("o1", "pen@Cy")],
        [("o1", "pen@Ann"), ("o1", "pen@None"), ("o1", "pen@Cy")],
        id="foreign-key-change-to-a-missing-right-row"),
    pytest.param(
        [("C", "c1", "Ann"), ("O", "o1", order("pen", None)), ("O", "o1", order("pen", "c1")),
         ("O", "o1", order("pen", None)), ("C", "c1", "Ann B"), ("O", "o1", None)],
        [("o1", "pen@Ann"), ("o1", None)],
        [("o1", "pen@None"), ("o1", "pen@Ann"), ("o1", "pen@None"), ("o1", None)],
        id="null-foreign-key"),
    pytest.param(
        [("C", "c1", "Ann"), ("O", "o1", order("pen", "c1")), ("O", "o2", order("ink", "c1")),
         ("O", "o3", order("cap", "c2")),
         ("C", "c1", "Ann B"),                   # fans out to o1 and o2
         ("C", "c2", "Bo"),
         ("C", "c1", None)],                     # and so does its delete
        [("o1", "pen@Ann"), ("o2", "ink@Ann"), ("o1", "pen@Ann B"), ("o2", "ink@Ann B"), ("o3", "cap@Bo"),
         ("o1", None), ("o2", None)],
        [("o1", "pen@Ann"), ("o2", "ink@Ann"), ("o3", "cap@None"), ("o1", "pen@Ann B"), ("o2", "ink@Ann B"),
         ("o3", "cap@Bo"), ("o1", "pen@None"), ("o2", "ink@None")],
        id="several-left-rows-share-a-foreign-key-and-right-updates-fan-out"),
    pytest.param(
        [("C", "c1", "Ann"), ("O", "o1", order("pen", "c1")), ("O", "o2", order("ink", "c1")),
         ("O", "o1", None),
         ("C", "c1", "Ann B")],                  # only o2 is still subscribed
        [("o1", "pen@Ann"), ("o2", "ink@Ann"), ("o1", None), ("o2", "ink@Ann B")],
        [("o1", "pen@Ann"), ("o2", "ink@Ann"), ("o1", None), ("o2", "ink@Ann B")],
        id="a-deleted-left-row-is-unsubscribed"),
    pytest.param(
        [("C", "c1", "Ann"), ("C", "c2", "Bo"), ("O", "o1", order("pen", "c1")), ("O", "o1", None),
         ("O", "o1", order("ink", "c2")), ("C", "c1", "Ann B"), ("C", "c2", None)],
        [("o1", "pen@Ann"), ("o1", None), ("o1", "ink@Bo"), ("o1", None)],
        [("o1", "pen@Ann"), ("o1", None), ("o1", "ink@Bo"), ("o1", "ink@None")],
        id="left-delete-and-reinsert-with-another-foreign-key"),
    pytest.param(
        [("O", "o9", None), ("C", "c9", None), ("O", "o9", None)],
        [], [],
        id="deleting-rows-that-do-not-exist-emits-nothing"),
    pytest.param(
        [("C", "c1", "Ann"), ("O", "o1", order("pen", "c9")), ("O", "o1", None)],
        [],
        [("o1", "pen@None"), ("o1", None)],
        id="deleting-a-left-row-without-a-result-emits-nothing-for-inner"),
    pytest.param(
        [("O", "o1", order("pen", "c9")), ("C", "c9", None), ("C", "c8", None)],
        [],
        None,                                   # left join: not specified whether pen@None repeats
        id="deleting-a-missing-right-row-with-subscribers-emits-nothing-for-inner"),
]


SCENARIOS = [pytest.param(how, case.values[0], expected, id=f"{how}-{case.id}")
             for case in CASES
             for how, expected in (("join", case.values[1]), ("left_join", case.values[2]))
             if expected is not None]


@pytest.mark.parametrize("how, steps, expected", SCENARIOS)
def test_scenarios(how: str, steps: List[Step], expected: List[KV]) -> None:
    driver = TopologyTestDriver(fk_app(how))
    pipe(driver, steps)
    out = read(driver)
    assert out == expected
    assert dict(driver.store("J").all()) == current_results(out)


def test_the_results_store_holds_the_current_results() -> None:
    driver = TopologyTestDriver(fk_app("left_join"))
    pipe(driver, [("C", "c1", "Ann"), ("O", "o1", order("pen", "c1")), ("O", "o2", order("ink", "c2")),
                  ("O", "o3", order("cap", None)), ("O", "o4", order("hat", "c1")), ("O", "o4", None)])
    results = driver.store("J")
    assert results.get("o1") == "pen@Ann"
    assert results.get("o2") == "ink@None"
    assert results.get("o3") == "cap@None"
    assert results.get("o4") is None
    assert dict(results.all()) == {"o1": "pen@Ann", "o2": "ink@None", "o3": "cap@None"}


def test_a_right_update_takes_the_right_records_timestamp() -> None:
    driver = TopologyTestDriver(fk_app("join"))
    driver.input_topic("customers").pipe_input("c1", "Ann", 5)
    driver.input_topic("orders").pipe_input("o1", order("pen", "c1"), 10)
    driver.input_topic("orders").pipe_input("o2", order("ink", "c1"), 11)
    driver.input_topic("customers").pipe_input("c1", "Ann B", 20)
    records = driver.output_topic("out").read_records()
    assert [(r.key, r.value, r.timestamp) for r in records] == [
        ("o1", "pen@Ann", 10), ("o2", "ink@Ann", 11), ("o1", "pen@Ann B", 20), ("o2", "ink@Ann B", 20)]


@pytest.mark.parametrize("how", ["join", "left_join"])
def test_a_left_update_joining_a_later_right_row_takes_the_later_timestamp(how: str) -> None:
    """Kafka Streams stamps a subscription's answer with the later of the left update and the
    right row (SubscriptionJoinProcessorSupplier); without a right row (or one a view filters
    out), with the left update's."""
    app = fk_app(how, right_view=lambda t: t.filter(lambda k, name: name != "hidden"))
    driver = TopologyTestDriver(app)
    driver.input_topic("customers").pipe_input("x", "r7", 4)
    driver.input_topic("customers").pipe_input("h", "hidden", 9)
    driver.input_topic("orders").pipe_input("k2", order("pen", "x"), 3)     # right row is later: @4
    driver.input_topic("orders").pipe_input("k3", order("ink", "x"), 6)     # left update is later: @6
    driver.input_topic("orders").pipe_input("k4", order("cap", "none"), 2)  # no right row: @2
    driver.input_topic("orders").pipe_input("k5", order("mug", "h"), 1)     # filtered out: @1
    records = [(r.key, r.value, r.timestamp) for r in driver.output_topic("out").read_records()]
    expected = [("k2", "pen@r7", 4), ("k3", "ink@r7", 6)]
    if how == "left_join":
        expected += [("k4", "cap@None", 2), ("k5", "mug@None", 1)]
    assert records == expected


@pytest.mark.parametrize("how, expected", [
    ("join", [("k1", "pen@r9", 12), ("k2", "ink@r9", 10), ("k3", "cap@r9", 11),
              ("k1", None, 9), ("k2", None, 9), ("k3", None, 7)]),
    ("left_join", [("k1", "pen@r9", 12), ("k2", "ink@r9", 10), ("k3", "cap@r9", 11),
                   ("k1", "pen@None", 6), ("k2", None, 5), ("k3", "cap@None", 7)]),
])
def test_a_result_lost_with_the_foreign_key_takes_kafka_streams_timestamp(how: str, expected) -> None:
    """An inner join's left row losing its foreign key (``None``, or the row deleted) is
    answered through the row its old foreign key referred to (Kafka Streams' DELETE_KEY_AND_
    PROPAGATE): the deleted result is as of the later of the update and that row
    (``right x@9, left k1->x@12, left k1->None@6`` deletes at 9). A left join answers by
    the left key at once, with the update's time; a foreign key moved to a missing row is
    answered by that row's side, with the update's time, in both."""
    driver = TopologyTestDriver(fk_app(how))
    driver.input_topic("customers").pipe_input("x", "r9", 9)
    orders = driver.input_topic("orders")
    orders.pipe_input("k1", order("pen", "x"), 12)
    orders.pipe_input("k2", order("ink", "x"), 10)
    orders.pipe_input("k3", order("cap", "x"), 11)
    orders.pipe_input("k1", order("pen", None), 6)
    orders.pipe_input("k2", None, 5)
    orders.pipe_input("k3", order("cap", "none"), 7)
    assert [(r.key, r.value, r.timestamp) for r in driver.output_topic("out").read_records()] == expected


# -- views and serdes ------------------------------------------------------------------------------

def test_filter_and_map_values_views_on_both_sides() -> None:
    app = fk_app("join",
                 left_view=lambda t: t.filter(lambda k, o: o["qty"] > 0),
                 right_view=lambda t: t.filter(lambda k, c: c["active"]).map_values(lambda c: c["name"]))
    driver = TopologyTestDriver(app)
    pipe(driver, [
        ("C", "c1", {"name": "Ann", "active": True}),
        ("O", "o1", {"item": "pen", "cust": "c1", "qty": 1}),
        ("O", "o1", {"item": "pen", "cust": "c1", "qty": 0}),     # left row filtered out: deleted
        ("O", "o1", {"item": "pen", "cust": "c1", "qty": 2}),     # back
        ("C", "c1", {"name": "Ann", "active": False}),            # right row filtered out: deleted
        ("C", "c1", {"name": "Ann B", "active": False}),          # still filtered out: nothing
        ("C", "c1", {"name": "Ann C", "active": True}),
        ("O", "o1", None),
    ])
    assert read(driver) == [("o1", "pen@Ann"), ("o1", None), ("o1", "pen@Ann"), ("o1", None),
                            ("o1", "pen@Ann C"), ("o1", None)]
    assert dict(driver.store("J").all()) == {}


def test_declared_serdes_and_the_results_value_serde() -> None:
    app = sk.App("fk-serdes")
    app.topic("orders", key_serde=Int(), value_serde=Json())
    app.topic("customers", key_serde=String(), value_serde=String())
    app.topic("out", key_serde=Int(), value_serde=String())

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        b.table("orders", name="O").join(b.table("customers", name="C"), describe_order,
                                         foreign_key_extractor=lambda o: o["cust"], name="J",
                                         value_serde=String()).to_stream().to("out")

    driver = TopologyTestDriver(app)
    driver.input_topic("customers").pipe_input("c1", "Ann", 1)
    driver.input_topic("orders").pipe_input(7, order("pen", "c1"), 2)
    driver.input_topic("orders").pipe_input(8, order("ink", "c1"), 3)
    driver.input_topic("customers").pipe_input("c1", "Bo", 4)
    assert read(driver) == [(7, "pen@Ann"), (8, "ink@Ann"), (7, "pen@Bo"), (8, "ink@Bo")]
    assert dict(driver.store("J").all()) == {7: "pen@Bo", 8: "ink@Bo"}


# -- the result is a table ---------------------------------------------------------------------------

def test_group_by_over_the_result_moves_amounts_on_a_foreign_key_change() -> None:
    app = sk.App("fk-agg")

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        joined = b.table("orders", name="O").left_join(
            b.table("customers", name="C"), lambda o, region: {"region": region, "amount": o["amount"]},
            foreign_key_extractor=lambda o: o["cust"], name="J")
        joined.group_by(lambda k, v: (v["region"] or "none", v["amount"])).reduce(
            lambda total, v: total + v, lambda total, v: total - v, name="totals").to_stream().to("out")

    driver = TopologyTestDriver(app)
    pipe(driver, [
        ("C", "c1", "eu"), ("C", "c2", "us"),
        ("O", "o1", {"cust": "c1", "amount": 10}),
        ("O", "o2", {"cust": "c1", "amount": 5}),
        ("O", "o1", {"cust": "c2", "amount": 10}),     # fk change: 10 moves from eu to us
        ("C", "c1", "apac"),                           # o2 moves from eu to apac
        ("C", "c1", None),                             # o2 has no region any more
        ("O", "o2", None),
    ])
    assert read(driver) == [("eu", 10), ("eu", 15), ("eu", 5), ("us", 10), ("eu", 0), ("apac", 5),
                            ("apac", 0), ("none", 5), ("none", 0)]


def test_chained_foreign_key_joins() -> None:
    """orders -> customers (inner) -> regions (left): a region change of the customer
    re-subscribes the intermediate result to the new region."""
    app = sk.App("fk-chain")

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        orders, customers, regions = (b.table(t, name=n) for t, n in
                                      (("orders", "O"), ("customers", "C"), ("regions", "R")))
        first = orders.join(customers, lambda o, c: {"item": o["item"], "region": c["region"]},
                            foreign_key_extractor=lambda o: o["cust"], name="J1")
        first.left_join(regions, lambda v, r: f"{v['item']}/{r}", foreign_key_extractor=lambda v: v["region"],
                        name="J2").to_stream().to("out")

    driver = TopologyTestDriver(app)
    orders, customers, regions = (driver.input_topic(t) for t in ("orders", "customers", "regions"))
    regions.pipe_input("eu", "Europe", 1)
    customers.pipe_input("c1", {"region": "eu"}, 2)
    orders.pipe_input("o1", order("pen", "c1"), 3)
    customers.pipe_input("c1", {"region": "us"}, 4)    # no "us" region yet
    regions.pipe_input("us", "USA", 5)
    regions.pipe_input("eu", "EU", 6)                  # o1 no longer refers to eu: nothing
    customers.pipe_input("c1", None, 7)                # the first join loses o1, so does the second
    assert read(driver) == [("o1", "pen/Europe"), ("o1", "pen/None"), ("o1", "pen/USA"), ("o1", None)]
    assert dict(driver.store("J1").all()) == {}
    assert dict(driver.store("J2").all()) == {}


@pytest.mark.parametrize("how, expected", [
    pytest.param("join", [("e2", "ann<boss"), ("e2", "ann<BOSS"), ("e2", None)], id="inner"),
    pytest.param("left_join", [("e1", "boss<None"), ("e2", "ann<boss"), ("e2", "ann<BOSS"), ("e1", "BOSS<None"),
                               ("e2", "ann<None"), ("e1", None)], id="left"),
])
def test_a_table_joined_with_itself_on_a_foreign_key(how: str, expected: List[KV]) -> None:
    """Employees joined with their manager's row, in the same table."""
    app = sk.App("fk-self")

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        employees = b.table("employees", name="E")
        getattr(employees, how)(employees, lambda e, m: f"{e['name']}<{m['name'] if m else None}",
                                foreign_key_extractor=lambda e: e["manager"], name="J").to_stream().to("out")

    driver = TopologyTestDriver(app)
    employees = driver.input_topic("employees")
    employees.pipe_input("e1", {"name": "boss", "manager": None}, 1)
    employees.pipe_input("e2", {"name": "ann", "manager": "e1"}, 2)
    employees.pipe_input("e1", {"name": "BOSS", "manager": None}, 3)
    employees.pipe_input("e1", None, 4)
    assert read(driver) == expected


# -- topology ------------------------------------------------------------------------------------------

def test_two_internal_topics_and_no_co_partitioning() -> None:
    topology = fk_app("join").build()
    internal = {"fk-J-subscription-repartition", "fk-J-response-repartition"}
    assert internal <= set(topology.repartition_topics)
    assert all(topology.topics[t].internal for t in internal)
    assert len(topology.sub_topologies) == 2
    counts = resolve_partitions(topology, {"orders": 3, "customers": 5})
    assert counts["fk-J-subscription-repartition"] == 5     # read with the right table
    assert counts["fk-J-response-repartition"] == 3         # read with the left table
    assert counts["out"] == 3


def test_describe_shows_both_halves_of_the_join() -> None:
    described = fk_app("join").describe()
    assert "Processor: J-subscribe (foreign-key join: subscribe)" in described
    assert "Sink: J-subscription-repartition (topic: fk-J-subscription-repartition)" in described
    assert "Sink: J-response-repartition (topic: fk-J-response-repartition)" in described
    assert "Processor: J (fk_join, stores: [J, O])" in described
    assert "J-subscriptions (key_value" in described


def _windowed(b: sk.StreamsBuilder) -> sk.Table:
    return b.stream("s").group_by_key().windowed_by(sk.TumblingWindows(size=timedelta(seconds=1))).count(name="w")


ERRORS = [
    pytest.param(lambda b: b.table("l").join(b.table("r"), describe_order, foreign_key_extractor=lambda k, v: v),
                 r"foreign_key_extractor must accept \(value\)", id="extractor-arity"),
    pytest.param(lambda b: b.table("l").join(b.table("r"), describe_order, foreign_key_extractor="cust"),
                 "foreign_key_extractor must be callable", id="extractor-not-callable"),
    pytest.param(lambda b: b.table("l").left_join(_windowed(b), describe_order, foreign_key_extractor=str),
                 "windowed tables cannot be joined", id="windowed-right"),
    pytest.param(lambda b: b.table("l").join(b.table("r"), describe_order, foreign_key_extractor=str,
                                             value_serde="json"),
                 "value_serde must be a serde", id="bad-value-serde"),
]


@pytest.mark.parametrize("build, message", ERRORS)
def test_build_errors(build: Callable[[sk.StreamsBuilder], None], message: str) -> None:
    app = sk.App("fk-bad")
    app.topology(build)
    with pytest.raises(TopologyError, match=message):
        app.build()


def test_an_outer_join_takes_no_foreign_key_extractor() -> None:
    app = sk.App("fk-outer")

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        b.table("l").outer_join(b.table("r"), describe_order, foreign_key_extractor=str)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        app.build()


@pytest.mark.parametrize("extractor, joiner, node", [
    pytest.param(lambda o: o["missing"], describe_order, "J-subscribe", id="extractor-fails"),
    pytest.param(lambda o: o["cust"], lambda o, c: 1 / 0, "J", id="joiner-fails"),
])
def test_user_function_errors_name_the_node(extractor: Callable, joiner: Callable, node: str) -> None:
    app = sk.App("fk-fail")

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        b.table("orders", name="O").join(b.table("customers", name="C"), joiner, foreign_key_extractor=extractor,
                                         name="J").to_stream().to("out")

    driver = TopologyTestDriver(app)
    driver.input_topic("customers").pipe_input("c1", "Ann", 1)
    with pytest.raises(RecordError) as failure:
        driver.input_topic("orders").pipe_input("o1", order("pen", "c1"), 2)
    assert failure.value.node == node


# -- randomized: results equal a brute-force join of the final tables ------------------------------

LEFT_KEYS = "abcdef"
FOREIGN_KEYS = ["x", "y", "z", None]
RIGHT_KEYS = "xyzw"


def brute_force(how: str, left: Dict[str, Dict[str, Any]], right: Dict[str, int]) -> Dict[str, Any]:
    results = {}
    for key, row in left.items():
        other = None if row["fk"] is None else right.get(row["fk"])
        if other is None and how == "join":
            continue
        results[key] = [row["n"], other]
    return results


def _random_fk_app(how: str, app_id: str) -> sk.App:
    """left (store "L") <how> right (store "R") on row["fk"], named "J", joiner [n, other] -> out."""
    app = sk.App(app_id)

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        getattr(b.table("left", name="L"), how)(
            b.table("right", name="R"), lambda row, other: [row["n"], other],
            foreign_key_extractor=lambda row: row["fk"], name="J").to_stream().to("out")
    return app


@pytest.mark.parametrize("how", ["join", "left_join"])
@pytest.mark.parametrize("seed", range(10))
def test_random_updates_match_a_brute_force_join(how: str, seed: int) -> None:
    """Random interleaving of left upserts/deletes (foreign keys among a few, or None) and
    right upserts/deletes. After every input the results store equals the brute-force
    join of the current tables; at the end so does the last value emitted per key."""
    rng = random.Random(seed)
    driver = TopologyTestDriver(_random_fk_app(how, "fk-random"))
    left_topic, right_topic = driver.input_topic("left"), driver.input_topic("right")
    left: Dict[str, Dict[str, Any]] = {}
    right: Dict[str, int] = {}
    emitted: Dict[str, Any] = {}
    for timestamp in range(120):
        if rng.random() < 0.55:
            key = rng.choice(LEFT_KEYS)
            if rng.random() < 0.25:
                left.pop(key, None)
                left_topic.pipe_input(key, None, timestamp)
            else:
                row = {"n": rng.randint(0, 3), "fk": rng.choice(FOREIGN_KEYS)}
                left[key] = row
                left_topic.pipe_input(key, row, timestamp)
        else:
            key = rng.choice(RIGHT_KEYS)
            if rng.random() < 0.3:
                right.pop(key, None)
                right_topic.pipe_input(key, None, timestamp)
            else:
                right[key] = rng.randint(0, 2)
                right_topic.pipe_input(key, right[key], timestamp)
        emitted.update(read(driver))
        assert dict(driver.store("J").all()) == brute_force(how, left, right), f"after input {timestamp}"

    expected = brute_force(how, left, right)
    assert {k: v for k, v in emitted.items() if v is not None} == expected
    assert dict(driver.store("J").all()) == expected


@pytest.mark.parametrize("how", ["join", "left_join"])
@pytest.mark.parametrize("seed", range(10))
def test_random_out_of_order_updates_stamp_results_as_kafka_streams_does(how: str, seed: int) -> None:
    """Property, with timestamps out of order: a result caused by a left upsert is stamped
    with the later of that upsert and the right row it joined (the upsert's own time when
    there is no right row); an inner join's result deleted because the upsert has no foreign
    key, with the later of the upsert and the row of the old foreign key; a result caused by
    a right update carries that update's time."""
    rng = random.Random(1000 + seed)
    driver = TopologyTestDriver(_random_fk_app(how, "fk-random-time"))
    left_topic, right_topic = driver.input_topic("left"), driver.input_topic("right")
    right_time: Dict[str, int] = {}
    left_fk: Dict[str, Any] = {}
    checked = 0
    for _ in range(120):
        timestamp = rng.randint(0, 200)
        if rng.random() < 0.55:
            key = rng.choice(LEFT_KEYS)
            row = {"n": rng.randint(0, 3), "fk": rng.choice(FOREIGN_KEYS)}
            left_topic.pipe_input(key, row, timestamp)
            fk, old_fk = row["fk"], left_fk.get(key)
            left_fk[key] = fk
            answering = old_fk if how == "join" and fk is None and old_fk is not None else fk
            expected = max(timestamp, right_time[answering]) if answering in right_time else timestamp
        else:
            key = rng.choice(RIGHT_KEYS)
            if rng.random() < 0.3:
                right_time.pop(key, None)
                right_topic.pipe_input(key, None, timestamp)
            else:
                right_time[key] = timestamp
                right_topic.pipe_input(key, rng.randint(0, 2), timestamp)
            expected = timestamp
        for record in driver.output_topic("out").read_records():
            assert record.timestamp == expected, (record, expected)
            checked += 1
    assert checked > 20
