"""Parity of the Spark replay with the live runtime's tasks (the TopologyTestDriver), per
operator family: the same input through both must give exactly the same output
topics, record for record (key, value, timestamp, in order).

Inputs are generated with a fixed seed: a few hundred records over several keys,
with out-of-order and (for windows) late timestamps. One partition per topic (the
driver's), so the whole output order is defined, not only each key's; the tests with
three input partitions compare each key's records with the driver, or the two replay
modes with each other record for record.

Aggregations, windows and suppression run with ``bulk`` on and off: a bulk plan
must give the task runner's results.
"""
from __future__ import annotations

import random
from datetime import timedelta
from typing import Any, Dict, List, Sequence, Tuple

import pytest

import streamkit as sk

from .harness import Outputs, driver_outputs, per_key, replay_outputs, write_inputs

SEC = timedelta(seconds=1)
MS = timedelta(milliseconds=1)
KEYS = ("ann", "bob", "cid", "dee", "eve")
BULK = pytest.mark.parametrize("bulk", [True, False], ids=["bulk", "task-runner"])

InputRecord = Tuple[str, Any, Any, int]


def assert_parity(spark: Any, tmp_path: Any, app: sk.App, records: Sequence[InputRecord],
                  **replay_options: Any) -> Outputs:
    """Replay ``records`` and pipe them through the driver; both outputs must be equal.
    Returns the (common) outputs."""
    broker, out = str(tmp_path / "broker"), str(tmp_path / "replay-out")
    write_inputs(app, broker, records)
    replayed = replay_outputs(spark, app, broker, out, **replay_options)
    expected = driver_outputs(app, records)
    assert set(replayed) == set(expected), "different output topics"
    for topic in expected:
        assert replayed[topic] == expected[topic], f"topic {topic!r} differs"
    return expected


def events(seed: int, n: int, *, topic: str = "in", keys: Sequence[str] = KEYS, step_ms: int = 400,
           disorder: float = 0.25, disorder_ms: int = 1500, late: float = 0.0, late_ms: Tuple[int, int] = (0, 0),
           start: int = 1_000_000) -> List[InputRecord]:
    """``n`` records with values ``{"n": 0..99, "i": index}``: time advances 0..``step_ms``
    per record; a ``disorder`` share is up to ``disorder_ms`` older than the stream, a
    ``late`` share ``late_ms`` older."""
    rng = random.Random(seed)
    t = start
    out = []
    for i in range(n):
        t += rng.randint(0, step_ms)
        r = rng.random()
        if r < late:
            ts = t - rng.randint(*late_ms)
        elif r < late + disorder:
            ts = t - rng.randint(0, disorder_ms)
        else:
            ts = t
        out.append((topic, rng.choice(keys), {"n": rng.randint(0, 99), "i": i}, max(ts, 0)))
    return out


def out_of_order(records: Sequence[InputRecord]) -> int:
    """How many records have a timestamp below an earlier one."""
    high, n = -1, 0
    for _t, _k, _v, ts in records:
        if ts < high:
            n += 1
        high = max(high, ts)
    return n


# -- 1. stateless ---------------------------------------------------------------------

def test_stateless_operators_match(spark, tmp_path) -> None:
    app = sk.App("parity-stateless", caching=False)
    app.topic("in", key_serde=sk.serdes.String(), value_serde=sk.serdes.Json())

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        s = b.stream("in")
        (s.filter(lambda k, v: v["n"] % 3 != 0)
          .peek(lambda k, v: None)
          .map_values(lambda v: {"doubled": v["n"] * 2, "i": v["i"]})
          .to("doubled"))
        (s.filter_not(lambda k, v: v["n"] % 2 == 0)
          .map(lambda k, v: (f"{k}-{v['n'] % 4}", v["n"]))
          .to("mapped"))
        s.flat_map(lambda k, v: [(f"{k}{j}", j * v["n"]) for j in range(v["n"] % 3)]).to("flat")
        (s.flat_map_values(lambda v: [v["n"]] * (v["n"] % 4))
          .select_key(lambda k, v: f"mod{v % 5}")
          .to("flat-values"))
        branches = (s.split(name="route")
                    .branch(lambda k, v: v["n"] < 30, name="low")
                    .branch(lambda k, v: v["n"] < 70, name="mid")
                    .default_branch(name="high"))
        branches["low"].to("low")
        branches["mid"].map_values(lambda v: v["n"]).to("mid")
        branches["high"].to("high")

    records = events(11, 300)
    assert out_of_order(records) > 30
    outputs = assert_parity(spark, tmp_path, app, records)
    assert set(outputs) == {"doubled", "mapped", "flat", "flat-values", "low", "mid", "high"}
    assert len(outputs["low"]) + len(outputs["mid"]) + len(outputs["high"]) == len(records)
    assert 0 < len(outputs["doubled"]) < len(records)
    # out-of-order timestamps are kept as they are
    assert out_of_order([("doubled", k, v, ts) for k, v, ts in outputs["doubled"]]) > 0


def test_merge_of_two_topics_and_several_sinks_match(spark, tmp_path) -> None:
    app = sk.App("parity-merge", caching=False)
    app.topic("left", key_serde=sk.serdes.String(), value_serde=sk.serdes.Json())
    app.topic("right", key_serde=sk.serdes.String(), value_serde=sk.serdes.Json())

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        left = b.stream("left").map_values(lambda v: {**v, "side": "L"})
        right = b.stream("right").filter(lambda k, v: v["n"] > 10).map_values(lambda v: {**v, "side": "R"})
        merged = left.merge(right)
        merged.to("all")
        merged.filter(lambda k, v: v["n"] % 2 == 0).to("even")
        merged.filter(lambda k, v: v["n"] % 2 == 1).select_key(lambda k, v: v["side"] + k).to("odd")

    # one task reads both topics: the live runtime takes the earliest timestamp first,
    # the driver takes pipe order, so pipe in strictly increasing time across topics
    rng = random.Random(12)
    records: List[InputRecord] = []
    t = 5_000
    for i in range(300):
        t += rng.randint(1, 300)
        records.append((rng.choice(("left", "right")), rng.choice(KEYS), {"n": rng.randint(0, 99), "i": i}, t))
    outputs = assert_parity(spark, tmp_path, app, records)
    assert {v["side"] for _k, v, _ts in outputs["all"]} == {"L", "R"}
    assert len(outputs["even"]) + len(outputs["odd"]) == len(outputs["all"]) < len(records)


# -- 2. aggregations and tables ------------------------------------------------------------

@BULK
def test_stream_aggregations_match(spark, tmp_path, bulk) -> None:
    app = sk.App("parity-agg", caching=False)
    app.topic("in", key_serde=sk.serdes.String(), value_serde=sk.serdes.Json())

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        s = b.stream("in")
        by_key = s.group_by_key()
        by_key.count(name="count").to_stream().to("counts")
        by_key.reduce(lambda agg, v: {"n": agg["n"] + v["n"], "i": max(agg["i"], v["i"])},
                      name="sum").to_stream().to("sums")
        # key-changing, then group_by_key: through a repartition topic
        (s.map(lambda k, v: (f"bucket{v['n'] % 3}", v["n"]))
          .group_by_key()
          .aggregate(lambda: {"count": 0, "max": -1},
                     lambda k, v, agg: {"count": agg["count"] + 1, "max": max(agg["max"], v)}, name="buckets")
          .to_stream().to("buckets"))
        # group_by: repartition; then table ops on the aggregate
        (s.group_by(lambda k, v: "big" if v["n"] >= 50 else "small")
          .aggregate(lambda: [], lambda k, v, agg: (agg + [v["i"]])[-5:], name="recent")
          .filter(lambda k, agg: len(agg) % 2 == 1)
          .map_values(lambda agg: sum(agg))
          .to_stream().to("recent-odd"))

    records = events(21, 300)
    outputs = assert_parity(spark, tmp_path, app, records, bulk=bulk)
    assert len(outputs["counts"]) == len(outputs["sums"]) == len(outputs["buckets"]) == len(records)
    final_counts: Dict[str, int] = {}
    for k, v, _ts in outputs["counts"]:
        final_counts[k] = v
    assert sum(final_counts.values()) == len(records)
    assert any(v is None for _k, v, _ts in outputs["recent-odd"])  # the filter deletes rows


def _user_updates(seed: int, n: int) -> List[InputRecord]:
    rng = random.Random(seed)
    users = [f"u{i}" for i in range(12)]
    out = []
    t = 0
    for _ in range(n):
        t += rng.randint(0, 500)
        ts = t - rng.randint(0, 2000) if rng.random() < 0.2 else t
        user = rng.choice(users)
        if rng.random() < 0.12:
            value = None  # a delete
        else:
            value = {"region": rng.choice(("eu", "us", "apac")), "age": rng.randint(10, 60)}
        out.append(("users", user, value, max(ts, 0)))
    return out


@BULK
def test_table_source_ops_and_regrouping_match(spark, tmp_path, bulk) -> None:
    app = sk.App("parity-tables", caching=False)
    app.topic("users", key_serde=sk.serdes.String(), value_serde=sk.serdes.Json())

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        users = b.table("users", "users-store")
        adults = users.filter(lambda k, v: v["age"] >= 18)
        adults.map_values(lambda v: v["age"]).to_stream().to("adult-ages")
        users.filter_not(lambda k, v: v["region"] == "eu").to_stream().to("non-eu")
        grouped = users.group_by(lambda k, v: (v["region"], v["age"]))
        (grouped.aggregate(lambda: {"n": 0, "total": 0},
                           lambda k, age, agg: {"n": agg["n"] + 1, "total": agg["total"] + age},
                           lambda k, age, agg: {"n": agg["n"] - 1, "total": agg["total"] - age},
                           name="region-ages")
         .to_stream().to("region-ages"))
        grouped.count(name="region-count").to_stream().to("region-counts")
        (users.group_by(lambda k, v: ("old" if v["age"] >= 40 else "young", v["age"]))
         .reduce(lambda agg, v: agg + v, lambda agg, v: agg - v, name="age-sum")
         .to_stream().to("age-sums"))

    records = _user_updates(22, 250)
    outputs = assert_parity(spark, tmp_path, app, records, bulk=bulk)
    assert any(v is None for _k, v, _ts in outputs["adult-ages"])
    # the final per-region counts equal the users' final regions
    final_users: Dict[str, Any] = {}
    for _t, k, v, _ts in records:
        final_users[k] = v
    expected_counts: Dict[str, int] = {}
    for v in final_users.values():
        if v is not None:
            expected_counts[v["region"]] = expected_counts.get(v["region"], 0) + 1
    got_counts: Dict[str, int] = {}
    for k, v, _ts in outputs["region-counts"]:
        got_counts[k] = v
    assert {k: v for k, v in got_counts.items() if v} == expected_counts


# -- 3. windows -----------------------------------------------------------------------

def _windowed_input(seed: int, n: int = 300, step_ms: int = 400) -> List[InputRecord]:
    return events(seed, n, step_ms=step_ms, disorder=0.25, disorder_ms=1500, late=0.08, late_ms=(4000, 15000))


@BULK
def test_tumbling_and_hopping_windows_with_late_records_match(spark, tmp_path, bulk) -> None:
    app = sk.App("parity-time-windows", caching=False)
    app.topic("in", key_serde=sk.serdes.String(), value_serde=sk.serdes.Json())

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        s = b.stream("in")
        grouped = s.group_by_key()
        (grouped.windowed_by(sk.TumblingWindows(5 * SEC, grace=1 * SEC))
         .count(name="tumbling", late_records_topic="late-tumbling")
         .to_stream().to("tumbling-counts"))
        (grouped.windowed_by(sk.HoppingWindows(6 * SEC, 2 * SEC, grace=2 * SEC))
         .aggregate(lambda: {"n": 0, "sum": 0},
                    lambda k, v, agg: {"n": agg["n"] + 1, "sum": agg["sum"] + v["n"]},
                    name="hopping", late_records_topic="late-hopping")
         .to_stream().to("hopping-sums"))
        (s.select_key(lambda k, v: "all")
         .group_by_key()
         .windowed_by(sk.TumblingWindows(3 * SEC, grace=500 * MS))
         .reduce(lambda agg, v: {"n": agg["n"] + v["n"], "i": v["i"]}, name="all-reduce")
         .to_stream().to("all-sums"))

    records = _windowed_input(31)
    outputs = assert_parity(spark, tmp_path, app, records, bulk=bulk)
    late = outputs["late-tumbling"]
    assert late and len(late) < len(records) // 4
    # a tumbling window count emits one update per record on time; the late ones went to the late topic
    assert len(outputs["tumbling-counts"]) + len(late) == len(records)
    assert outputs["late-hopping"]
    assert len(outputs["all-sums"]) < len(records)  # some records are late for this window too
    assert all(isinstance(k, sk.Windowed) for k, _v, _ts in outputs["hopping-sums"])


@BULK
def test_sliding_and_session_windows_with_late_records_match(spark, tmp_path, bulk) -> None:
    app = sk.App("parity-data-windows", caching=False)
    app.topic("in", key_serde=sk.serdes.String(), value_serde=sk.serdes.Json())

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        grouped = b.stream("in").group_by_key()
        sliding = grouped.windowed_by(sk.SlidingWindows(2 * SEC, grace=1 * SEC))
        sliding.count(name="sliding-count", late_records_topic="late-sliding").to_stream().to("sliding-counts")
        (sliding.aggregate(lambda: [], lambda k, v, agg: sorted(agg + [v["i"]]), name="sliding-agg")
         .to_stream().to("sliding-members"))
        sessions = grouped.windowed_by(sk.SessionWindows(1500 * MS, grace=1 * SEC))
        sessions.count(name="session-count", late_records_topic="late-sessions").to_stream().to("session-counts")
        (sessions.aggregate(lambda: {"n": 0, "ids": []},
                            lambda k, v, agg: {"n": agg["n"] + 1, "ids": sorted(agg["ids"] + [v["i"]])},
                            lambda k, a, b2: {"n": a["n"] + b2["n"], "ids": sorted(a["ids"] + b2["ids"])},
                            name="session-agg")
         .to_stream().to("session-aggs"))
        (sessions.reduce(lambda agg, v: {"n": agg["n"] + v["n"], "i": max(agg["i"], v["i"])}, name="session-sum")
         .to_stream().to("session-sums"))

    records = events(33, 300, step_ms=700, disorder=0.3, disorder_ms=2500, late=0.06, late_ms=(5000, 15000))
    outputs = assert_parity(spark, tmp_path, app, records, bulk=bulk)
    assert outputs["late-sliding"] and outputs["late-sessions"]
    assert len(outputs["sliding-counts"]) > len(records) - len(outputs["late-sliding"])  # several updates a record
    assert len(outputs["sliding-members"]) == len(outputs["sliding-counts"])
    retractions = [k for k, v, _ts in outputs["session-counts"] if v is None]
    assert retractions, "expected some sessions to be merged (a None for the merged-away session)"
    assert len(outputs["session-aggs"]) == len(outputs["session-counts"]) == len(outputs["session-sums"])


def _bulk_shaped_app(app_id: str, *, small: bool = False) -> sk.App:
    """Windowed counts in the shape bulk plans compile (repartition topic -> tumbling or
    hopping count [-> suppress until the window closes] -> stateless nodes -> sinks), next
    to null keys (skipped) and null values (counted); and a bulk sub-topology's
    output read by another sub-topology."""
    app = sk.App(app_id, caching=False)
    app.topic("in", key_serde=sk.serdes.String(), value_serde=sk.serdes.Json())

    def group(k: str, v: Any) -> Any:
        if v is None:
            return k
        if v["n"] == 13:
            return None          # a null key: dropped by the aggregation, but moves stream time
        if v["n"] == 14:
            return ""            # an empty key is a key
        return f"g{v['n'] % 3}"

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        s = b.stream("in").map_values(lambda v: None if v["n"] % 11 == 0 else v)  # null values: counted
        by_group = s.group_by(group)
        if not small:
            tumbling = (by_group.windowed_by(sk.TumblingWindows(5 * SEC, grace=1 * SEC))
                        .count(name="g-tumbling", late_records_topic="g-late"))
            tumbling.to_stream().to("g-tumbling")
            # what a (bulk) windowed count sends, read by a task-runner sub-topology
            (tumbling.to_stream()
             .select_key(lambda w, c: w.key)
             .group_by_key()
             .reduce(lambda a, c: max(a, c), name="g-max")
             .to_stream().to("g-max"))
        (by_group.windowed_by(sk.HoppingWindows(5 * SEC, 2 * SEC, grace=2 * SEC)).count(name="g-hopping")
         .to_stream()
         .map(lambda w, c: (f"{w.key}@{w.start}", {"count": c, "end": w.end}))
         .filter(lambda k, v: v["count"] > 1)
         .to("g-hopping"))
        # several windows close at one record: they leave in (close time, key bytes) order
        (by_group.windowed_by(sk.HoppingWindows(6 * SEC, 2 * SEC, grace=500 * MS))
         .count(name="g-hop-final", late_records_topic="g-hop-late")
         .suppress(sk.Suppressed.until_window_closes(), name="g-hop-final-suppress")
         .to_stream()
         .flat_map_values(lambda c: [c, -c])
         .to("g-hop-final"))
    return app


def _bulk_shaped_input(seed: int) -> List[InputRecord]:
    # from time 0: hopping windows that would start before 0 do not exist
    return events(seed, 300, step_ms=300, disorder=0.25, disorder_ms=1500, late=0.08, late_ms=(3500, 12000),
                  start=0)


@BULK
def test_windowed_counts_after_a_repartition_match(spark, tmp_path, bulk) -> None:
    app = _bulk_shaped_app("parity-bulk-shape")
    records = _bulk_shaped_input(34)
    outputs = assert_parity(spark, tmp_path, app, records, bulk=bulk)
    tumbling = outputs["g-tumbling"]
    # only a null key is skipped; a null value is counted (Kafka Streams 4.1)
    null_keys = sum(1 for _t, _k, v, _ts in records if v["n"] == 13)
    assert 0 < len(tumbling) < len(records) - null_keys
    assert len(tumbling) + len(outputs["g-late"]) == len(records) - null_keys  # late ones went to the late topic
    assert any(k.key == "" for k, _v, _ts in tumbling)
    assert any(k.start == 0 for k, _v, _ts in tumbling)
    assert outputs["g-hopping"] and outputs["g-max"] and outputs["g-hop-late"]
    finals = outputs["g-hop-final"]
    assert finals and len({k for k, _v, _ts in finals}) == len(finals) // 2


def test_bulk_and_task_runner_agree_on_several_partitions(spark, tmp_path) -> None:
    """Three input partitions (three tasks per sub-topology, whose outputs are merged
    into the repartition topic): the driver has one partition, but both replay modes
    must give the same records in the same order."""
    app = _bulk_shaped_app("parity-bulk-partitions", small=True)
    records = _bulk_shaped_input(35)
    broker = str(tmp_path / "broker")
    write_inputs(app, broker, records, partitions={"in": 3})
    with_bulk = replay_outputs(spark, app, broker, str(tmp_path / "bulk"), bulk=True)
    without = replay_outputs(spark, app, broker, str(tmp_path / "task-runner"), bulk=False)
    assert set(with_bulk) == set(without) == {"g-hopping", "g-hop-final", "g-hop-late"}
    for topic in without:
        assert with_bulk[topic] == without[topic], f"topic {topic!r} differs"
    assert len(without["g-hop-final"]) > 10


def test_several_partitions_match_the_driver_per_key(spark, tmp_path) -> None:
    """Three input partitions merged into each repartitioned key: with increasing
    timestamps the live merge (by timestamp) is the driver's pipe order, so each key's
    results must be the driver's."""
    app = _bulk_shaped_app("parity-partitions-per-key", small=True)
    records = [(t, k, v, 1_000 + 40 * i) for i, (t, k, v, _ts) in enumerate(_bulk_shaped_input(36))]
    broker = str(tmp_path / "broker")
    write_inputs(app, broker, records, partitions={"in": 3})
    replayed = replay_outputs(spark, app, broker, str(tmp_path / "replay-out"))
    expected = driver_outputs(app, records)
    assert set(replayed) == set(expected) == {"g-hopping", "g-hop-final"}
    for topic in expected:
        assert per_key(replayed[topic]) == per_key(expected[topic]), f"topic {topic!r} differs"


# -- 4. suppression -------------------------------------------------------------------

@BULK
def test_suppression_matches(spark, tmp_path, bulk) -> None:
    app = sk.App("parity-suppress", caching=False)
    app.topic("in", key_serde=sk.serdes.String(), value_serde=sk.serdes.Json())

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        grouped = b.stream("in").group_by_key()
        (grouped.windowed_by(sk.TumblingWindows(5 * SEC, grace=1 * SEC))
         .count(name="tumbling")
         .suppress(sk.Suppressed.until_window_closes(), name="tumbling-final")
         .to_stream().to("tumbling-final"))
        (grouped.windowed_by(sk.SessionWindows(1500 * MS, grace=1 * SEC))
         .aggregate(lambda: 0, lambda k, v, agg: agg + v["n"], lambda k, a, b2: a + b2, name="session")
         .suppress(sk.Suppressed.until_window_closes(), name="session-final")
         .to_stream().to("session-final"))
        (grouped.count(name="count")
         .suppress(sk.Suppressed.until_time_limit(3 * SEC), name="count-limited")
         .to_stream().to("count-limited"))
        (grouped.windowed_by(sk.TumblingWindows(10 * SEC, grace=2 * SEC))
         .count(name="windowed")
         .suppress(sk.Suppressed.until_time_limit(2 * SEC, max_records=3), name="windowed-limited")
         .to_stream().to("windowed-limited"))

    records = events(41, 300, step_ms=600, disorder=0.25, disorder_ms=1500, late=0.06, late_ms=(4000, 12000))
    outputs = assert_parity(spark, tmp_path, app, records, bulk=bulk)
    finals = outputs["tumbling-final"]
    keys = [k for k, _v, _ts in finals]
    assert finals and len(keys) == len(set(keys)), "one final result per window"
    assert sum(v for _k, v, _ts in finals) < len(records)  # late records are not counted
    # a session merged into a newer one after it closed is retracted (None) after its final result
    assert any(v is not None for _k, v, _ts in outputs["session-final"])
    assert 0 < len(outputs["count-limited"]) < len(records) // 2
    assert 0 < len(outputs["windowed-limited"]) < len(records) // 2


# -- 5. Processor API ------------------------------------------------------------------

def test_processor_with_store_and_stream_time_punctuation_matches(spark, tmp_path) -> None:
    app = sk.App("parity-processor", caching=False)
    app.topic("in", key_serde=sk.serdes.String(), value_serde=sk.serdes.Json())

    def init(ctx: sk.ProcessorContext) -> None:
        def flush(ts: int) -> None:
            store = ctx.store("totals")
            for key, total in list(store.all()):
                ctx.forward(f"flush-{key}", {"total": total, "at": ts})
                if total > 500:
                    store.delete(key)
        ctx.schedule(2 * SEC, sk.Punctuation.STREAM_TIME, flush)

    @app.processor(stores=[sk.stores.key_value("totals")], init=init)
    def running_total(ctx: sk.ProcessorContext, key: Any, value: Any) -> None:
        totals = ctx.store("totals")
        total = (totals.get(key) or 0) + value["n"]
        totals.put(key, total)
        if value["n"] % 5 == 0:
            ctx.forward(key, {"total": total, "offset": ctx.offset, "stream_time": ctx.stream_time})

    @app.processor(stores=[sk.stores.key_value("counts")])
    def running_count(ctx: sk.ProcessorContext, key: Any, value: Any) -> None:
        counts = ctx.store("counts")
        count = (counts.get(key) or 0) + 1
        counts.put(key, count)
        ctx.forward(key, {"count": count, "ts": ctx.timestamp, "offset": ctx.offset})

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        s = b.stream("in")
        s.process(running_total, name="running").to("totals")
        # after a repartition: the processor's task reads an internal topic
        (s.select_key(lambda k, v: f"g{v['n'] % 3}").repartition(name="regroup")
         .process(running_count, name="counting").to("counts"))

    records = events(51, 300)
    outputs = assert_parity(spark, tmp_path, app, records)
    flushes = [k for k, _v, _ts in outputs["totals"] if k.startswith("flush-")]
    assert len(flushes) > 20
    assert len(outputs["totals"]) > len(flushes)
    assert len(outputs["counts"]) == len(records)


# -- 6. error handling ------------------------------------------------------------------

def test_dead_letter_queue_matches(spark, tmp_path) -> None:
    app = sk.App("parity-dlq", caching=False, processing_error_handler="dead_letter")
    app.topic("in", key_serde=sk.serdes.String(), value_serde=sk.serdes.Json())

    def fragile(v: Any) -> Any:
        if v["n"] % 7 == 0:
            raise ValueError(f"cannot take {v['n']}")
        return {**v, "inverse": round(1 / (v["n"] % 7), 6)}

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        mapped = b.stream("in").map_values(fragile)
        mapped.to("mapped")
        mapped.group_by_key().count(name="count").to_stream().to("counts")

    records = events(61, 300)
    outputs = assert_parity(spark, tmp_path, app, records)
    dlq = outputs["parity-dlq-dlq"]
    failing = [(k, v) for _t, k, v, _ts in records if v["n"] % 7 == 0]
    assert len(dlq) == len(failing) > 0
    # the dead letters are the input records as they were read
    assert [(k.decode(), sk.serdes.Json().deserialize(v)) for k, v, _ts in dlq] == failing
    assert len(outputs["mapped"]) == len(outputs["counts"]) == len(records) - len(failing)



def test_dead_letters_and_a_sink_topic_from_two_sub_topologies_match(spark, tmp_path) -> None:
    """The dead-letter topic and ``out`` are each written by two sub-topologies (before and
    after a repartition). Across sub-topologies only each key's order is defined (the
    live order of two tasks' records in one partition depends on when each ran), and the
    keys differ on the two sides here, so the comparison is per key (with increasing
    timestamps, as the driver's depth-first order is not a live order otherwise)."""
    app = sk.App("parity-dlq2", caching=False, processing_error_handler="dead_letter")
    app.topic("in", key_serde=sk.serdes.String(), value_serde=sk.serdes.Json())

    def first(v: Any) -> Any:
        if v["n"] % 7 == 0:
            raise ValueError("first stage")
        return {**v, "stage": 1}

    def second(v: Any) -> Any:
        if v["n"] % 5 == 0:
            raise ValueError("second stage")
        return {**v, "stage": 2}

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        s = b.stream("in").map_values(first)
        s.to("out")
        s.select_key(lambda k, v: f"{k}/{v['n'] % 2}").repartition(name="re").map_values(second).to("out")

    records = [(t, k, v, 10_000 + 25 * i) for i, (t, k, v, _ts) in enumerate(events(62, 250))]
    broker = str(tmp_path / "broker")
    write_inputs(app, broker, records)
    replayed = replay_outputs(spark, app, broker, str(tmp_path / "replay-out"))
    expected = driver_outputs(app, records)
    assert set(replayed) == set(expected) == {"out", "parity-dlq2-dlq"}
    for topic in expected:
        assert per_key(replayed[topic]) == per_key(expected[topic]), f"topic {topic!r} differs"
    dead = [sk.serdes.Json().deserialize(v) for _k, v, _ts in expected["parity-dlq2-dlq"]]
    assert {v.get("stage") for v in dead} == {None, 1}  # from the input, and from the repartition topic
    assert {v["stage"] for _k, v, _ts in expected["out"]} == {1, 2}


def test_a_key_written_before_and_after_a_repartition_keeps_its_order(spark, tmp_path) -> None:
    app = sk.App("parity-causal", caching=False)
    app.topic("in", key_serde=sk.serdes.String(), value_serde=sk.serdes.Json())

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        s = b.stream("in")
        s.to("out")
        (s.repartition(name="re").filter(lambda k, v: k == "b")
         .map_values(lambda v: {**v, "stage": 2}).to("out"))

    records = [("in", "a", {"n": 1}, 1000), ("in", "b", {"n": 2}, 900)]
    broker = str(tmp_path / "broker")
    write_inputs(app, broker, records)
    replayed = replay_outputs(spark, app, broker, str(tmp_path / "replay-out"))["out"]
    # live: the repartitioned b is read only once the first task's output (its b included) is written
    expected = driver_outputs(app, records)["out"]
    assert expected == [("a", {"n": 1}, 1000), ("b", {"n": 2}, 900), ("b", {"n": 2, "stage": 2}, 900)]
    assert per_key(replayed) == per_key(expected)


@pytest.mark.parametrize("bulk", [
    pytest.param(True, id="bulk"),
    pytest.param(False, id="task-runner"),
])
def test_dead_letters_after_a_windowed_count_match(spark, tmp_path, bulk) -> None:
    app = sk.App("parity-dlq-windowed", caching=False, processing_error_handler="dead_letter")
    app.topic("in", key_serde=sk.serdes.String(), value_serde=sk.serdes.Json())

    def fragile(count: int) -> int:
        if count == 3:
            raise ValueError("three")
        return count * 10

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        (b.stream("in").group_by(lambda k, v: k)
         .windowed_by(sk.TumblingWindows(5 * SEC, grace=1 * SEC)).count(name="count")
         .to_stream().map_values(fragile).to("out"))

    records = events(7, 100)
    outputs = assert_parity(spark, tmp_path, app, records, bulk=bulk)
    assert outputs["parity-dlq-windowed-dlq"] and outputs["out"]
    values = {v for _k, v, _ts in outputs["out"]}
    assert 30 not in values and {10, 20, 40} <= values
