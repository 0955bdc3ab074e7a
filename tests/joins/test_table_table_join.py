"""Table-table joins on the key (inner, left, outer), through the TopologyTestDriver.

The kinds of cases Kafka Streams' KTableKTableInnerJoinTest / LeftJoinTest /
OuterJoinTest cover: an update of either side emits the joined result for its key,
read with the other side's current row; deletes (``None`` values) retract results;
updates that neither had nor have a result emit nothing; filter/map_values views on
either side; the result is a table (to_stream, group_by); co-partitioning and
build-time errors.

Each table case lists its inputs as ``(side, key, value, timestamp)`` and the exact
output of ``to_stream().to("out")`` as ``(key, value, timestamp)``, written out by
hand. A result's timestamp is the larger of the two rows' timestamps.
"""
from __future__ import annotations

import random
from datetime import timedelta
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import pytest

import streamkit as sk
from streamkit.errors import TopologyError
from streamkit.testing import TopologyTestDriver
from streamkit.topology.passes import resolve_partitions

Step = Tuple[str, Any, Any, int]       # ("L" | "R", key, value, timestamp)
Output = Tuple[Any, Any, int]           # (key, value, timestamp)

TOPICS = {"L": "left", "R": "right"}


def concat(left: Any, right: Any) -> str:
    return f"{left}+{right}"


def key_join_app(how: str, *, joiner: Callable[[Any, Any], Any] = concat,
                 left_view: Optional[Callable[[sk.Table], sk.Table]] = None,
                 right_view: Optional[Callable[[sk.Table], sk.Table]] = None) -> sk.App:
    """left (store "L") <how> right (store "R"), named "J", to_stream() -> out."""
    app = sk.App("tt")

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        left = b.table("left", name="L")
        right = b.table("right", name="R")
        if left_view is not None:
            left = left_view(left)
        if right_view is not None:
            right = right_view(right)
        getattr(left, how)(right, joiner, name="J").to_stream().to("out")
    return app


def pipe(driver: TopologyTestDriver, steps: Sequence[Step]) -> None:
    for side, key, value, timestamp in steps:
        driver.input_topic(TOPICS[side]).pipe_input(key, value, timestamp)


def read(driver: TopologyTestDriver, topic: str = "out") -> List[Output]:
    return [(r.key, r.value, r.timestamp) for r in driver.output_topic(topic).read_records()]


# -- one input sequence, three join kinds --------------------------------------------------

# Modelled on the Kafka Streams tests: keys 0..3, X values on the left, Y on the right.
SEQUENCE: List[Step] = [
    ("L", "0", "X0", 10),      # 1  left row without a right row
    ("L", "1", "X1", 11),      # 2
    ("R", "0", "Y0", 12),      # 3  right row meets the left row
    ("R", "1", "Y1", 5),       # 4  older than its partner: the result takes the left row's timestamp
    ("R", "2", "Y2", 13),      # 5  right row without a left row
    ("L", "0", "X0'", 14),     # 6  left update
    ("R", "1", None, 15),      # 7  right delete while the left row exists
    ("L", "0", None, 17),      # 8  left delete while the right row exists
    ("R", "3", None, 18),      # 9  delete of a key neither side has
    ("L", "3", "X3", 19),      # 10 left row without a right row
    ("R", "0", None, 20),      # 11 right delete after the left row is gone
    ("R", "2", None, 21),      # 12 right delete of a row that never had a left partner
]

SEQUENCE_CASES = [
    pytest.param("join", [
        ("0", "X0+Y0", 12),    # 3
        ("1", "X1+Y1", 11),    # 4
        ("0", "X0'+Y0", 14),   # 6
        ("1", None, 15),       # 7  the result disappears: a deletion
        ("0", None, 17),       # 8
    ], id="inner"),
    pytest.param("left_join", [
        ("0", "X0+None", 10),  # 1
        ("1", "X1+None", 11),  # 2
        ("0", "X0+Y0", 12),    # 3
        ("1", "X1+Y1", 11),    # 4
        ("0", "X0'+Y0", 14),   # 6
        ("1", "X1+None", 15),  # 7  the left row stays, joined with None
        ("0", None, 17),       # 8
        ("3", "X3+None", 19),  # 10
    ], id="left"),
    pytest.param("outer_join", [
        ("0", "X0+None", 10),  # 1
        ("1", "X1+None", 11),  # 2
        ("0", "X0+Y0", 12),    # 3
        ("1", "X1+Y1", 11),    # 4
        ("2", "None+Y2", 13),  # 5  a right row alone has a result
        ("0", "X0'+Y0", 14),   # 6
        ("1", "X1+None", 15),  # 7
        ("0", "None+Y0", 17),  # 8  the right row stays, joined with None
        ("3", "X3+None", 19),  # 10
        ("0", None, 20),       # 11 neither side left: a deletion
        ("2", None, 21),       # 12
    ], id="outer"),
]


@pytest.mark.parametrize("how, expected", SEQUENCE_CASES)
def test_each_update_emits_the_join_with_the_other_sides_current_row(how: str, expected: List[Output]) -> None:
    driver = TopologyTestDriver(key_join_app(how))
    pipe(driver, SEQUENCE)
    assert read(driver) == expected


# -- short scenarios ------------------------------------------------------------------------

SCENARIOS = [
    pytest.param(
        "join",
        [("L", "a", "x1", 1), ("L", "a", "x2", 2), ("L", "a", None, 3), ("L", "a", None, 4)],
        [], id="inner-left-only-updates-and-deletes-emit-nothing"),
    pytest.param(
        "join",
        [("R", "a", "y1", 1), ("R", "a", "y2", 2), ("R", "a", None, 3)],
        [], id="inner-right-only-updates-and-deletes-emit-nothing"),
    pytest.param(
        "join",
        [("L", "a", "x1", 1), ("R", "a", "y1", 2), ("R", "a", "y2", 3), ("R", "a", "y3", 4)],
        [("a", "x1+y1", 2), ("a", "x1+y2", 3), ("a", "x1+y3", 4)], id="inner-right-updates"),
    pytest.param(
        "join",
        [("L", "a", "x1", 1), ("R", "a", "y1", 2), ("L", "a", None, 3), ("L", "a", "x2", 4)],
        [("a", "x1+y1", 2), ("a", None, 3), ("a", "x2+y1", 4)], id="inner-left-delete-and-reinsert"),
    pytest.param(
        "join",
        [("L", "a", "x1", 1), ("R", "a", "y1", 2), ("R", "a", None, 3), ("R", "a", None, 4),
         ("R", "a", "y2", 5)],
        [("a", "x1+y1", 2), ("a", None, 3), ("a", "x1+y2", 5)], id="inner-double-delete-emits-once"),
    pytest.param(
        "join",
        [("L", "a", "x1", 1), ("R", "b", "y1", 2), ("R", "a", "y2", 3), ("L", "b", "x2", 4)],
        [("a", "x1+y2", 3), ("b", "x2+y1", 4)], id="inner-keys-are-independent"),
    pytest.param(
        "join",
        [("L", "a", "x1", 100), ("R", "a", "y1", 50), ("R", "a", "y2", 60), ("L", "a", "x2", 70)],
        [("a", "x1+y1", 100), ("a", "x1+y2", 100), ("a", "x2+y2", 70)],
        id="inner-result-timestamp-is-the-max-of-both-rows"),
    pytest.param(
        "left_join",
        [("R", "a", "y1", 1), ("R", "a", None, 2), ("R", "a", "y2", 3)],
        [], id="left-right-rows-alone-emit-nothing"),
    pytest.param(
        "left_join",
        [("L", "a", "x1", 1), ("R", "a", "y1", 2), ("L", "a", "x2", 3), ("L", "a", None, 4),
         ("R", "a", None, 5)],
        [("a", "x1+None", 1), ("a", "x1+y1", 2), ("a", "x2+y1", 3), ("a", None, 4)],
        id="left-delete-retracts-and-a-later-right-delete-emits-nothing"),
    pytest.param(
        "left_join",
        [("L", "a", None, 1), ("L", "a", "x1", 2), ("R", "a", None, 3)],
        [("a", "x1+None", 2)], id="left-deleting-missing-rows-emits-nothing"),
    pytest.param(
        "outer_join",
        [("R", "a", "y1", 1), ("L", "a", "x1", 2), ("R", "a", None, 3), ("L", "a", None, 4)],
        [("a", "None+y1", 1), ("a", "x1+y1", 2), ("a", "x1+None", 3), ("a", None, 4)],
        id="outer-right-first-then-both-deleted"),
    pytest.param(
        "outer_join",
        [("L", "a", "x1", 1), ("L", "a", None, 2), ("R", "a", "y1", 3), ("R", "a", None, 4),
         ("R", "a", None, 5), ("L", "b", None, 6)],
        [("a", "x1+None", 1), ("a", None, 2), ("a", "None+y1", 3), ("a", None, 4)],
        id="outer-each-side-alone"),
]


@pytest.mark.parametrize("how, steps, expected", SCENARIOS)
def test_scenarios(how: str, steps: List[Step], expected: List[Output]) -> None:
    driver = TopologyTestDriver(key_join_app(how))
    pipe(driver, steps)
    assert read(driver) == expected


# -- filter / map_values views on either side ----------------------------------------------------

def active(key: Any, value: Any) -> bool:
    return value["active"]


VIEW_CASES = [
    pytest.param(
        "join",
        [("L", "a", {"n": 1, "active": True}, 1), ("R", "a", "y", 2),
         ("L", "a", {"n": 2, "active": False}, 3),    # filtered out: the result is deleted
         ("L", "a", {"n": 3, "active": False}, 4),    # still filtered out: nothing
         ("R", "a", "z", 5),                          # the left row counts as absent: nothing
         ("L", "a", {"n": 4, "active": True}, 6)],    # back
        [("a", "1+Y", 2), ("a", None, 3), ("a", "4+Z", 6)],
        id="inner-filtered-left-row-counts-as-absent"),
    pytest.param(
        "left_join",
        [("L", "a", {"n": 1, "active": False}, 1), ("R", "a", "y", 2),
         ("L", "a", {"n": 2, "active": True}, 3), ("L", "a", {"n": 3, "active": False}, 4),
         ("R", "a", None, 5)],
        [("a", "2+Y", 3), ("a", None, 4)],
        id="left-filtered-left-row-has-no-result"),
    pytest.param(
        "outer_join",
        [("L", "a", {"n": 1, "active": False}, 1), ("R", "a", "y", 2),
         ("L", "a", {"n": 2, "active": True}, 3), ("L", "a", {"n": 3, "active": False}, 4)],
        [("a", "None+Y", 2), ("a", "2+Y", 3), ("a", "None+Y", 4)],
        id="outer-filtered-left-row-counts-as-absent"),
]


@pytest.mark.parametrize("how, steps, expected", VIEW_CASES)
def test_a_filtered_out_left_row_counts_as_absent(how: str, steps: List[Step], expected: List[Output]) -> None:
    app = key_join_app(how, left_view=lambda t: t.filter(active).map_values(lambda v: v["n"]),
                       right_view=lambda t: t.map_values(str.upper))
    driver = TopologyTestDriver(app)
    pipe(driver, steps)
    assert read(driver) == expected


@pytest.mark.parametrize("how, expected", [
    pytest.param("join", [("a", "x+1", 2), ("a", None, 3), ("a", "x+5", 6)], id="inner"),
    pytest.param("left_join", [("a", "x+None", 1), ("a", "x+1", 2), ("a", "x+None", 3), ("a", "x+5", 6)],
                 id="left"),
])
def test_a_filtered_out_right_row_counts_as_absent(how: str, expected: List[Output]) -> None:
    app = key_join_app(how, right_view=lambda t: t.filter_not(lambda k, v: v["n"] % 2 == 0)
                       .map_values(lambda v: v["n"]))
    driver = TopologyTestDriver(app)
    pipe(driver, [("L", "a", "x", 1), ("R", "a", {"n": 1}, 2),
                  ("R", "a", {"n": 2}, 3),  # filtered out: as a delete
                  ("R", "a", {"n": 6}, 4),  # still filtered out: nothing
                  ("R", "b", {"n": 3}, 5),  # no left row
                  ("R", "a", {"n": 5}, 6)])
    assert read(driver) == expected


# -- the result is a table -------------------------------------------------------------------------

def test_the_result_is_a_table_whose_updates_carry_the_old_result_to_group_by() -> None:
    """group_by(...).reduce(adder, subtractor) over the join: a region change or a delete
    subtracts the old joined row from its old group."""
    app = sk.App("tt-agg")

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        joined = b.table("accounts", name="A").join(
            b.table("regions", name="R"), lambda amount, region: {"region": region, "amount": amount}, name="J")
        joined.group_by(lambda k, v: (v["region"], v["amount"])).reduce(
            lambda total, v: total + v, lambda total, v: total - v, name="totals").to_stream().to("out")

    driver = TopologyTestDriver(app)
    accounts, regions = driver.input_topic("accounts"), driver.input_topic("regions")
    accounts.pipe_input("k1", 10, 1)
    regions.pipe_input("k1", "eu", 2)
    accounts.pipe_input("k2", 5, 3)
    regions.pipe_input("k2", "eu", 4)
    regions.pipe_input("k1", "us", 5)      # k1 moves from eu to us
    accounts.pipe_input("k2", 7, 6)        # 5 -> 7 in eu
    regions.pipe_input("k2", None, 7)      # k2 leaves the inner join
    assert driver.output_topic("out").read_key_values() == [
        ("eu", 10), ("eu", 15), ("eu", 5), ("us", 10), ("eu", 7), ("eu", 0)]
    assert driver.store("totals").get("eu") == 0
    assert driver.store("totals").get("us") == 10


def test_map_values_and_filter_on_the_result() -> None:
    app = sk.App("tt-chain")

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        joined = b.table("left", name="L").left_join(b.table("right", name="R"), lambda a, c: [a, c], name="J")
        joined.filter(lambda k, v: v[1] is not None).map_values(lambda v: f"{v[0]}/{v[1]}").to_stream().to("out")

    driver = TopologyTestDriver(app)
    pipe(driver, [("L", "a", "x", 1), ("R", "a", "y", 2), ("R", "a", None, 3), ("L", "a", None, 4)])
    assert read(driver) == [("a", "x/y", 2), ("a", None, 3)]


def test_an_aggregated_table_can_be_joined() -> None:
    app = sk.App("tt-count")

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        clicks = b.stream("clicks").group_by_key().count(name="click-counts")
        b.table("users", name="U").left_join(clicks, lambda user, n: f"{user}:{n}", name="J").to_stream().to("out")

    driver = TopologyTestDriver(app)
    driver.input_topic("users").pipe_input("u1", "ann", 1)
    driver.input_topic("clicks").pipe_input("u1", "x", 2)
    driver.input_topic("clicks").pipe_input("u1", "x", 3)
    driver.input_topic("clicks").pipe_input("u2", "x", 4)     # no user row: nothing
    assert read(driver) == [("u1", "ann:None", 1), ("u1", "ann:1", 2), ("u1", "ann:2", 3)]


# -- self-joins (issue 18 item 5): one result per update, the old one from the row before it --------

def _self_join_app(how: str, left: Callable[[sk.Table], sk.Table], right: Callable[[sk.Table], sk.Table],
                   source: Callable[[sk.StreamsBuilder], sk.Table]) -> sk.App:
    app = sk.App("tt-self")

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        table = source(b)
        getattr(left(table), how)(right(table), lambda a, c: [a, c], name="J").to_stream().to("out")
    return app


def _table(b: sk.StreamsBuilder) -> sk.Table:
    return b.table("t", name="T")


def _summed(b: sk.StreamsBuilder) -> sk.Table:
    return b.stream("t").group_by_key().reduce(lambda a, c: a + c, name="T")


SELF_JOIN_CASES = {
    # an update replaces the result once; a delete retracts it
    "inner, map_values view": (
        "join", lambda t: t, lambda t: t.map_values(lambda v: v * 10), _table,
        [("k", 1, 1), ("k", 2, 2), ("k", None, 3), ("k", None, 4)],
        [("k", [1, 10], 1), ("k", [2, 20], 2), ("k", None, 3)]),
    # the right view filters the row out and back in: the inner result follows it
    "inner, filter view": (
        "join", lambda t: t, lambda t: t.filter(lambda k, v: v > 1), _table,
        [("k", 1, 1), ("k", 2, 2), ("k", 0, 3), ("j", 0, 4)],
        [("k", [2, 2], 2), ("k", None, 3)]),
    # a left self-join keeps the row while the right view has none
    "left, filter view": (
        "left_join", lambda t: t.map_values(lambda v: -v), lambda t: t.filter(lambda k, v: v > 1), _table,
        [("k", 1, 1), ("k", 2, 2), ("k", 0, 3), ("k", None, 5)],
        [("k", [-1, None], 1), ("k", [-2, 2], 2), ("k", [0, None], 3), ("k", None, 5)]),
    # outer: a row filtered out of both views has no result
    "outer, both filtered": (
        "outer_join", lambda t: t.filter(lambda k, v: v % 2 == 0), lambda t: t.filter(lambda k, v: v > 2), _table,
        [("k", 1, 1), ("k", 2, 2), ("k", 3, 3), ("k", 4, 4), ("k", None, 6)],
        [("k", [2, None], 2), ("k", [None, 3], 3), ("k", [4, 4], 4), ("k", None, 6)]),
    # the store's owner may be an aggregation: its Change(new, old) feeds the join
    "inner, aggregated table": (
        "join", lambda t: t, lambda t: t.map_values(lambda v: v * 10), _summed,
        [("k", 1, 1), ("k", 2, 2), ("j", 5, 3)],
        [("k", [1, 10], 1), ("k", [3, 30], 2), ("j", [5, 50], 3)]),
}


@pytest.mark.parametrize("case", SELF_JOIN_CASES)
def test_a_table_joined_with_a_view_of_itself_emits_once_and_retracts_on_delete(case: str) -> None:
    how, left, right, source, inputs, expected = SELF_JOIN_CASES[case]
    driver = TopologyTestDriver(_self_join_app(how, left, right, source))
    topic = driver.input_topic("t")
    for key, value, timestamp in inputs:
        topic.pipe_input(key, value, timestamp)
    assert read(driver) == expected


def test_a_self_join_reads_the_store_owner_and_describes_one_input() -> None:
    app = _self_join_app("join", lambda t: t, lambda t: t.map_values(lambda v: v), _table)
    [join] = [node for node in app.build().nodes.values() if node.name == "J"]
    assert join.parents == ("T",) and join.self_join
    assert "Processor: J (inner join of tables, stores: [T, T])" in app.describe()


@pytest.mark.parametrize("how", ["join", "left_join", "outer_join"])
def test_a_randomized_self_join_emits_each_update_once_from_the_rows_before_and_after(how: str) -> None:
    """Invariant, for random updates and deletes of a few keys: an update of a row
    emits exactly one record, ``join(left(new), right(new))``, unless it leaves the
    result as it was (absent, or equal); nothing else is emitted."""
    rules = {"join": lambda a, c: None if a is None or c is None else [a, c],
             "left_join": lambda a, c: None if a is None else [a, c],
             "outer_join": lambda a, c: None if a is None and c is None else [a, c]}
    rule = rules[how]

    def joined(value: Any) -> Any:
        if value is None:
            return None
        return rule(None if value == 2 else value, value * 10 if value % 3 else None)

    rng = random.Random(f"self-join {how}")
    inputs = [(rng.choice("abc"), rng.choice([None, 1, 2, 3, 4, 5, 6]), t) for t in range(400)]
    driver = TopologyTestDriver(_self_join_app(
        how, lambda t: t.filter(lambda k, v: v != 2),
        lambda t: t.filter(lambda k, v: v % 3 != 0).map_values(lambda v: v * 10), _table))
    rows: Dict[str, Any] = {}
    expected: List[Output] = []
    for key, value, timestamp in inputs:
        driver.input_topic("t").pipe_input(key, value, timestamp)
        old, rows[key] = rows.get(key), value
        if joined(value) != joined(old):
            expected.append((key, joined(value), timestamp))
    assert read(driver) == expected
    assert len(expected) > 100


# -- topology: co-partitioning, describe, errors ---------------------------------------------------

def test_inputs_must_be_co_partitioned() -> None:
    topology = key_join_app("join").build()
    with pytest.raises(TopologyError, match=r"'left' \(3 partitions\) and 'right' \(5 partitions\)|"
                                            r"'right' \(5 partitions\) and 'left' \(3 partitions\)"):
        resolve_partitions(topology, {"left": 3, "right": 5})
    assert resolve_partitions(topology, {"left": 4, "right": 4})["out"] == 4
    assert not topology.repartition_topics
    assert len(topology.sub_topologies) == 1


@pytest.mark.parametrize("how, text", [("join", "inner"), ("left_join", "left"), ("outer_join", "outer")])
def test_describe_names_the_join_kind_and_both_stores(how: str, text: str) -> None:
    described = key_join_app(how).describe()
    assert f"Processor: J ({text} join of tables, stores: [L, R])" in described
    assert "<-- L, R" in described


def _error_app(build: Callable[[sk.StreamsBuilder], None]) -> sk.App:
    app = sk.App("tt-bad")
    app.topology(build)
    return app


def _windowed(b: sk.StreamsBuilder) -> sk.Table:
    return b.stream("s").group_by_key().windowed_by(sk.TumblingWindows(size=timedelta(seconds=1))).count(name="w")


def _join_of_join(b: sk.StreamsBuilder) -> None:
    joined = b.table("l").join(b.table("r"), concat, name="J")
    joined.join(b.table("x"), concat)


def _name_used_twice(b: sk.StreamsBuilder) -> None:
    b.table("l").join(b.table("r"), concat, name="J")
    b.stream("x").map_values(str, name="J")


ERRORS = [
    pytest.param(lambda b: _windowed(b).join(b.table("t"), concat), "windowed tables cannot be joined",
                 id="windowed-left"),
    pytest.param(lambda b: b.table("t").outer_join(_windowed(b), concat), "windowed tables cannot be joined",
                 id="windowed-right"),
    pytest.param(_join_of_join, "table 'J' cannot be joined: it is not backed by a store", id="join-result"),
    pytest.param(lambda b: b.table("l").join(b.table("r"), lambda a: a),
                 r"joiner must accept \(value, other_value\)", id="joiner-arity"),
    pytest.param(lambda b: b.table("l").left_join(b.stream("r"), concat),
                 r"Table.left_join\(\) takes a table of the same topology", id="stream-argument"),
    pytest.param(_name_used_twice, "name 'J' is used twice", id="duplicate-name"),
]


@pytest.mark.parametrize("build, message", ERRORS)
def test_build_errors_say_what_to_change(build: Callable[[sk.StreamsBuilder], None], message: str) -> None:
    with pytest.raises(TopologyError, match=message):
        _error_app(build).build()


def test_a_table_of_another_topology_is_refused() -> None:
    other = sk.App("other")
    tables: Dict[str, sk.Table] = {}

    @other.topology
    def build_other(b: sk.StreamsBuilder) -> None:
        tables["r"] = b.table("r")
    other.build()

    with pytest.raises(TopologyError, match="takes a table of the same topology"):
        _error_app(lambda b: b.table("l").join(tables["r"], concat)).build()


# -- randomized: the last result per key is the join of the final tables -------------------------

@pytest.mark.parametrize("how", ["join", "left_join", "outer_join"])
@pytest.mark.parametrize("seed", range(8))
def test_random_updates_end_in_the_join_of_the_final_tables(how: str, seed: int) -> None:
    """Random upserts and deletes on both sides (a filter on the left, map_values on the
    right): every emitted record is for the key just updated, and the last value emitted
    per key is the brute-force join of the final tables (None where there is no result)."""
    rng = random.Random(seed)
    app = key_join_app(how, joiner=lambda a, c: [a, c],
                       left_view=lambda t: t.filter(lambda k, v: v % 3 != 0),
                       right_view=lambda t: t.map_values(lambda v: v * 10))
    driver = TopologyTestDriver(app)
    tables: Dict[str, Dict[str, int]] = {"L": {}, "R": {}}
    last: Dict[str, Any] = {}
    for timestamp in range(80):
        side, key = rng.choice("LR"), rng.choice("abcd")
        value = None if rng.random() < 0.3 else rng.randint(0, 5)
        if value is None:
            tables[side].pop(key, None)
        else:
            tables[side][key] = value
        pipe(driver, [(side, key, value, timestamp)])
        for out_key, out_value, _ in read(driver):
            assert out_key == key
            last[out_key] = out_value

    expected: Dict[str, Any] = {}
    for key in "abcd":
        left = tables["L"].get(key)
        left = left if left is not None and left % 3 != 0 else None
        right = tables["R"].get(key)
        right = None if right is None else right * 10
        has = {"join": left is not None and right is not None, "left_join": left is not None,
               "outer_join": left is not None or right is not None}[how]
        expected[key] = [left, right] if has else None
    assert {key: last.get(key) for key in "abcd"} == expected
