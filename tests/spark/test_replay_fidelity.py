"""What a Spark replay refuses, approximates, reads and writes.

- topologies that depend on the wall clock (wall-clock punctuations,
  ``close_idle_windows_after``) are refused, naming the node, unless approximation
  is allowed; then the replay runs and lists what it approximated;
- a record that fails processing under the default "fail" handler fails the replay
  with its topic, partition and offset in the error;
- inputs: JSON-lines files given as a topic's input, an app's own ``b.stream(Files)``
  source, a topic on the suite's Apache Kafka (Spark's Kafka source: tests/spark/test_kafka_replay.py
  has the rest);
- outputs: an embedded broker as the output, external sinks (written as Parquet,
  never called), final store contents.
"""
from __future__ import annotations

import json
import os
import random
from datetime import timedelta
from typing import Any, Dict, List, Tuple

import pyarrow.parquet as pq
import pytest

import streamkit as sk
from streamkit.runtime.task.external_sources import external_sources
from streamkit.serdes import String
from streamkit.spark import ReplayRefusedError, replay
from streamkit.testing import TopologyTestDriver
from streamkit.topology.nodes import ExternalSinkNode, WindowAggregationNode
from streamkit.broker.broker import EmbeddedBroker
from streamkit.core.partitioner import partition_for_key

from .harness import driver_outputs, per_key, read_replayed_topic, replay_outputs, worker_outputs, write_inputs

pytestmark = pytest.mark.spark

SEC = timedelta(seconds=1)


def random_records(seed: int, n: int = 200, topic: str = "in", keys: int = 8) -> List[Tuple[str, Any, Any, int]]:
    rng = random.Random(seed)
    return [(topic, f"u{rng.randrange(keys)}", {"n": i, "amount": rng.randint(1, 9)}, 1000 + i * 100)
            for i in range(n)]


def parquet_rows(path: str) -> List[Dict[str, Any]]:
    return pq.read_table(path).to_pylist()


# -- wall clock: refused, or approximated when allowed --------------------------------------------------


def test_wall_clock_punctuation_is_refused_naming_the_node_unless_approximation_is_allowed(spark, tmp_path):
    app = sk.App("wall-clock", caching=False)

    def init(ctx: sk.ProcessorContext) -> None:
        ctx.schedule(timedelta(seconds=1), sk.Punctuation.WALL_CLOCK, lambda ts: ctx.forward("tick", ts))

    @app.processor(init=init, name="ticker")
    def ticker(ctx: sk.ProcessorContext, key: Any, value: Any) -> None:
        ctx.forward(key, value["n"])

    app.topology(lambda b: b.stream("in").process(ticker).to("out"))
    node = next(name for name in app.build().nodes if name.endswith("ticker"))
    records = random_records(1, 50)
    broker = str(tmp_path / "broker")
    write_inputs(app, broker, records)

    with pytest.raises(ReplayRefusedError) as refused:
        replay(app, inputs={"in": broker}, output=str(tmp_path / "refused"), spark=spark)
    message = str(refused.value)
    assert f"node '{node}'" in message and "wall-clock" in message
    assert "allow_approximate" in message
    assert not os.path.exists(tmp_path / "refused" / "topics")             # refused before anything ran

    result = replay(app, inputs={"in": broker}, output=str(tmp_path / "out"), spark=spark, allow_approximate=True)
    assert len(result.approximations) == 1
    assert f"node '{node}'" in result.approximations[0] and "wall-clock" in result.approximations[0]
    with open(tmp_path / "out" / "_replay.json") as f:
        assert json.load(f)["approximations"] == result.approximations
    replayed = read_replayed_topic(app, str(tmp_path / "out"), "out")
    assert replayed == driver_outputs(app, records)["out"]                 # the punctuation never fired
    assert len(replayed) == len(records)


def windowed_count_app(app_id: str, *, on_operation: bool) -> sk.App:
    """A windowed count with close_idle_windows_after on the operation (grouped by key)
    or on the App (after a repartition)."""
    app = sk.App(app_id, caching=False, close_idle_windows_after=None if on_operation else 5 * SEC)

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        stream = b.stream("in")
        grouped = stream.group_by_key() if on_operation else stream.group_by(lambda k, v: k)
        (grouped.windowed_by(sk.TumblingWindows(10 * SEC, grace=2 * SEC))
                .count(name="agg", close_idle_windows_after=5 * SEC if on_operation else None)
                .to_stream().to("out"))
    return app


@pytest.mark.parametrize("on_operation", [True, False], ids=["on-operation", "on-app"])
def test_close_idle_windows_after_is_refused_naming_the_node_unless_approximation_is_allowed(
        spark, tmp_path, on_operation: bool):
    app = windowed_count_app(f"idle-{'op' if on_operation else 'app'}", on_operation=on_operation)
    node = next(name for name, n in app.build().nodes.items() if isinstance(n, WindowAggregationNode))
    rng = random.Random(2)
    records = [("in", f"u{rng.randrange(5)}", {"n": i}, 20_000 + i * 250 - rng.choice([0, 0, 0, 3000, 13000]))
               for i in range(200)]                                         # some late ones, too
    broker = str(tmp_path / "broker")
    write_inputs(app, broker, records)

    with pytest.raises(ReplayRefusedError) as refused:
        replay_outputs(spark, app, broker, str(tmp_path / "refused"))
    message = str(refused.value)
    assert f"node '{node}'" in message and "close_idle_windows_after=5000 ms" in message

    result = replay(app, inputs={"in": broker}, output=str(tmp_path / "out"), spark=spark, allow_approximate=True)
    assert len(result.approximations) == 1 and f"node '{node}'" in result.approximations[0]
    replayed = read_replayed_topic(app, str(tmp_path / "out"), "out")
    driven = driver_outputs(app, records)["out"]
    assert replayed == driven
    assert 50 < len(replayed) < len(records)                                # late records dropped


# -- a record that fails -------------------------------------------------------------------------------------


def test_a_failing_record_fails_the_replay_naming_its_topic_partition_and_offset(spark, tmp_path):
    app = sk.App("fails", caching=False)
    app.topology(lambda b: b.stream("in").map_values(lambda v: 100 // v["d"]).to("out"))
    rng = random.Random(3)
    records = [("in", f"k{rng.randrange(10)}", {"d": rng.randint(1, 5)}, 1000 + i) for i in range(120)]
    bad_at = 87
    records[bad_at] = ("in", "bad-key", {"d": 0}, 1000 + bad_at)
    def partition_of(key: str) -> int:
        return partition_for_key(String().serialize(key), 3)

    partition = partition_of("bad-key")
    offset = sum(1 for _t, key, _v, _ts in records[:bad_at] if partition_of(key) == partition)
    broker = str(tmp_path / "broker")
    write_inputs(app, broker, records, partitions={"in": 3})

    with pytest.raises(Exception) as failed:
        replay_outputs(spark, app, broker, str(tmp_path / "out"))
    text = str(failed.value)
    assert f"processing failed at topic 'in', partition {partition}, offset {offset}" in text, text[-3000:]
    assert "ZeroDivisionError" in text


# -- inputs: files -----------------------------------------------------------------------------------------------


def write_jsonl(directory: Any, rows: List[Dict[str, Any]], files: int = 3) -> str:
    """``rows`` split over ``files`` JSON-lines files whose names sort in row order."""
    os.makedirs(directory, exist_ok=True)
    size = -(-len(rows) // files)
    for index in range(files):
        with open(os.path.join(directory, f"part-{index:02d}.jsonl"), "w") as f:
            for row in rows[index * size:(index + 1) * size]:
                f.write(json.dumps(row) + "\n")
            f.write("\n")                                                   # blank lines do not count
    return os.path.join(str(directory), "*.jsonl")


def file_rows(seed: int, n: int = 200) -> List[Dict[str, Any]]:
    rng = random.Random(seed)
    return [{"user": f"u{rng.randrange(6)}", "amount": rng.randint(1, 9),
             "ts": 20_000 + i * 400 - rng.choice([0, 0, 0, 1500, 9000])} for i in range(n)]


def summing_build(source: Any):
    def build(b: sk.StreamsBuilder) -> None:
        (b.stream(source).group_by_key()
          .windowed_by(sk.TumblingWindows(5 * SEC, grace=SEC))
          .aggregate(lambda: 0, lambda key, value, total: total + value["amount"], name="sums")
          .to_stream().to("out"))
    return build


def test_files_given_as_a_topics_input_with_a_string_key_serde_match_the_driver(spark, tmp_path):
    app = sk.App("files-input", caching=False)
    app.topic("in", key_serde=sk.serdes.String(), value_serde=sk.serdes.Json())
    app.topology(summing_build("in"))
    rows = file_rows(4)
    pattern = write_jsonl(tmp_path / "files", rows)

    result = replay(app, inputs={"in": sk.sources.Files(pattern, key="user", timestamp="ts")},
                    output=str(tmp_path / "out"), spark=spark)
    assert result.input_records == len(rows)
    replayed = read_replayed_topic(app, str(tmp_path / "out"), "out")
    driven = driver_outputs(app, [("in", row["user"], row, row["ts"]) for row in rows])["out"]
    assert replayed == driven
    assert 50 < len(replayed) < len(rows)


def test_an_apps_own_files_source_matches_the_driver_and_the_worker(spark, tmp_path):
    rows = file_rows(5)
    pattern = write_jsonl(tmp_path / "files", rows)
    app = sk.App("files-source", caching=False, broker=f"embedded://{tmp_path / 'broker'}")
    app.topology(summing_build(sk.sources.Files(pattern, key="user", timestamp="ts")))
    anchor, = external_sources(app.build())                                  # <app-id>-source-files

    replayed = replay_outputs(spark, app, str(tmp_path / "broker"), str(tmp_path / "out"))
    driven = driver_outputs(app, [(anchor, row["user"], row, row["ts"]) for row in rows])
    assert replayed == driven
    assert replayed == worker_outputs(app, str(tmp_path / "broker"))
    assert 50 < len(replayed["out"]) < len(rows)


# -- outputs ------------------------------------------------------------------------------------------------------


def counting_app(app_id: str) -> sk.App:
    app = sk.App(app_id, caching=False)
    app.topology(lambda b: b.stream("in").group_by_key().count(name="counts").to_stream().to("out"))
    return app


def test_output_to_an_embedded_broker_equals_the_parquet_output(spark, tmp_path):
    app = counting_app("to-embedded")
    records = random_records(6, 300, keys=20)
    broker = str(tmp_path / "broker")
    write_inputs(app, broker, records, partitions={"in": 3})
    parquet_out = str(tmp_path / "parquet")
    replay(app, inputs={"in": broker}, output=parquet_out, spark=spark)
    target = str(tmp_path / "target")
    result = replay(app, inputs={"in": broker}, output="embedded:" + target, spark=spark)
    assert [(o.kind, o.name, o.records) for o in result.outputs if o.kind == "topic"] == [("topic", "out", 300)]

    expected: Dict[int, List[Tuple[int, int, bytes, bytes]]] = {}
    for row in parquet_rows(os.path.join(parquet_out, "topics", "out")):
        expected.setdefault(row["partition"], []).append(
            (row["offset"], row["timestamp"], row["key_bytes"], row["value_bytes"]))
    with EmbeddedBroker(target) as written:
        meta = written.topic("out")
        assert meta is not None and meta.partitions == 3
        got: Dict[int, List[Tuple[int, int, bytes, bytes]]] = {}
        for partition in range(meta.partitions):
            reader = written.reader("out", partition)
            while batch := reader.read(10_000):
                got.setdefault(partition, []).extend((o, ts, k, v) for o, ts, k, v, _h in batch)
            reader.close()
    assert got == {p: sorted(rows) for p, rows in expected.items()}
    assert len(got) == 3 and sum(map(len, got.values())) == 300
    assert os.path.isdir(os.path.join(target, "replay", "stores", "counts"))   # stores still go to Parquet


def test_external_sinks_are_written_as_parquet_and_never_called(spark, tmp_path):
    delivered = str(tmp_path / "delivered.jsonl")

    def deliver(record: Any) -> None:   # runs on the executors in a replay: evidence is a file
        with open(delivered, "a") as f:
            f.write(json.dumps([record.key, record.value, record.timestamp]) + "\n")

    app = sk.App("sinks", caching=False)
    app.topology(lambda b: (b.stream("in").filter(lambda k, v: v["amount"] > 3)
                            .map_values(lambda v: {"n": v["n"], "big": v["amount"] > 6})
                            .sink(sk.sinks.Callback(deliver), name="deliver")))
    node = next(name for name, n in app.build().nodes.items() if isinstance(n, ExternalSinkNode))
    records = random_records(7, 200)
    broker = str(tmp_path / "broker")
    write_inputs(app, broker, records)
    out = str(tmp_path / "out")
    result = replay(app, inputs={"in": broker}, output=out, spark=spark)
    assert not os.path.exists(delivered), "the replay called the sink's function"
    sinks = [o for o in result.outputs if o.kind == "sink"]
    assert [(o.name, o.path) for o in sinks] == [(node, os.path.join(out, "sinks", node))]

    rows = sorted(parquet_rows(os.path.join(out, "sinks", node)), key=lambda r: (r["partition"], r["sequence"]))
    replayed = [[json.loads(r["key"]), json.loads(r["value"]), r["timestamp"]] for r in rows]
    with TopologyTestDriver(app) as driver:                                 # the live runtime calls it
        for topic, key, value, ts in records:
            driver.input_topic(topic).pipe_input(key, value, timestamp=ts)
    with open(delivered) as f:
        called = [json.loads(line) for line in f]
    assert replayed == called
    assert sinks[0].records == len(called) and 50 < len(called) < len(records)


def test_final_store_contents_equal_the_drivers_store(spark, tmp_path):
    app = counting_app("stores")
    records = random_records(8, 300, keys=25)
    broker = str(tmp_path / "broker")
    write_inputs(app, broker, records, partitions={"in": 2})
    out = str(tmp_path / "out")
    result = replay(app, inputs={"in": broker}, output=out, spark=spark)
    assert ("store", "counts", os.path.join(out, "stores", "counts")) in [(o.kind, o.name, o.path)
                                                                          for o in result.outputs]
    rows = parquet_rows(os.path.join(out, "stores", "counts"))
    replayed = {json.loads(r["key"]): json.loads(r["value"]) for r in rows}
    assert len(replayed) == len(rows)                                       # each key in one partition
    with TopologyTestDriver(app) as driver:
        for topic, key, value, ts in records:
            driver.input_topic(topic).pipe_input(key, value, timestamp=ts)
        assert replayed == dict(driver.store("counts").all())
    assert len(replayed) == 25 and sum(replayed.values()) == 300
    for r in rows:                                                          # in the task of the key's partition
        assert r["partition"] == partition_for_key(String().serialize(json.loads(r["key"])), 2)


# -- inputs: Kafka ------------------------------------------------------------------------------------------------


def test_kafka_input_matches_the_driver(spark_kafka, kafka, unique_name, tmp_path):
    """A topic on the suite's Apache Kafka, read by the replay through Spark's Kafka source
    (scripts/ensure-spark-kafka's jars): the driver's answers, key by key."""
    from streamkit.spark import KafkaTopic

    from ..kafka.broker import run_sync
    from ..kafka.topics import create_test_topic, kafka_transport

    topic = unique_name("replay-in")
    app = sk.App("kafka-input", caching=False)
    app.topic(topic, key_serde=sk.serdes.String(), value_serde=sk.serdes.Json())
    app.topology(lambda b: b.stream(topic).group_by_key().count(name="counts").to_stream().to("out"))
    records = random_records(9, 200, topic=topic)
    spec = app.build().topics[topic]
    batches: Dict[int, list] = {}
    for _t, key, value, ts in records:
        kb = spec.key_serde.serialize(key)
        batches.setdefault(partition_for_key(kb, 2), []).append((kb, spec.value_serde.serialize(value), ts, None))
    with kafka_transport(kafka) as transport:
        create_test_topic(transport.admin, topic, 2)                   # old timestamps kept

        async def send() -> None:
            producer = transport.producer()
            try:
                await producer.send([(topic, p, recs) for p, recs in sorted(batches.items())])
                await producer.flush()
            finally:
                await producer.aclose()
        run_sync(send)
    out = str(tmp_path / "out")
    replay(app, inputs={topic: KafkaTopic(kafka.bootstrap, topic)}, output=out, spark=spark_kafka)
    replayed = read_replayed_topic(app, out, "out")
    driven = driver_outputs(app, records)["out"]
    assert per_key(replayed) == per_key(driven)                        # 2 partitions: Kafka orders per key
    assert len(replayed) == len(records)
