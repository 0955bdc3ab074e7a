"""The Spark replay reads and writes Schema Registry topics (Avro, JSON Schema, Protobuf)
with the worker's answers, byte for byte.

Each format has a small app: orders filtered and mapped to a second topic, then
counted per key (the Avro app also sums per 10 s window). The same records go through
the real embedded worker, a replay on ``local[2]`` and the TopologyTestDriver:

- worker and replay share the app's broker, so ``registry="embedded"`` is the same
  registry (the ``_schemas`` topic of that broker, reached from Spark's executors):
  every output record's key and value bytes must be equal, partition by partition;
- the driver keeps an in-memory registry of its own (other ids), so its outputs are
  compared decoded, key by key.

Bad input (a record whose schema id no registry gave) goes through the app's
deserialization error handler in the replay as in the worker: dead-lettered raw with
``dead_letter``; with ``fail`` the replay fails naming the topic, partition, offset
and the unknown id. An app on an HTTP registry (``streamkit``'s REST server, served
from the test process) shows the serdes reach it from the executors by URL and ask it
for a schema id once per Python worker process, not per record.

Also: a JSON-lines file as the input (values encoded with the registry serde in the
executors) gives the same bytes; an Avro topic on the suite's Apache Kafka, read with
Spark's Kafka source, gives the driver's answers; bound serdes pickle without caches or
clients; in-memory registries and client objects that cannot pickle are refused before
Spark runs.
"""
from __future__ import annotations

import asyncio
import json
import os
import random
import threading
from datetime import timedelta
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import pyarrow.parquet as pq
import pytest

import streamkit as sk
from streamkit.broker.broker import EmbeddedBroker
from streamkit.errors import ConfigError, RecordError
from streamkit.schemas.protobuf_text import message_class
from streamkit.serdes import Avro, Bytes, JsonSchema, Protobuf
from streamkit.spark import replay
from streamkit.spark.replay import bound_topology
from streamkit.testing import TopologyTestDriver
from streamkit.topology.serde_binding import bind_serdes
from streamkit.core.partitioner import partition_for_key

pytestmark = pytest.mark.spark

PARTITIONS = 2
RawRecord = Tuple[Optional[bytes], Optional[bytes], int]
"""(key bytes, value bytes, timestamp) of one output record."""

AVRO_ORDER = {"type": "record", "name": "Order", "namespace": "shop",
              "fields": [{"name": "id", "type": "string"}, {"name": "amount", "type": "int"}]}
AVRO_BIG = {"type": "record", "name": "Big", "namespace": "shop",
            "fields": [{"name": "id", "type": "string"}, {"name": "amount2", "type": "int"}]}
AVRO_SUMS = {"type": "record", "name": "Sums", "namespace": "shop",
             "fields": [{"name": "n", "type": "long"}, {"name": "total", "type": "long"}]}
JSON_ORDER = {"type": "object", "properties": {"id": {"type": "string"}, "amount": {"type": "integer"}},
              "required": ["id", "amount"]}
JSON_BIG = {"type": "object", "properties": {"id": {"type": "string"}, "amount2": {"type": "integer"}},
            "required": ["id", "amount2"], "additionalProperties": False}
PROTO = """syntax = "proto3";
package shop;
message Order { string id = 1; int32 amount = 2; }
message Big { string id = 1; int32 amount2 = 2; }
message Count { int64 n = 1; }
"""
# Module-level classes: the executors unpickle the Protobuf serdes by importing this module.
Order = message_class(PROTO, "shop.Order")
Big = message_class(PROTO, "shop.Big")
Count = message_class(PROTO, "shop.Count")


# -- the apps -----------------------------------------------------------------------------------------------------


def _amount(value: Any) -> int:
    return value.amount if isinstance(value, Order) else value["amount"]


def orders_app(fmt: str, app_id: str, broker: str, *, registry: Any = "embedded",
               handler: str = "log_and_skip", source: str = "orders") -> sk.App:
    """``source`` (``orders``; key: user, value: an order in ``fmt``) → amounts over 2, doubled, to ``big``
    → their count per user to ``counts``; the Avro app also sums amounts per 10 s window
    to ``sums`` and has Avro keys."""
    app = sk.App(app_id, broker=broker, caching=False, deserialization_error_handler=handler,
                 state_dir=os.path.join(broker[len("embedded://"):], "state"))
    windowed = fmt == "avro"
    if fmt == "avro":
        users = Avro('"string"', registry=registry)
        app.topic(source, key_serde=users, value_serde=Avro(AVRO_ORDER, registry=registry))
        app.topic("big", key_serde=users, value_serde=Avro(AVRO_BIG, registry=registry))
        app.topic("counts", key_serde=users, value_serde=Avro('"long"', registry=registry))
        big, count = (lambda v: {"id": v["id"], "amount2": 2 * v["amount"]}), (lambda n: n)
    elif fmt == "json":
        app.topic(source, value_serde=JsonSchema(JSON_ORDER, registry=registry))
        app.topic("big", value_serde=JsonSchema(JSON_BIG, registry=registry))
        app.topic("counts", value_serde=JsonSchema({"type": "integer"}, registry=registry))
        big, count = (lambda v: {"id": v["id"], "amount2": 2 * v["amount"]}), (lambda n: n)
    else:
        app.topic(source, value_serde=Protobuf(Order, registry=registry))
        app.topic("big", value_serde=Protobuf(Big, registry=registry))
        app.topic("counts", value_serde=Protobuf(Count, registry=registry))
        big, count = (lambda v: Big(id=v.id, amount2=2 * v.amount)), (lambda n: Count(n=n))

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        orders = b.stream(source)
        doubled = orders.filter(lambda k, v: _amount(v) > 2).map_values(big)
        doubled.to("big")
        doubled.group_by_key().count(name="per-user").to_stream().map_values(count).to("counts")
        if windowed:
            (orders.group_by_key().windowed_by(sk.TumblingWindows(timedelta(seconds=10), grace=timedelta(seconds=2)))
             .aggregate(lambda: {"n": 0, "total": 0},
                        lambda k, v, agg: {"n": agg["n"] + 1, "total": agg["total"] + v["amount"]},
                        name="sums-10s", value_serde=Avro(AVRO_SUMS, registry=registry))
             .to_stream().to("sums", value_serde=Avro(AVRO_SUMS, registry=registry)))
    return app


def order_records(fmt: str, n: int = 120, seed: int = 23) -> List[Tuple[str, Any, int]]:
    """``(user, order, timestamp)``: orders of 6 users, some out of order (late ones too)."""
    rng = random.Random(seed)
    records = []
    for i in range(n):
        user, amount = f"u{rng.randrange(6)}", rng.randint(1, 9)
        ts = 1_000 + i * 400 - (3_000 if i % 17 == 5 else 0)
        value: Any = Order(id=f"o{i}", amount=amount) if fmt == "protobuf" else {"id": f"o{i}", "amount": amount}
        records.append((user, value, ts))
    return records


# -- running it three ways ----------------------------------------------------------------------------------------


def write_orders(app: sk.App, records: Sequence[Tuple[str, Any, int]],
                 bad: Sequence[Tuple[int, bytes]] = ()) -> None:
    """Append the records to ``orders`` of the app's broker, encoded with the app's serdes
    bound as the worker binds them, each in Kafka's default partition for its key bytes;
    ``bad``: raw values appended (key ``u0``) after the record at each index."""
    url = app.resolve_broker()
    spec = bind_serdes(app.build(), url).topics["orders"]
    bad_after = dict(bad)
    with EmbeddedBroker(url[len("embedded://"):]) as broker:
        broker.create_topic("orders", PARTITIONS, exist_ok=True)
        for i, (user, value, ts) in enumerate(records):
            key = spec.key_serde.serialize(user)
            broker.append("orders", partition_for_key(key, PARTITIONS), [(key, spec.value_serde.serialize(value), ts,
                                                                          None)])
            if i in bad_after:
                key = spec.key_serde.serialize("u0")
                broker.append("orders", partition_for_key(key, PARTITIONS), [(key, bad_after[i], ts, None)])


def worker_raw(app: sk.App, topics: Sequence[str]) -> Dict[str, Dict[int, List[RawRecord]]]:
    """Run the embedded worker until idle; each topic's records per partition, in offset order."""
    app.run(until_idle=1.0)
    url = app.resolve_broker()
    out: Dict[str, Dict[int, List[RawRecord]]] = {}
    with EmbeddedBroker(url[len("embedded://"):]) as broker:
        for topic in topics:
            meta = broker.topic(topic)
            out[topic] = {}
            for p in range(meta.partitions if meta is not None else 0):
                reader = broker.reader(topic, p)
                got = []
                while batch := reader.read(10_000):
                    got.extend((k, v, ts) for _o, ts, k, v, _h in batch)
                reader.close()
                if got:
                    out[topic][p] = got
    return out


def replay_raw(spark: Any, app: sk.App, output: str, topics: Sequence[str],
               inputs: Optional[Dict[str, Any]] = None) -> Dict[str, Dict[int, List[RawRecord]]]:
    """Replay the app (input: its own broker unless ``inputs`` says otherwise); each topic's
    Parquet rows per partition, in offset order."""
    result = replay(app, inputs=inputs, output=output, spark=spark, output_stores=False)
    written = {o.name for o in result.outputs if o.kind == "topic"}
    out: Dict[str, Dict[int, List[RawRecord]]] = {}
    for topic in topics:
        out[topic] = {}
        if topic not in written:
            continue
        rows = sorted(pq.read_table(result.output_path(topic)).to_pylist(), key=lambda r: (r["partition"], r["offset"]))
        for r in rows:
            out[topic].setdefault(r["partition"], []).append((r["key_bytes"], r["value_bytes"], r["timestamp"]))
    return out


def driver_decoded(app: sk.App, records: Sequence[Tuple[str, Any, int]], topics: Sequence[str]) -> Dict[str, Any]:
    """Each topic's (key, value, timestamp) per key, through the TopologyTestDriver."""
    with TopologyTestDriver(app) as driver:
        orders = driver.input_topic("orders")
        for user, value, ts in records:
            orders.pipe_input(user, value, timestamp=ts)
        return {t: per_key([(r.key, r.value, r.timestamp) for r in driver.output_topic(t).read_records()])
                for t in topics}


def decoded(app: sk.App, raw: Dict[str, Dict[int, List[RawRecord]]]) -> Dict[str, Any]:
    """The raw records decoded with the serdes the replay binds, per key."""
    topics = bound_topology(app).topics
    out = {}
    for topic, partitions in raw.items():
        spec = topics[topic]
        out[topic] = per_key([(spec.key_serde.deserialize(k), spec.value_serde.deserialize(v), ts)
                              for p in sorted(partitions) for k, v, ts in partitions[p]])
    return out


def per_key(records: Sequence[Tuple[Any, Any, int]]) -> Dict[str, List[Tuple[Any, int]]]:
    """Each key's values in order (what Kafka orders across partitions); keys by repr
    (windowed keys), Protobuf messages as their text format (readable in a failure's diff)."""
    out: Dict[str, List[Tuple[Any, int]]] = {}
    for key, value, ts in records:
        shown = str(value) if isinstance(value, (Order, Big, Count)) else value
        out.setdefault(repr(key), []).append((shown, ts))
    return out


# -- the tests ----------------------------------------------------------------------------------------------------

FORMATS = {"avro": ["big", "counts", "sums"], "json": ["big", "counts"], "protobuf": ["big", "counts"]}


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_replay_writes_the_workers_bytes_and_the_drivers_values(spark: Any, tmp_path: Any, fmt: str) -> None:
    topics = FORMATS[fmt]
    records = order_records(fmt)
    unknown_id = b"\x00" + (987_654).to_bytes(4, "big") + b"\x02\x04\x06"
    app = orders_app(fmt, f"{fmt}-orders", f"embedded://{tmp_path / 'broker'}", handler="dead_letter")
    write_orders(app, records, bad=[(7, unknown_id)])

    live = worker_raw(app, topics + [f"{app.id}-dlq"])
    replayed = replay_raw(spark, app, str(tmp_path / "out"), topics + [f"{app.id}-dlq"])

    for topic in topics:
        assert sum(map(len, live[topic].values())) > 10, topic
        assert replayed[topic] == live[topic], topic                 # every byte, partition by partition
        assert all(v[0] == 0 for recs in live[topic].values() for _k, v, _ts in recs)  # Confluent's magic byte
    # the record with an unknown schema id is dead-lettered raw, as the worker does
    bad_partition = partition_for_key(bound_topology(app).topics["orders"].key_serde.serialize("u0"), PARTITIONS)
    dlq = [(p, v) for p, recs in replayed[f"{app.id}-dlq"].items() for _k, v, _ts in recs]
    assert dlq == [(bad_partition, unknown_id)]
    assert replayed[f"{app.id}-dlq"] == live[f"{app.id}-dlq"]

    outputs = {topic: replayed[topic] for topic in topics}
    assert decoded(app, outputs) == driver_decoded(app, records, topics)  # the same answers, other ids
    # the Parquet's text column: each value as JSON (a Protobuf message as its fields)
    rows = sorted(pq.read_table(str(tmp_path / "out" / "topics" / "big")).to_pylist(),
                  key=lambda r: (r["partition"], r["offset"]))
    value_serde = bound_topology(app).topics["big"].value_serde
    for row in rows:
        value = value_serde.deserialize(row["value_bytes"])
        fields = {"id": value.id, "amount2": value.amount2} if fmt == "protobuf" else value
        assert json.loads(row["value"]) == fields

    if fmt == "json":  # the same orders as a JSON-lines file (one partition): same answers, same bytes
        from_files = replay_from_file(spark, app, records, tmp_path)
        assert decoded(app, from_files) == decoded(app, outputs)
        for topic in topics:
            assert sorted(r for recs in from_files[topic].values() for r in recs) == \
                sorted(r for recs in live[topic].values() for r in recs), topic


def replay_from_file(spark: Any, app: sk.App, records: Sequence[Tuple[str, Any, int]],
                     tmp_path: Any) -> Dict[str, Dict[int, List[RawRecord]]]:
    """Replay ``app`` with ``orders`` read from a JSON-lines file (``sk.sources.Files``, key
    and timestamp from fields) instead of the broker: the executors encode each JSON value
    with the topic's bound serde (subject ``orders-value`` of the app's registry: the
    same id) before the topology decodes it."""
    lines = tmp_path / "orders.jsonl"
    with open(lines, "w") as f:
        for user, value, ts in sorted(records, key=lambda r: r[0]):  # each user's orders in order
            f.write(json.dumps(dict(value, user=user, ts=ts)) + "\n")
    return replay_raw(spark, app, str(tmp_path / "from-files"), FORMATS["json"],
                      inputs={"orders": sk.sources.Files(str(lines), key="user", timestamp="ts")})


def test_unknown_schema_id_fails_the_replay_as_it_fails_the_worker(spark: Any, tmp_path: Any) -> None:
    app = orders_app("protobuf", "proto-fail", f"embedded://{tmp_path / 'broker'}", handler="fail")
    write_orders(app, order_records("protobuf", 10), bad=[(3, b"\x00" + (4242).to_bytes(4, "big") + b"\x00")])
    with pytest.raises(Exception) as failed:
        replay(app, output=str(tmp_path / "out"), spark=spark, output_stores=False)
    message = str(failed.value)
    assert "deserialization failed at topic 'orders', partition" in message
    assert "unknown schema id 4242" in message and "subject 'orders-value'" in message
    with pytest.raises(RecordError) as live:  # the worker's own task code fails the same way
        app.run(until_idle=1.0)
    expected = str(live.value).split(":")[0]  # "deserialization failed at topic 'orders', partition P, offset O"
    assert expected in message


@pytest.fixture
def http_registry() -> Iterator[Tuple[str, Dict[str, int]]]:
    """``streamkit``'s registry REST app on an in-memory registry, served from this process
    on a thread; yields its URL and a count of requests per (method, path)."""
    from aiohttp import web

    from streamkit.schemas.registry.server import registry_app
    from streamkit.schemas.registry.service import SchemaRegistry

    counts: Dict[str, int] = {}

    @web.middleware
    async def count(request: web.Request, handler: Any) -> Any:
        counts[f"{request.method} {request.path}"] = counts.get(f"{request.method} {request.path}", 0) + 1
        return await handler(request)

    registry = SchemaRegistry.in_memory()
    loop = asyncio.new_event_loop()
    started = threading.Event()
    holder: Dict[str, Any] = {}

    async def start() -> None:
        app = registry_app(registry)
        app.middlewares.insert(0, count)
        runner = holder["runner"] = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        holder["url"] = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
        started.set()

    thread = threading.Thread(target=lambda: (loop.run_until_complete(start()), loop.run_forever()), daemon=True)
    thread.start()
    assert started.wait(10), "the registry server did not start"
    try:
        yield holder["url"], counts
    finally:
        asyncio.run_coroutine_threadsafe(holder["runner"].cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        registry.close()


def test_an_http_registry_is_reached_by_url_once_per_schema_not_per_record(spark: Any, tmp_path: Any,
                                                                           http_registry: Any) -> None:
    url, requests = http_registry
    records = order_records("avro", 200)
    app = orders_app("avro", "avro-http", f"embedded://{tmp_path / 'broker'}", registry=url)
    write_orders(app, records)
    order_id = bound_topology(app).topics["orders"].value_serde.client().lookup(
        "orders-value", bound_topology(app).topics["orders"].value_serde.registration_schema()).schema_id
    before = dict(requests)
    replayed = replay_raw(spark, app, str(tmp_path / "out"), FORMATS["avro"])
    asked = {path: n - before.get(path, 0) for path, n in requests.items() if n > before.get(path, 0)}
    # 200 orders decoded in the executors: the writer schema is fetched once per Python worker
    # process (local[2] runs a few), never per record or per task
    fetches = asked.get(f"GET /schemas/ids/{order_id}", 0)
    assert 1 <= fetches <= 4, asked
    assert sum(asked.values()) < 60, asked
    # the outputs are those of the driver on the same registry: equal bytes
    with TopologyTestDriver(app) as driver:
        for user, value, ts in records:
            driver.input_topic("orders").pipe_input(user, value, timestamp=ts)
        for topic in FORMATS["avro"]:
            raw = driver.output_topic(topic, key_serde=Bytes(), value_serde=Bytes()).read_records()
            assert sorted((r.key, r.value, r.timestamp) for r in raw) == \
                sorted(r for recs in replayed[topic].values() for r in recs), topic


def test_kafka_input_of_an_avro_topic(spark_kafka: Any, kafka: Any, unique_name: Any, tmp_path: Any) -> None:
    """An Avro topic on the suite's Apache Kafka, written with the ids of the app's registry
    (the embedded one on the app's broker directory): the replay reads it with Spark's Kafka
    source, the executors decode it with that registry, and the answers are the driver's.
    (The registry stays on the embedded broker: the session's Kafka outlives the test, and
    the process's shared registry client would keep a registry there polled.)"""
    from streamkit.spark import KafkaTopic

    from ..kafka.broker import run_sync
    from ..kafka.topics import create_test_topic, kafka_transport

    topic = unique_name("avro-orders")
    app = orders_app("avro", "avro-kafka", f"embedded://{tmp_path / 'broker'}", source=topic)
    records = order_records("avro", 60)
    spec = bind_serdes(app.build(), app.resolve_broker()).topics[topic]
    batches: Dict[int, list] = {}
    for user, value, ts in records:
        key = spec.key_serde.serialize(user)
        batches.setdefault(partition_for_key(key, PARTITIONS), []).append(
            (key, spec.value_serde.serialize(value), ts, None))
    with kafka_transport(kafka) as transport:
        create_test_topic(transport.admin, topic, PARTITIONS)

        async def send() -> None:
            producer = transport.producer()
            try:
                await producer.send([(topic, p, recs) for p, recs in sorted(batches.items())])
                await producer.flush()
            finally:
                await producer.aclose()
        run_sync(send)
    replayed = replay_raw(spark_kafka, app, str(tmp_path / "out"), FORMATS["avro"],
                          inputs={topic: KafkaTopic(kafka.bootstrap, topic)})
    with TopologyTestDriver(app) as driver:
        for user, value, ts in records:
            driver.input_topic(topic).pipe_input(user, value, timestamp=ts)
        expected = {t: per_key([(r.key, r.value, r.timestamp) for r in driver.output_topic(t).read_records()])
                    for t in FORMATS["avro"]}
    assert decoded(app, replayed) == expected


def test_bound_serdes_travel_without_caches_and_reconnect_on_first_use(tmp_path: Any) -> None:
    """What the executors get: each registry serde of the bound topology pickles without
    its client, writer or readers, and the copy finds the same registry (the app's
    broker) and the same ids on first use."""
    import pickle

    for fmt in FORMATS:
        app = orders_app(fmt, f"{fmt}-pickle", f"embedded://{tmp_path / fmt}")
        serde = bound_topology(app).topics["orders"].value_serde
        data = serde.serialize(order_records(fmt, 1)[0][1])
        assert serde.deserialize(data) is not None and serde._client is not None and serde._readers
        copy = pickle.loads(pickle.dumps(serde))
        assert (copy._client, copy._writer, copy._readers) == (None, None, {})
        assert (copy.subject(), copy.broker) == ("orders-value", f"embedded://{tmp_path / fmt}")
        assert copy.deserialize(data) == serde.deserialize(data) and copy.serialize(copy.deserialize(data)) == data


def test_an_in_memory_registry_is_refused_before_spark_runs(spark: Any, tmp_path: Any) -> None:
    app = orders_app("json", "json-memory", f"embedded://{tmp_path / 'broker'}", registry="memory://mine")
    with pytest.raises(ConfigError) as refused:
        replay(app, inputs={"orders": str(tmp_path / "broker")}, output=str(tmp_path / "out"), spark=spark)
    assert "in-memory registry (memory://mine)" in str(refused.value) and "topic 'orders'" in str(refused.value)

    from streamkit.schemas.registry.service import SchemaRegistry

    with SchemaRegistry.in_memory() as registry:  # a client object that cannot travel (it holds a lock)
        app = orders_app("json", "json-object", f"embedded://{tmp_path / 'broker'}", registry=registry)
        with pytest.raises(ConfigError) as refused:
            replay(app, inputs={"orders": str(tmp_path / "broker")}, output=str(tmp_path / "out"), spark=spark)
    assert "cannot be sent to Spark's executors" in str(refused.value) and "http(s)://" in str(refused.value)
