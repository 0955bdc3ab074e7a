"""The replay's Arrow stages: what crosses between Spark and the Python tasks, and how.

- record headers survive the Arrow encoding exactly (none, empty, a value-less header,
  non-ASCII names), a repartition record's writer stamp included, through a real
  replay into an embedded broker;
- task p lands in Spark partition p, and a stage whose tasks share one Spark
  partition gives the same outputs;
- a topic of several partitions of unequal sizes (one empty) is read whole, and the
  read records are counted exactly per stage and in total;
- each stage and each output write reports its wall time (result, ``_replay.json``);
- Kafka's rows become the replay's input rows in Spark (running maximum timestamp
  per partition in offset order, headers encoded), without a Kafka broker.
"""
from __future__ import annotations

import json
import os
import random
from datetime import datetime, timedelta, timezone
from typing import Any, Dict, List, Optional, Sequence, Tuple

import pyarrow.parquet as pq
import pytest

import streamkit as sk
from streamkit.broker.broker import EmbeddedBroker
from streamkit.core.records import Headers
from streamkit.runtime.ordering.repartition_stamps import with_writer_header
from streamkit.spark import replay
from streamkit.spark.arrow_rows import (EmittedRows, decode_headers, encode_headers, headers_from_arrow,
                                        headers_to_arrow)
from streamkit.spark.kafka_input import kafka_records
from streamkit.spark.outputs import write_outputs
from streamkit.spark.replay import plan_replay
from streamkit.spark.routing import TaskRouting, spark_hash_long
from streamkit.spark.stages import Stages
from streamkit.testing import TopologyTestDriver
from streamkit.core.partitioner import partition_for_key

from .harness import driver_outputs, per_key, read_replayed_topic, write_inputs

pytestmark = pytest.mark.spark

HEADER_CASES: Sequence[Headers] = (
    None, (), (("trace", b"t-1"),), (("a", None), ("ü-name", b""), ("a", b"\x00\xff")),
    (("__sk.w", b"not a stamp: a user's header of that name is kept"),))


# -- headers ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("headers", HEADER_CASES, ids=["none", "empty", "one", "several", "stamp-named"])
def test_header_encoding_round_trips(headers: Headers) -> None:
    assert decode_headers(encode_headers(headers)) == headers
    assert headers_from_arrow(headers_to_arrow([headers, None, headers])) == [headers, None, headers]


def test_a_writer_stamp_is_kept_apart_and_restored_exactly() -> None:
    rows = EmittedRows(stamped_topics={"t-repartition"})
    sent = [(b"k", b"v", 5, with_writer_header(h, 7 << 24 | 2, 100 + i)) for i, h in enumerate(HEADER_CASES)]
    sent.append((b"k", None, 3, (("plain", b"x"),)))
    rows.add_topic_records("t-repartition", 1, 9, 0, -1, sent)
    (batch,) = rows.take_batches()
    table = batch.to_pydict()
    assert table["writer"][:-1] == [7 << 24 | 2] * len(HEADER_CASES) and table["writer"][-1] is None
    assert table["writer_time"][:-1] == [100 + i for i in range(len(HEADER_CASES))]
    kept = headers_from_arrow(batch.column("headers"))
    restored = [h if w is None else with_writer_header(h, w, t)
                for h, w, t in zip(kept, table["writer"], table["writer_time"])]
    assert restored == [headers for _k, _v, _ts, headers in sent]
    assert table["pmax"] == [5] * len(sent) and table["sequence"] == list(range(len(sent)))


def test_a_header_named_like_the_stamp_is_left_alone_outside_repartition_topics() -> None:
    rows = EmittedRows(stamped_topics={"t-repartition"})
    headers = (("__sk.w", b"a user's"),)
    rows.add_topic_records("out", 0, 0, 0, -1, [(b"k", b"v", 1, headers)])
    (batch,) = rows.take_batches()
    assert batch.column("writer").to_pylist() == [None]
    assert headers_from_arrow(batch.column("headers")) == [headers]


def headers_app(app_id: str) -> sk.App:
    app = sk.App(app_id, caching=False)
    app.topic("in", key_serde=sk.serdes.String(), value_serde=sk.serdes.Json())
    app.topology(lambda b: (b.stream("in").select_key(lambda k, v: v["group"]).repartition(name="regroup")
                            .map_values(lambda v: {"n": v["n"], "seen": True}).to("out")))
    return app


def write_with_headers(app: sk.App, directory: str, partitions: int, n: int
                       ) -> List[Tuple[str, Any, Any, int, Headers]]:
    """``n`` records, their headers cycling through :data:`HEADER_CASES`, into topic ``in``."""
    spec = app.build().topics["in"]
    rng = random.Random(21)
    records = [(f"u{rng.randrange(9)}", {"group": f"g{rng.randrange(4)}", "n": i}, 1000 + 10 * i,
                HEADER_CASES[i % len(HEADER_CASES)]) for i in range(n)]
    with EmbeddedBroker(directory) as broker:
        broker.create_topic("in", partitions, exist_ok=True)
        for key, value, ts, headers in records:
            kb = spec.key_serde.serialize(key)
            vb = spec.value_serde.serialize(value)
            broker.append("in", partition_for_key(kb, partitions), [(kb, vb, ts, headers)])
    return [("in", key, value, ts, headers) for key, value, ts, headers in records]


def embedded_topic(directory: str, topic: str) -> Dict[int, List[Tuple[bytes, bytes, int, Headers]]]:
    with EmbeddedBroker(directory) as broker:
        meta = broker.topic(topic)
        assert meta is not None
        out: Dict[int, List[Tuple[bytes, bytes, int, Headers]]] = {}
        for partition in range(meta.partitions):
            reader = broker.reader(topic, partition)
            while batch := reader.read(10_000):
                out.setdefault(partition, []).extend((k, v, ts, h) for _o, ts, k, v, h in batch)
            reader.close()
    return out


def test_headers_pass_a_repartition_exactly_as_in_the_driver(spark, tmp_path):
    app = headers_app("headers-one")
    broker, target = str(tmp_path / "broker"), str(tmp_path / "target")
    records = write_with_headers(app, broker, 1, 150)
    replay(app, inputs={"in": broker}, output="embedded:" + target, spark=spark)
    (written,) = embedded_topic(target, "out").values()

    spec = app.build().topics["out"]
    with TopologyTestDriver(app) as driver:
        for topic, key, value, ts, headers in records:
            driver.input_topic(topic).pipe_input(key, value, timestamp=ts, headers=headers)
        expected = [(spec.key_serde.serialize(r.key), spec.value_serde.serialize(r.value), r.timestamp, r.headers)
                    for r in driver.output_topic("out").read_records()]
    assert written == expected
    assert {h for *_rest, h in written} == {h or None for h in HEADER_CASES}  # () leaves a repartition as None


def test_headers_on_three_partitions_match_the_driver_per_key(spark, tmp_path):
    app = headers_app("headers-three")
    broker, target = str(tmp_path / "broker"), str(tmp_path / "target")
    records = write_with_headers(app, broker, 3, 240)
    replay(app, inputs={"in": broker}, output="embedded:" + target, spark=spark)
    spec = app.build().topics["out"]
    replayed = [(spec.key_serde.deserialize(k), (spec.value_serde.deserialize(v), h), ts)
                for rows in embedded_topic(target, "out").values() for k, v, ts, h in rows]
    with TopologyTestDriver(app) as driver:
        for topic, key, value, ts, headers in records:
            driver.input_topic(topic).pipe_input(key, value, timestamp=ts, headers=headers)
        driven = [(r.key, (r.value, r.headers), r.timestamp) for r in driver.output_topic("out").read_records()]
    assert per_key(replayed) == per_key(driven)
    assert len(replayed) == 240


# -- tasks and Spark partitions ----------------------------------------------------------------------


@pytest.mark.parametrize("tasks", [1, 2, 3, 5, 8])
def test_task_p_lands_in_spark_partition_p(spark, tasks: int) -> None:
    from pyspark.sql import functions as F

    frame = spark.range(0, 40 * tasks).select((F.col("id") % tasks).cast("int").alias("task"))
    placed = (TaskRouting(spark).by_task(frame, "task", tasks)
              .select("task", F.spark_partition_id().alias("where")).distinct().collect())
    assert sorted((r["task"], r["where"]) for r in placed) == [(p, p) for p in range(tasks)]


def test_routes_use_sparks_own_hash(spark) -> None:
    """The driver computes the routing values with Spark's hash of a bigint (no Spark job):
    it agrees with Spark's ``hash()`` on small, negative and large values."""
    from pyspark.sql import functions as F

    values = list(range(-300, 300)) + [2**31 - 1, 2**31, -2**31, 2**32 + 7, 2**62 + 12345, -2**63, 2**63 - 1]
    frame = spark.createDataFrame([(v,) for v in values], "v bigint")
    got = {row["v"]: row["h"] for row in frame.select("v", F.hash("v").alias("h")).collect()}
    assert {v: spark_hash_long(v) for v in values} == got


class OneSparkPartition(TaskRouting):
    """Every task's rows in one Spark partition: its Spark task runs them all."""

    def by_task(self, frame: Any, column: str, partitions: int) -> Any:
        return frame.repartition(1)


def windowed_app(app_id: str) -> sk.App:
    app = sk.App(app_id, caching=False)
    app.topic("in", key_serde=sk.serdes.String(), value_serde=sk.serdes.Json())
    app.topology(lambda b: (b.stream("in").group_by(lambda k, v: v["group"], key_serde=sk.serdes.String())
                            .windowed_by(sk.TumblingWindows(timedelta(seconds=5), grace=timedelta(seconds=1)))
                            .count(name="counts").suppress(sk.Suppressed.until_window_closes(), name="finals")
                            .to_stream().to("out")))
    return app


def grouped_records(seed: int, n: int) -> List[Tuple[str, Any, Any, int]]:
    rng = random.Random(seed)
    out, t = [], 10_000
    for i in range(n):
        t += rng.randint(0, 300)
        ts = t - (rng.randint(0, 4000) if rng.random() < 0.2 else 0)
        out.append(("in", f"u{rng.randrange(12)}", {"group": f"g{rng.randrange(7)}", "i": i}, ts))
    return out


def test_tasks_sharing_a_spark_partition_give_the_same_outputs(spark, tmp_path):
    app = windowed_app("shared-partition")
    records = grouped_records(5, 400)
    broker = str(tmp_path / "broker")
    write_inputs(app, broker, records, partitions={"in": 3})
    own, shared = str(tmp_path / "own"), str(tmp_path / "shared")
    result = replay(app, inputs={"in": broker}, output=own, spark=spark)
    assert [s.how for s in result.stages] == ["offset order", "sorted"]

    plan = plan_replay(app, {"in": broker}, spark)
    run = Stages(spark, plan.job, plan.sources, bulk=False, routing=OneSparkPartition(spark)).run_all()
    try:
        write_outputs(plan.job, run, shared)
    finally:
        run.release(spark)
    for name in ("topics/out", "stores/counts"):
        assert (sorted(pq.read_table(os.path.join(shared, name)).to_pylist(), key=repr)
                == sorted(pq.read_table(os.path.join(own, name)).to_pylist(), key=repr)), name
    assert len(read_replayed_topic(app, own, "out")) > 20


# -- unequal partitions and counting ------------------------------------------------------------------


def keys_by_partition(partitions: int) -> Dict[int, List[str]]:
    found: Dict[int, List[str]] = {p: [] for p in range(partitions)}
    for i in range(200):
        key = f"k{i}"
        found[partition_for_key(sk.serdes.String().serialize(key), partitions)].append(key)
    return found


def unequal_records(topic: str, sizes: Sequence[int], seed: int, start: int = 5_000
                    ) -> List[Tuple[str, Any, Any, int]]:
    """``sizes[p]`` records whose keys fall in partition p (of ``len(sizes)``), interleaved in
    time: 50 ms apart from ``start``."""
    rng = random.Random(seed)
    by_partition = keys_by_partition(len(sizes))
    pool = [p for p, size in enumerate(sizes) for _ in range(size)]
    rng.shuffle(pool)
    return [(topic, rng.choice(by_partition[p][:4]), {"amount": rng.randint(1, 9), "i": i}, start + 50 * i)
            for i, p in enumerate(pool)]


def test_a_topic_of_unequal_partitions_is_read_whole_and_counted_exactly(spark, tmp_path):
    app = sk.App("unequal", caching=False)
    app.topic("in", key_serde=sk.serdes.String(), value_serde=sk.serdes.Json())
    app.topology(lambda b: (b.stream("in")
                            .group_by(lambda k, v: f"r{v['amount'] % 3}", key_serde=sk.serdes.String())
                            .count(name="per-remainder").to_stream().to("out")))
    records = unequal_records("in", (260, 0, 45), seed=8)
    broker = str(tmp_path / "broker")
    write_inputs(app, broker, records, partitions={"in": 3})
    out = str(tmp_path / "out")
    result = replay(app, inputs={"in": broker}, output=out, spark=spark)

    assert result.input_records == 305
    assert [(s.how, s.input_records) for s in result.stages] == [("offset order", 305), ("sorted", 0)]
    assert result.stages[0].sent == 305 and result.stages[1].sent == 305
    assert per_key(read_replayed_topic(app, out, "out")) == per_key(driver_outputs(app, records)["out"])


def test_a_join_of_two_replayed_topics_counts_both(spark, tmp_path):
    app = sk.App("unequal-join", caching=False)
    for topic in ("left", "right"):
        app.topic(topic, key_serde=sk.serdes.String(), value_serde=sk.serdes.Json())
    app.topology(lambda b: (b.stream("left").join(b.table("right"), lambda l, r: {"l": l["i"], "r": r["i"]})
                            .to("out")))
    records = sorted(unequal_records("left", (90, 10, 0), seed=2)
                     + unequal_records("right", (5, 30, 12), seed=3, start=5_025), key=lambda r: r[3])
    broker = str(tmp_path / "broker")
    write_inputs(app, broker, records, partitions={"left": 3, "right": 3})
    out = str(tmp_path / "out")
    result = replay(app, inputs={"left": broker, "right": broker}, output=out, spark=spark)
    assert result.input_records == 147
    assert [(s.how, s.input_records, sorted(s.reads)) for s in result.stages] == [
        ("sorted", 147, ["left", "right"])]
    assert per_key(read_replayed_topic(app, out, "out")) == per_key(driver_outputs(app, records).get("out", []))


# -- per-stage times -------------------------------------------------------------------------------


def test_each_stage_and_output_reports_its_wall_time(spark, tmp_path):
    app = windowed_app("stage-times")
    records = grouped_records(9, 300)
    broker = str(tmp_path / "broker")
    write_inputs(app, broker, records, partitions={"in": 2})
    out = str(tmp_path / "out")
    result = replay(app, inputs={"in": broker}, output=out, spark=spark)

    assert [(s.name, s.how, s.input_records, s.sent) for s in result.stages] == [
        ("sub-topology 0", "offset order", 300, 300),
        ("sub-topology 1", "sorted", 0, len(read_replayed_topic(app, out, "out")))]
    assert all(s.seconds > 0 for s in result.stages) and all(o.seconds > 0 for o in result.outputs)
    assert list(result.stage_seconds()) == ["stage sub-topology 0 (offset order)", "stage sub-topology 1 (sorted)",
                                            "write topic out", "write store counts"]
    assert sum(result.stage_seconds().values()) <= result.seconds
    with open(os.path.join(out, "_replay.json")) as f:
        written = json.load(f)
    assert [(s["name"], s["how"], s["input_records"]) for s in written["stages"]] == [
        ("sub-topology 0", "offset order", 300), ("sub-topology 1", "sorted", 0)]
    assert [(o["kind"], o["name"]) for o in written["outputs"]] == [("topic", "out"), ("store", "counts")]
    assert all(o["seconds"] > 0 for o in written["outputs"])
    assert "stage sub-topology 1 (sorted, reads " in result.summary()


# -- Kafka's rows, in Spark ------------------------------------------------------------------------


def test_kafka_rows_become_input_rows_in_spark(spark):
    from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, LongType, StringType, StructField,
                                   StructType, TimestampType)

    schema = StructType([StructField("key", BinaryType()), StructField("value", BinaryType()),
                         StructField("topic", StringType()), StructField("partition", IntegerType()),
                         StructField("offset", LongType()), StructField("timestamp", TimestampType()),
                         StructField("timestampType", IntegerType()),
                         StructField("headers", ArrayType(StructType([StructField("key", StringType()),
                                                                      StructField("value", BinaryType())])))])
    rng = random.Random(4)
    given: List[Tuple[int, int, int, Optional[List[Tuple[str, Optional[bytes]]]]]] = []
    for partition, size in ((0, 30), (1, 0), (2, 17)):
        for offset in range(size):
            headers = rng.choice([None, [], [("trace", b"x")], [("a", None), ("ü", b""), ("b", b"\x00\x01")]])
            given.append((partition, offset, 1_000_000 + rng.randint(0, 5000), headers))
    rng.shuffle(given)
    rows = [(f"k{o}".encode(), None if o % 5 == 0 else b"v", "t", p, o,
             datetime.fromtimestamp(ts / 1000, tz=timezone.utc), 0, h) for p, o, ts, h in given]
    frame = spark.createDataFrame(rows, schema).repartition(3)

    got = sorted(kafka_records(frame).collect(), key=lambda r: (r["partition"], r["offset"]))
    expected = sorted(given)
    assert [(r["partition"], r["offset"], r["timestamp"]) for r in got] == [(p, o, ts) for p, o, ts, _h in expected]
    pmax: Dict[int, int] = {}
    for r, (p, _o, ts, h) in zip(got, expected):
        pmax[p] = max(pmax.get(p, -1), ts)
        assert r["pmax"] == pmax[p]
        assert decode_headers(None if r["headers"] is None else bytes(r["headers"])) == (tuple(h) if h else None)
        assert (r["value"] is None) == (r["offset"] % 5 == 0)
