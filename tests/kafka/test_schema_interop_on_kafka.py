"""Avro through Kafka with a real third-party client on both ends (issue 23).

confluent-kafka's Producer and ``AvroSerializer`` write orders to a Kafka topic, with
an older schema (no ``note``); a streamkit worker process reads them with
``sk.serdes.Avro`` and a newer reader schema (``note`` defaults to null), filters and
maps, and writes Avro; confluent-kafka's Consumer and ``AvroDeserializer`` read the
results. Both sides use one ``streamkit registry serve`` process whose state is a
``_schemas`` topic on the same broker.
"""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.schemas.registry_servers import RegistryProcess

from .broker import KafkaTestBroker
from .topics import create_app_topics, load_app

REPO = Path(__file__).resolve().parents[2]
ORDERS = 300

WRITER_V1 = {"type": "record", "name": "Order", "namespace": "shop",
             "fields": [{"name": "id", "type": "string"}, {"name": "qty", "type": "int"},
                        {"name": "price", "type": "double"}]}
READER_V2 = {**WRITER_V1, "fields": WRITER_V1["fields"] + [
    {"name": "note", "type": ["null", "string"], "default": None}]}
LINE_TOTAL = {"type": "record", "name": "LineTotal", "namespace": "shop",
              "fields": [{"name": "id", "type": "string"}, {"name": "total", "type": "double"},
                         {"name": "note", "type": ["null", "string"], "default": None}]}

APP = '''
import streamkit as sk

REGISTRY = {registry!r}
app = sk.App({app_id!r})
orders = app.topic({source!r}, key_serde=sk.serdes.String(),
                   value_serde=sk.serdes.Avro({reader!r}, registry=REGISTRY), partitions=3)


@app.topology
def build(b):
    (b.stream(orders)
      .filter(lambda key, order: order["qty"] > 1)
      .map_values(lambda order: {{"id": order["id"], "total": order["qty"] * order["price"],
                                 "note": order["note"]}})
      .to({sink!r}, key_serde=sk.serdes.String(), value_serde=sk.serdes.Avro({line_total!r}, registry=REGISTRY)))
'''


def _orders() -> List[Tuple[str, Dict]]:
    return [(f"o{n}", {"id": f"o{n}", "qty": n % 4, "price": 1.25 * (n % 7)}) for n in range(ORDERS)]


def _read_all(kafka: KafkaTestBroker, topic: str, partitions: int, expected: int,
              decode: Callable[[bytes, str], Dict], timeout: float = 60) -> List[Tuple[str, Dict, int]]:
    """Every record of ``topic`` through confluent-kafka's Consumer (assigned, no group join):
    ``(key, decoded value, schema id from the record's header)``."""
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": f"{topic}-reader",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: List[Tuple[str, Dict, int]] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < expected and time.monotonic() < deadline:
            for message in consumer.consume(500, 0.5):
                if message.error():
                    raise AssertionError(f"consuming {topic}: {message.error()}")
                raw = message.value()
                assert raw[0] == 0, f"no Confluent magic byte: {raw[:8]!r}"
                out.append((message.key().decode(), decode(raw, topic), struct.unpack(">I", raw[1:5])[0]))
    finally:
        consumer.close()
    return out


@pytest.mark.timeout(240)
def test_avro_written_by_confluent_kafka_is_read_by_a_worker_and_its_output_read_back(
        kafka: KafkaTestBroker, tmp_path: Path, unique_name: Callable[[str], str]) -> None:
    if kafka.tls:
        pytest.skip("this test's confluent-kafka clients are configured for PLAINTEXT only")
    name = unique_name("avro-interop")
    source, sink = f"{name}-orders", f"{name}-totals"
    server = RegistryProcess(kafka.url, tmp_path / "registry.log", topic=f"{name}-_schemas", timeout=60)
    try:
        module = name.replace("-", "_")
        (tmp_path / f"{module}.py").write_text(APP.format(
            registry=server.url, app_id=name, source=source, sink=sink, reader=json.dumps(READER_V2),
            line_total=json.dumps(LINE_TOTAL)))
        partitions = create_app_topics(kafka, load_app(tmp_path / f"{module}.py"))
        client = SchemaRegistryClient({"url": server.url})

        # confluent-kafka writes with the older schema, partitioned as Java clients do
        serialize = AvroSerializer(client, json.dumps(WRITER_V1))
        producer = Producer({"bootstrap.servers": kafka.bootstrap, "partitioner": "murmur2_random"})
        for key, order in _orders():
            producer.produce(source, key=key.encode(),
                             value=serialize(order, SerializationContext(source, MessageField.VALUE)))
        assert producer.flush(30) == 0, "confluent-kafka did not deliver every order"
        v1_id = client.get_latest_version(f"{source}-value").schema_id

        env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}", "STREAMKIT_BROKER": kafka.url}
        done = subprocess.run([sys.executable, "-m", "streamkit", "worker", module, "--until-idle", "2",
                               "--state-dir", str(tmp_path / "state")],
                              capture_output=True, text=True, timeout=180, cwd=tmp_path, env=env)
        assert done.returncode == 0, done.stderr[-3000:]

        expected = {key: {"id": order["id"], "total": order["qty"] * order["price"], "note": None}
                    for key, order in _orders() if order["qty"] > 1}
        deserialize = AvroDeserializer(client)
        records = _read_all(kafka, sink, partitions[sink], len(expected),
                            lambda raw, topic: deserialize(raw, SerializationContext(topic, MessageField.VALUE)))
        assert {key: value for key, value, _id in records} == expected
        assert len(records) == len(expected), "an output was written twice"
        sink_id = client.get_latest_version(f"{sink}-value").schema_id
        assert {schema_id for _key, _value, schema_id in records} == {sink_id}
        assert sink_id != v1_id
        # the worker read v1 records with its v2 reader schema: it registered nothing for the source
        assert [v.version for v in [client.get_latest_version(f"{source}-value")]] == [1]
    finally:
        assert server.stop() == 0, server.log()
