"""Spark replay vs the live runtime, for every kind of join.

Each test builds a small join app, generates a few hundred input records with a
seeded ``random.Random``, writes them to an embedded broker, replays the app on
Spark and compares the replay's output topics with the TopologyTestDriver's (which
runs the live runtime's tasks synchronously) or with the real embedded worker.

Processing order. A live task reading several topics takes the record with the
smallest timestamp next across its input partitions, each partition in offset
order, ties going to the input listed first in the sub-topology
(:class:`streamkit.runtime.ordering.task_inputs.TaskInputs`); the driver processes records
in the order they are piped. So every two-input test generates each topic's
records in offset order (out-of-order timestamps within a topic included) and
pipes them into the driver in the order that merge gives (:func:`live_order`, an
independent model of the live task, not the replay's sort key). Written to the
broker, each topic keeps its own offset order, so the replay sees the same input.

Global tables are loaded whole before any task runs (as on a live worker), so the
driver gets the global topic's records first. A foreign-key join spans two tasks
that feed each other through internal topics: the replay runs the cycle the way the
driver does (each input record to completion), so the full output is compared with
the driver's; a live worker's interleaving of the two tasks depends on timing, so
against it only the final result per key is compared.
"""
from __future__ import annotations

import random
from datetime import timedelta
from typing import Any, Dict, List, Optional, Sequence, Tuple

import pytest

import streamkit as sk

from .harness import driver_outputs, live_order, per_key, replay_outputs, worker_outputs, write_inputs

pytestmark = pytest.mark.spark

MS = timedelta(milliseconds=1)

Input = Tuple[str, Any, Any, int]          # (topic, key, value, timestamp)
Side = List[Tuple[Any, Any, int]]          # one topic's (key, value, timestamp) in offset order


# -- input generation and ordering ---------------------------------------------------------------------


def timeline(rng: random.Random, n: int, topics: Sequence[Tuple[str, float]], *, step: Tuple[int, int] = (0, 4),
             disorder: float = 0.0, jitter: Tuple[int, int] = (1, 40)) -> Dict[str, List[Tuple[int, int]]]:
    """``n`` events on one clock split between ``topics`` (name, weight): per topic, a
    list of (event number, timestamp) in offset order. The clock moves by ``step`` per
    event (0 gives ties); with probability ``disorder`` an event's timestamp is moved
    back by ``jitter``."""
    names = [t for t, _ in topics]
    weights = [w for _, w in topics]
    clock = 1000
    out: Dict[str, List[Tuple[int, int]]] = {t: [] for t in names}
    for i in range(n):
        clock += rng.randint(*step)
        ts = clock - rng.randint(*jitter) if rng.random() < disorder else clock
        out[rng.choices(names, weights)[0]].append((i, ts))
    return out


def replay_and_drive(spark: Any, tmp_path: Any, app: sk.App, records: Sequence[Input]
                     ) -> Tuple[Dict[str, list], Dict[str, list]]:
    broker = str(tmp_path / "broker")
    write_inputs(app, broker, records)
    return replay_outputs(spark, app, broker, str(tmp_path / "out")), driver_outputs(app, records)


def concat(left: Any, right: Any) -> str:
    return f"{left}+{right}"


# -- stream-stream -----------------------------------------------------------------------------------------

WINDOWS = sk.JoinWindows.of(10 * MS, grace=15 * MS)
"""A left record at t joins right records in [t-10, t+10]; each side's buffer keeps what is at most
35 ms behind that side's latest record; a record too old for it and without partners is late."""


def stream_stream_app(how: str) -> sk.App:
    app = sk.App(f"ss-{how}", caching=False)

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        left, right = b.stream("left"), b.stream("right")
        operation = {"inner": left.join, "left": left.left_join, "outer": left.outer_join}[how]
        operation(right, concat, WINDOWS, name="j", late_records_topic="late").to("out")
    return app


def stream_stream_input(app: sk.App, seed: int) -> List[Input]:
    rng = random.Random(seed)
    events = timeline(rng, 320, [("left", 1), ("right", 1)], step=(0, 4), disorder=0.12, jitter=(3, 70))
    keys = ["k0", "k1", "k2", "k3", "k4", "k5"]
    sides: Dict[str, Side] = {}
    for topic, items in events.items():
        side: Side = []
        for i, ts in items:
            key: Optional[str] = rng.choice(keys) if rng.random() > 0.02 else None   # a few null keys
            value: Optional[str] = f"{topic[0].upper()}{i}" if rng.random() > 0.02 else None
            side.append((key, value, ts))
        sides[topic] = side
    return live_order(app, sides)


@pytest.mark.parametrize("how, seed", [("inner", 11), ("left", 12), ("outer", 13)])
def test_stream_stream_join_matches_driver(spark, tmp_path, how: str, seed: int) -> None:
    app = stream_stream_app(how)
    records = stream_stream_input(app, seed)
    assert any(ts < max(r[3] for r in records[:i]) - 35 for i, (*_, ts) in enumerate(records) if i), \
        "the input has records late for the join window"
    replayed, driven = replay_and_drive(spark, tmp_path, app, records)
    assert replayed == driven
    out = replayed["out"]
    assert len(out) > 50
    assert any("+" in v and "None" not in v for _k, v, _ts in out)          # joined pairs
    late = [v for _k, v, _ts in replayed.get("late", [])]
    if how != "outer":  # an outer join emits a record too old for its buffer unmatched, at once
        assert late, "records too old for their buffer, without partners, reach the late topic"
    unmatched_left = [v for _k, v, _ts in out if v.endswith("+None")]
    unmatched_right = [v for _k, v, _ts in out if v.startswith("None+")]
    if how == "inner":
        assert not unmatched_left and not unmatched_right
    else:
        assert len(unmatched_left) > 5
        assert (len(unmatched_right) > 5) == (how == "outer")


# -- stream-table --------------------------------------------------------------------------------------------


def stream_table_app(how: str, app_id: Optional[str] = None) -> sk.App:
    app = sk.App(app_id or f"st-{how}", caching=False)

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        orders = b.stream("orders")                  # declared first: listed first in the task
        customers = b.table("customers", name="C")
        getattr(orders, how)(customers, lambda o, c: [o, c], name="j").to("out")
    return app


def stream_table_sides(seed: int, n: int = 320) -> Dict[str, Side]:
    """Orders for customers c0..c9 (c8, c9 never have a row) and updates of customers
    c0..c7 (some deletes), a few out of order; some updates of an order's customer come
    at the order's timestamp (``tie<n>``: a tie goes to the input listed first)."""
    rng = random.Random(seed)
    events = timeline(rng, n, [("orders", 2), ("customers", 1)], step=(0, 3), disorder=0.1)
    sides: Dict[str, Side] = {"orders": [], "customers": []}
    ordered = sorted((i, topic, ts) for topic, items in events.items() for i, ts in items)
    for i, topic, ts in ordered:
        if topic == "orders":
            key = f"c{rng.randint(0, 9)}"
            sides["orders"].append((key, {"n": i}, ts))
            if rng.random() < 0.1:
                sides["customers"].append((key, f"tie{i}", ts))
        else:
            sides["customers"].append((f"c{rng.randint(0, 7)}", None if rng.random() < 0.15 else f"name{i}", ts))
    return sides


def tied_records(sides: Dict[str, Side], joined: Sequence[Tuple[int, Any]]) -> Tuple[int, int]:
    """Of the stream records whose row was updated at their own timestamp (``tie<n>``), how
    many were joined with that update and how many with the row before it."""
    tied = {int(value[3:]) for _k, value, _ts in sides["customers"] if str(value).startswith("tie")}
    seen = [c == f"tie{n}" for n, c in joined if n in tied]
    return sum(seen), len(seen) - sum(seen)


@pytest.mark.parametrize("how, seed", [("join", 21), ("left_join", 22)])
def test_stream_table_join_matches_driver(spark, tmp_path, how: str, seed: int) -> None:
    app = stream_table_app(how)
    topology = app.build()
    assert list(topology.source_nodes(topology.sub_topologies[0])) == ["orders", "customers"]
    sides = stream_table_sides(seed)
    records = live_order(app, sides)
    replayed, driven = replay_and_drive(spark, tmp_path, app, records)
    assert replayed == driven
    out = replayed["out"]
    orders = sum(1 for r in records if r[0] == "orders")
    versions = {c for _k, (_o, c), _ts in out}
    assert len(versions) > 10                        # the table's value of the record's moment, many of them
    if how == "join":
        assert 50 < len(out) < orders and None not in versions
    else:
        assert len(out) == orders and None in versions
    saw_tie, missed_tie = tied_records(sides, [(o["n"], c) for _k, (o, c), _ts in out])
    assert missed_tie > 2 * saw_tie                                         # ties went to the stream


def test_stream_table_join_after_a_key_change_matches_driver(spark, tmp_path) -> None:
    """The stream reaches the join through a repartition topic, listed after the table in
    the join's task: a tie between a table update and a stream record goes to the table."""
    app = sk.App("st-rekey", caching=False)

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        customers = b.table("customers", name="C")
        (b.stream("orders").select_key(lambda k, v: v["c"])
          .left_join(customers, lambda o, c: [o["n"], c], name="j").to("out"))

    repartition = "st-rekey-j-repartition"
    topology = app.build()
    join_task = next(s for s in topology.sub_topologies if "customers" in s.source_topics)
    assert list(topology.source_nodes(join_task)) == ["customers", repartition]
    sides = stream_table_sides(23)
    sides["orders"] = [(f"o{v['n']}", {"n": v["n"], "c": key}, ts) for key, v, ts in sides["orders"]]
    records = live_order(app, sides, via={"orders": repartition})
    replayed, driven = replay_and_drive(spark, tmp_path, app, records)
    assert replayed == driven
    out = replayed["out"]
    assert len(out) == len(sides["orders"])
    assert None in {c for _k, (_n, c), _ts in out}
    saw_tie, missed_tie = tied_records(sides, [(n, c) for _k, (n, c), _ts in out])
    assert saw_tie > 2 * missed_tie                                         # ties went to the table


# -- table-table ----------------------------------------------------------------------------------------------


def table_table_app(how: str) -> sk.App:
    app = sk.App(f"tt-{how}", caching=False)

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        left, right = b.table("left", name="L"), b.table("right", name="R")
        getattr(left, how)(right, concat, name="j").to_stream().to("out")
    return app


@pytest.mark.parametrize("how, seed", [("join", 31), ("left_join", 32), ("outer_join", 33)])
def test_table_table_join_matches_driver(spark, tmp_path, how: str, seed: int) -> None:
    app = table_table_app(how)
    rng = random.Random(seed)
    events = timeline(rng, 300, [("left", 1), ("right", 1)], step=(0, 3), disorder=0.1)
    sides: Dict[str, Side] = {"left": [], "right": []}
    for i, topic, ts in sorted((i, topic, ts) for topic, items in events.items() for i, ts in items):
        key = f"k{rng.randint(0, 7)}"
        sides[topic].append((key, None if rng.random() < 0.2 else f"{topic[0].upper()}{i}", ts))   # tombstones
        if topic == "left" and rng.random() < 0.1:      # both sides of a key updated at one timestamp
            sides["right"].append((key, f"T{i}", ts))
    records = live_order(app, sides)
    replayed, driven = replay_and_drive(spark, tmp_path, app, records)
    assert replayed == driven
    values = [v for _k, v, _ts in replayed["out"]]
    assert len(values) > 50
    assert None in values                                                   # a result disappears
    assert any(v is not None and "None" not in v for v in values)           # both sides
    assert any(v is not None and v.endswith("+None") for v in values) == (how != "join")
    assert any(v is not None and v.startswith("None+") for v in values) == (how == "outer_join")


def test_table_self_join_matches_driver(spark, tmp_path) -> None:
    """A table joined with a filtered view of itself (issue 18 item 5): one result per
    update, retracted when the row is deleted or filtered out."""
    app = sk.App("tt-self", caching=False)

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        table = b.table("left", name="L")
        table.join(table.filter(lambda k, v: int(v[1:]) % 3 != 0), concat, name="j").to_stream().to("out")

    rng = random.Random(34)
    events = timeline(rng, 200, [("left", 1)], step=(0, 3), disorder=0.1)
    sides: Dict[str, Side] = {"left": [(f"k{rng.randint(0, 5)}", None if rng.random() < 0.2 else f"L{i}", ts)
                                       for i, ts in events["left"]]}
    replayed, driven = replay_and_drive(spark, tmp_path, app, live_order(app, sides))
    assert replayed == driven
    values = [v for _k, v, _ts in replayed["out"]]
    assert len(values) > 50 and None in values
    assert all(v is None or v.split("+")[0] == v.split("+")[1] for v in values)


# -- stream-global table ------------------------------------------------------------------------------------


def global_app(how: str) -> sk.App:
    app = sk.App(f"gt-{how}", caching=False)

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        products = b.global_table("products")
        orders = b.stream("orders")
        getattr(orders, how)(products, key_selector=lambda k, v: v["p"],
                             joiner=lambda v, p: {"n": v["n"], "product": p}, name="J").to("out")
    return app


@pytest.mark.parametrize("how", ["join", "left_join"])
def test_stream_global_table_join_matches_driver_and_worker(spark, tmp_path, how: str) -> None:
    """A live worker loads the global table whole before its tasks run: the driver gets
    the products first; the worker and the replay read them interleaved with the orders."""
    app = global_app(how)
    rng = random.Random(41)
    interleaved: List[Input] = []
    for i in range(300):
        ts = 1000 + i * 3
        if rng.random() < 0.3:
            name = None if rng.random() < 0.2 else f"P{i}"                       # tombstones
            interleaved.append(("products", f"p{rng.randint(0, 7)}", name, ts))
        else:
            interleaved.append(("orders", f"o{i}", {"n": i, "p": f"p{rng.randint(0, 9)}"}, ts - rng.randint(0, 30)))
    products = [r for r in interleaved if r[0] == "products"]
    orders = [r for r in interleaved if r[0] == "orders"]
    broker = str(tmp_path / "broker")
    write_inputs(app, broker, interleaved)
    replayed = replay_outputs(spark, app, broker, str(tmp_path / "out"))
    driven = driver_outputs(app, products + orders)
    driven.pop("products", None)  # the harness lists the global table's topic among the driver's outputs
    assert replayed == driven
    assert replayed == worker_outputs(app, broker)
    joined = [v["product"] for _k, v, _ts in replayed["out"]]
    assert len(joined) > 50 and len(set(joined)) > 3
    assert (None in joined) == (how == "left_join")


# -- foreign key ------------------------------------------------------------------------------------------------


def fk_app(how: str, app_id: Optional[str] = None) -> sk.App:
    app = sk.App(app_id or f"fk-{how}", caching=False)

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        orders, customers = b.table("orders", name="O"), b.table("customers", name="C")
        getattr(orders, how)(customers, lambda o, c: f"{o['item']}@{c}", foreign_key_extractor=lambda o: o["cust"],
                             name="J").to_stream().to("out")
    return app


def fk_sides(seed: int) -> Dict[str, Side]:
    """Orders (o0..o24) refer to customers c0..c6 (c6 never exists) or to none; orders
    change their foreign key and are deleted; customers are updated and deleted.
    Timestamps of the two topics never tie (orders even, customers odd): the replay
    and the driver would be free to order such a tie either way."""
    rng = random.Random(seed)
    events = timeline(rng, 300, [("orders", 3), ("customers", 2)], step=(1, 3), disorder=0.1, jitter=(1, 20))
    sides: Dict[str, Side] = {"orders": [], "customers": []}
    for i, ts in events["orders"]:
        cust = None if rng.random() < 0.1 else f"c{rng.randint(0, 6)}"
        value = None if rng.random() < 0.12 else {"item": f"i{i}", "cust": cust}
        sides["orders"].append((f"o{rng.randint(0, 24)}", value, 2 * ts))
    for i, ts in events["customers"]:
        sides["customers"].append((f"c{rng.randint(0, 5)}", None if rng.random() < 0.15 else f"N{i}", 2 * ts + 1))
    return sides


def final_results(records: Sequence[Tuple[Any, Any, int]]) -> Dict[Any, Any]:
    """The last value per key, deleted keys left out."""
    last = {k: v for k, v, _ts in records}
    return {k: v for k, v in last.items() if v is not None}


def expected_fk_results(how: str, records: Sequence[Input]) -> Dict[Any, Any]:
    """The join of the two tables' final contents, worked out directly."""
    tables: Dict[str, Dict[Any, Any]] = {"orders": {}, "customers": {}}
    for topic, key, value, _ts in records:
        if value is None:
            tables[topic].pop(key, None)
        else:
            tables[topic][key] = value
    out = {}
    for key, o in tables["orders"].items():
        customer = tables["customers"].get(o["cust"]) if o["cust"] is not None else None
        if customer is not None or how == "left_join":
            out[key] = f"{o['item']}@{customer}"
    return out


@pytest.mark.parametrize("how, seed", [("join", 51), ("left_join", 52)])
def test_foreign_key_join_matches_driver_and_final_results_match_worker(spark, tmp_path, how: str,
                                                                         seed: int) -> None:
    app = fk_app(how)
    records = live_order(app, fk_sides(seed))
    broker = str(tmp_path / "broker")
    write_inputs(app, broker, records)
    replayed = replay_outputs(spark, app, broker, str(tmp_path / "out"))
    driven = driver_outputs(app, records)
    assert replayed == driven
    out = replayed["out"]
    assert len(out) > 50
    assert any(v is None for _k, v, _ts in out)                             # results removed
    without_right = [v for _k, v, _ts in out if v is not None and v.endswith("@None")]
    assert bool(without_right) == (how == "left_join")                      # left rows without a right row
    expected = expected_fk_results(how, records)
    assert len(expected) > 5
    assert final_results(out) == expected
    worked = worker_outputs(app, broker)
    assert final_results(worked["out"]) == final_results(out)


# -- several partitions: against the real worker -------------------------------------------------------------


def test_stream_table_join_on_three_partitions_matches_worker_per_key(spark, tmp_path) -> None:
    app = stream_table_app("left_join", app_id="st-3p")
    sides = stream_table_sides(61, n=400)
    records = live_order(app, sides)   # the order across partitions does not matter: each topic keeps its own
    broker = str(tmp_path / "broker")
    write_inputs(app, broker, records, partitions={"orders": 3, "customers": 3})
    replayed = replay_outputs(spark, app, broker, str(tmp_path / "out"))
    worked = worker_outputs(app, broker)
    assert set(replayed) == set(worked) == {"out"}
    assert per_key(replayed["out"]) == per_key(worked["out"])
    values = [c for _k, (_o, c), _ts in replayed["out"]]
    assert len(values) == len(sides["orders"])
    assert None in values and len(set(values)) > 10
    # each key's records went to one partition: per key, the order is the live task's order
    assert len(per_key(replayed["out"])) >= 8


def test_foreign_key_join_on_three_partitions_final_results_match_worker(spark, tmp_path) -> None:
    """The subscription and response topics cross partitions: the final result per key
    is the join of the final tables, in the replay as on the worker."""
    app = fk_app("left_join", app_id="fk-3p")
    records = live_order(app, fk_sides(53))
    broker = str(tmp_path / "broker")
    write_inputs(app, broker, records, partitions={"orders": 3, "customers": 3})
    replayed = replay_outputs(spark, app, broker, str(tmp_path / "out"))
    expected = expected_fk_results("left_join", records)
    assert len(expected) > 5 and any(v.endswith("@None") for v in expected.values())
    assert final_results(replayed["out"]) == expected
    assert final_results(worker_outputs(app, broker)["out"]) == expected
