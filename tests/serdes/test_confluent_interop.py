"""Byte-level interoperability with a real third-party client: confluent-kafka's
serializers and deserializers and streamkit's serdes sit on one real registry (a
``streamkit registry serve`` process, reached by both over HTTP), and each reads what
the other writes, directly and through an embedded topic."""
from __future__ import annotations

import asyncio
import base64
import json
import pickle
from pathlib import Path
from typing import Iterator, List, Optional, Tuple

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from streamkit.core.records import TopicPartition
from streamkit.errors import SerializationError
from streamkit.schemas.http_client import HttpRegistryClient
from streamkit.schemas.model import (InvalidSchema, RegistryError, Schema, SchemaNotFound, SubjectNotFound,
                                     VersionNotFound)
from streamkit.schemas.protobuf_text import message_class
from streamkit.serdes import Avro, JsonSchema, Protobuf
from streamkit.transport.factory import open_transport

from tests.cli_processes import broker_dir, cli  # noqa: F401 (fixtures)
from tests.schemas.registry_servers import RegistryProcess

ORDER_AVRO = json.dumps({"type": "record", "name": "Order", "namespace": "shop",
                         "fields": [{"name": "id", "type": "string"}, {"name": "qty", "type": "int"},
                                    {"name": "tags", "type": {"type": "array", "items": "string"}},
                                    {"name": "note", "type": ["null", "string"], "default": None}]})
ORDER_JSON = json.dumps({"$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", "type": "object",
                         "properties": {"id": {"type": "string"}, "qty": {"type": "integer"}},
                         "required": ["id", "qty"]})
ORDER_PROTO = """syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Order {
  string id = 1;
  int32 qty = 2;
  google.protobuf.Timestamp at = 3;
  message Line { string sku = 1; }
  repeated Line lines = 4;
}
"""
ProtoOrder = message_class(ORDER_PROTO, "shop.Order")
ProtoLine = message_class(ORDER_PROTO, "shop.Order.Line")
ORDER = {"id": "o1", "qty": 3, "tags": ["a", "b"], "note": "gift"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryProcess]:
    directory = tmp_path_factory.mktemp("registry")
    process = RegistryProcess(f"embedded://{directory}/broker", directory / "registry.log")
    yield process
    assert process.stop() == 0, process.log()


@pytest.fixture(scope="module")
def client(server: RegistryProcess) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": server.url})


def _value(topic: str) -> SerializationContext:
    return SerializationContext(topic, MessageField.VALUE)


def test_avro_bytes_are_the_same_both_ways(server: RegistryProcess, client: SchemaRegistryClient) -> None:
    theirs = AvroSerializer(client, ORDER_AVRO)(ORDER, _value("avro-orders"))
    ours = Avro(ORDER_AVRO, registry=server.url).for_topic("avro-orders", False)
    assert ours.serialize(ORDER) == theirs  # one subject, one schema, one id: identical records
    assert ours.deserialize(theirs) == ORDER
    assert AvroDeserializer(client)(ours.serialize(ORDER), _value("avro-orders")) == ORDER
    assert client.get_latest_version("avro-orders-value").schema_id == int.from_bytes(theirs[1:5], "big")
    shipped = pickle.loads(pickle.dumps(ours))  # as a Spark replay ships it: caches left behind, rebuilt on use
    assert shipped == ours and not shipped._readers and shipped.deserialize(theirs) == ORDER


def test_avro_evolution_across_clients(server: RegistryProcess, client: SchemaRegistryClient) -> None:
    v1 = {"type": "record", "name": "Order", "namespace": "shop",
          "fields": [{"name": "id", "type": "string"}, {"name": "qty", "type": "int"}]}
    v2 = {**v1, "fields": v1["fields"] + [{"name": "note", "type": "string", "default": "-"}]}
    v1_bytes = AvroSerializer(client, json.dumps(v1))({"id": "o0", "qty": 1}, _value("avro-evolving"))
    ours = Avro(v2, registry=server.url).for_topic("avro-evolving", False)  # BACKWARD: registered as v2
    v2_bytes = ours.serialize({"id": "o1", "qty": 2, "note": "gift"})
    assert client.get_versions("avro-evolving-value") == [1, 2]
    assert ours.deserialize(v1_bytes) == {"id": "o0", "qty": 1, "note": "-"}  # the reader fills the default
    old_reader = AvroDeserializer(client, json.dumps(v1))  # theirs, still on v1, skips the new field
    assert old_reader(v2_bytes, _value("avro-evolving")) == {"id": "o1", "qty": 2}
    v3 = {**v1, "fields": v1["fields"] + [{"name": "due", "type": "long"}]}  # no default: not BACKWARD
    with pytest.raises(SerializationError, match=r"subject 'avro-evolving-value'.*IncompatibleSchema"):
        Avro(v3, registry=server.url).for_topic("avro-evolving", False).serialize({"id": "o", "qty": 1, "due": 1})


def test_json_schema_bytes_are_the_same_both_ways(server: RegistryProcess, client: SchemaRegistryClient) -> None:
    value = {"id": "o1", "qty": 3}
    theirs = JSONSerializer(ORDER_JSON, client)(value, _value("json-orders"))
    ours = JsonSchema(ORDER_JSON, registry=server.url).for_topic("json-orders", False)
    assert ours.serialize(value) == theirs
    assert ours.deserialize(theirs) == value
    assert JSONDeserializer(ORDER_JSON, schema_registry_client=client)(ours.serialize(value),
                                                                      _value("json-orders")) == value


def test_protobuf_records_cross_both_ways(server: RegistryProcess, client: SchemaRegistryClient) -> None:
    order = ProtoOrder(id="o1", qty=3)
    order.at.seconds = 1_700_000_000
    order.lines.add(sku="apple")
    config = {"use.deprecated.format": False}
    theirs = ProtobufSerializer(ProtoOrder, client, config)(order, _value("proto-orders"))
    # confluent-kafka-python leaves google/protobuf imports out of the references (skip.known.types);
    # so configured, ours registers the same schema: same id, same bytes
    alike = Protobuf(ProtoOrder, registry=server.url, skip_known_types=True).for_topic("proto-orders", False)
    assert alike.serialize(order) == theirs
    # by default ours references google/protobuf/timestamp.proto: another schema version, same payload
    ours = Protobuf(ProtoOrder, registry=server.url).for_topic("proto-orders", False)
    assert ours.deserialize(theirs) == order
    mine = ours.serialize(order)
    assert mine[:5] != theirs[:5] and mine[5:] == theirs[5:]  # [0] as one 0 byte, then the message
    assert client.get_versions("proto-orders-value") == [1, 2]
    assert ProtobufDeserializer(ProtoOrder, config)(mine, _value("proto-orders")) == order
    # a nested message: index path [0, 0] written by them, read by a generic reader of ours
    line = ProtoLine(sku="pear")
    nested = ProtobufSerializer(ProtoLine, client, {**config, "auto.register.schemas": True})(
        line, _value("proto-lines"))
    assert nested[5:8] == b"\x04\x00\x00"
    generic = Protobuf(registry=server.url).for_topic("proto-lines", False).deserialize(nested)
    assert generic.DESCRIPTOR.full_name == "shop.Order.Line" and generic.sku == "pear"
    assert ProtobufDeserializer(ProtoLine, config)(
        Protobuf(ProtoLine, registry=server.url).for_topic("proto-lines", False).serialize(line),
        _value("proto-lines")) == line


# -- through an embedded topic ------------------------------------------------------------

def _write(broker: str, topic: str, values: List[bytes]) -> None:
    async def send() -> None:
        producer = transport.producer()
        await producer.send([(topic, 0, [(None, value, 0, None) for value in values])])
        await producer.flush()
        await producer.aclose()
    transport = open_transport(broker)
    try:
        asyncio.run(send())
    finally:
        transport.close()


def _read(broker: str, topic: str) -> List[Tuple[Optional[bytes], Optional[bytes]]]:
    async def fetch() -> List[Tuple[Optional[bytes], Optional[bytes]]]:
        consumer = transport.consumer("interop-reader")
        consumer.assign([TopicPartition(topic, 0)], {TopicPartition(topic, 0): 0})
        out: List[Tuple[Optional[bytes], Optional[bytes]]] = []
        for _ in range(20):
            for batch in await consumer.fetch(0.1):
                out.extend((record[2], record[3]) for record in batch.records)
            if out:
                break
        await consumer.aclose()
        return out
    transport = open_transport(broker)
    try:
        return asyncio.run(fetch())
    finally:
        transport.close()


def test_through_an_embedded_topic_with_the_cli(cli, broker_dir: Path, server: RegistryProcess,
                                              client: SchemaRegistryClient, tmp_path: Path) -> None:
    broker = f"embedded://{broker_dir}"
    assert cli("topics", "create", "from-confluent").returncode == 0
    assert cli("topics", "create", "from-streamkit").returncode == 0
    serialize = AvroSerializer(client, ORDER_AVRO)
    _write(broker, "from-confluent", [serialize(dict(ORDER, id=f"o{i}"), _value("from-confluent"))
                                      for i in range(3)])
    consumed = cli("consume", "from-confluent", "--from-beginning", "--timeout", "0.5", "--value-format", "avro",
                   "--registry", server.url)
    assert consumed.returncode == 0, consumed.stderr
    assert [json.loads(line)["value"] for line in consumed.stdout.splitlines()] == [
        dict(ORDER, id=f"o{i}") for i in range(3)]

    schema = tmp_path / "order.avsc"
    schema.write_text(ORDER_AVRO)
    produced = cli("produce", "from-streamkit", "--value-format", "avro", "--schema", str(schema),
                   "--registry", server.url, stdin=json.dumps(ORDER) + "\n")
    assert produced.returncode == 0, produced.stderr
    [(key, value)] = _read(broker, "from-streamkit")
    assert key is None and AvroDeserializer(client)(value, _value("from-streamkit")) == ORDER


def test_http_client_speaks_the_rest_api_and_maps_its_errors(server: RegistryProcess) -> None:
    host = server.url.split("://", 1)[1]
    client = HttpRegistryClient(f"http://bob:s%3Acret@{host}/")  # basic auth from the userinfo
    assert client.url == server.url and "s:cret" not in repr(client) and "bob" not in repr(client)
    assert client._headers["Authorization"] == "Basic " + base64.b64encode(b"bob:s:cret").decode()
    schema = Schema(json.dumps({"type": "record", "name": "H", "fields": [{"name": "a", "type": "int"}]}))
    schema_id = client.register("http-value", schema)
    assert client.register("http-value", schema) == schema_id  # already there: same id, no new version
    assert client.lookup("http-value", schema).schema_id == schema_id
    assert client.version("http-value", 1).schema_id == schema_id
    assert client.latest_version("http-value").version == 1
    assert json.loads(client.schema_by_id(schema_id).schema_str) == json.loads(schema.schema_str)
    with pytest.raises(SubjectNotFound):
        client.latest_version("no-such-subject")
    with pytest.raises(SchemaNotFound):
        client.schema_by_id(987654)
    with pytest.raises(VersionNotFound):
        client.version("http-value", 9)
    with pytest.raises(InvalidSchema):
        client.register("http-value", Schema("{not avro"))
    with pytest.raises(RegistryError, match="unreachable") as unreachable:
        HttpRegistryClient("http://127.0.0.1:9", timeout=2).schema_by_id(1)
    assert unreachable.value.status == 503
