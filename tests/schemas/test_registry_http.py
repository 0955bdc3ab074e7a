"""``streamkit registry serve`` against a real third-party client: confluent-kafka's
SchemaRegistryClient and its Avro serializers, and plain HTTP for the exact shapes.
One server process (on an embedded broker directory) serves the module; each test
uses its own subjects."""
from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from typing import Any, Iterator, Optional, Tuple

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from .registry_servers import RegistryProcess


def avro_record(*fields: dict, name: str = "Order") -> str:
    return json.dumps({"type": "record", "name": name, "namespace": "shop", "fields": list(fields)})


V1 = avro_record({"name": "id", "type": "long"})
V2_DEFAULT = avro_record({"name": "id", "type": "long"}, {"name": "note", "type": "string", "default": ""})
V2_NO_DEFAULT = avro_record({"name": "id", "type": "long"}, {"name": "note", "type": "string"})
V3_DROPS_NOTE = avro_record({"name": "id", "type": "long"}, {"name": "qty", "type": "int", "default": 0})


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryProcess]:
    directory = tmp_path_factory.mktemp("registry")
    process = RegistryProcess(f"embedded://{directory}/broker", directory / "registry.log")
    yield process
    assert process.stop() == 0, process.log()


@pytest.fixture
def client(server: RegistryProcess) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": server.url})


@pytest.fixture
def subject() -> str:
    return f"orders-{uuid.uuid4().hex[:8]}-value"


def http(server: RegistryProcess, method: str, path: str, body: Optional[Any] = None,
         content_type: str = "application/vnd.schemaregistry.v1+json", accept: str = "") -> Tuple[int, str, Any]:
    """(status, content type, parsed JSON body) of a plain HTTP request."""
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": content_type, **({"Accept": accept} if accept else {})}
    request = urllib.request.Request(server.url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers["Content-Type"], json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], json.loads(error.read())


def test_register_fetch_by_id_versions_and_lookup(client: SchemaRegistryClient, subject: str) -> None:
    schema_id = client.register_schema(subject, Schema(V1, "AVRO"))
    assert client.register_schema(subject, Schema(V1, "AVRO")) == schema_id
    other = SchemaRegistryClient({"url": client._rest_client.base_urls[0]})  # no cache
    assert other.register_schema(subject.replace("value", "key"), Schema(V1, "AVRO")) == schema_id
    fetched = other.get_schema(schema_id)
    assert json.loads(fetched.schema_str) == json.loads(V1) and fetched.schema_type == "AVRO"
    v2_id = other.register_schema(subject, Schema(V2_DEFAULT, "AVRO"))
    assert v2_id != schema_id
    assert other.get_versions(subject) == [1, 2]
    latest = other.get_latest_version(subject)
    assert (latest.subject, latest.version, latest.schema_id) == (subject, 2, v2_id)
    assert other.get_version(subject, 1).schema_id == schema_id
    found = other.lookup_schema(subject, Schema(V1, "AVRO"))
    assert (found.version, found.schema_id) == (1, schema_id)
    assert subject in other.get_subjects()
    assert sorted(other.get_subjects_by_schema_id(schema_id)) == sorted([subject, subject.replace("value", "key")])
    assert {(v.subject, v.version) for v in other.get_schema_versions(schema_id)} == {
        (subject, 1), (subject.replace("value", "key"), 1)}
    assert set(other.get_schema_types()) == {"AVRO", "JSON", "PROTOBUF"}
    with pytest.raises(SchemaRegistryError) as missing:
        other.lookup_schema(subject, Schema(V3_DROPS_NOTE, "AVRO"))
    assert (missing.value.http_status_code, missing.value.error_code) == (404, 40403)
    with pytest.raises(SchemaRegistryError) as missing:
        other.get_schema(987654)
    assert (missing.value.http_status_code, missing.value.error_code) == (404, 40403)
    with pytest.raises(SchemaRegistryError) as missing:
        other.get_latest_version("no-such-subject")
    assert missing.value.error_code == 40401


def test_invalid_schema_is_422(client: SchemaRegistryClient, subject: str) -> None:
    with pytest.raises(SchemaRegistryError) as bad:
        client.register_schema(subject, Schema('{"type": "record", "name": "NoFields"}', "AVRO"))
    assert (bad.value.http_status_code, bad.value.error_code) == (422, 42201)


@pytest.mark.parametrize("level, accepted, rejected", [
    ("BACKWARD", V2_DEFAULT, V2_NO_DEFAULT),
    ("FORWARD", V2_NO_DEFAULT, None),
    ("FULL", V2_DEFAULT, V2_NO_DEFAULT),
    ("NONE", V2_NO_DEFAULT, None),
])
def test_compatibility_per_level(client: SchemaRegistryClient, subject: str, level: str, accepted: str,
                                 rejected: Optional[str]) -> None:
    assert client.set_compatibility(subject, level) == {"compatibility": level}
    assert client.get_compatibility(subject) == level
    client.register_schema(subject, Schema(V1, "AVRO"))
    if rejected is not None:
        assert client.test_compatibility(subject, Schema(rejected, "AVRO")) is False
        assert client.test_compatibility_all_versions(subject, Schema(rejected, "AVRO")) is False
        with pytest.raises(SchemaRegistryError) as refused:
            client.register_schema(subject, Schema(rejected, "AVRO"))
        assert (refused.value.http_status_code, refused.value.error_code) == (409, 409)
        assert "note" in refused.value.error_message
    assert client.test_compatibility(subject, Schema(accepted, "AVRO")) is True
    assert client.register_schema(subject, Schema(accepted, "AVRO")) > 0
    assert client.get_versions(subject) == [1, 2]


def test_forward_transitive_checks_every_version(client: SchemaRegistryClient, subject: str) -> None:
    client.set_compatibility(subject, "FORWARD_TRANSITIVE")
    client.register_schema(subject, Schema(V2_NO_DEFAULT, "AVRO"))
    client.register_schema(subject, Schema(V2_DEFAULT, "AVRO"))
    # dropping 'note': version 2 (default "") reads the new data, version 1 does not
    assert client.test_compatibility(subject, Schema(V3_DROPS_NOTE, "AVRO"), version=2) is True
    assert client.test_compatibility(subject, Schema(V3_DROPS_NOTE, "AVRO"), version=1) is False
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema(subject, Schema(V3_DROPS_NOTE, "AVRO"))
    assert refused.value.error_code == 409
    client.set_compatibility(subject, "FORWARD")
    assert client.register_schema(subject, Schema(V3_DROPS_NOTE, "AVRO")) > 0


def test_backward_transitive_checks_every_version(client: SchemaRegistryClient, subject: str) -> None:
    client.set_compatibility(subject, "BACKWARD_TRANSITIVE")
    with_qty = avro_record({"name": "id", "type": "long"}, {"name": "qty", "type": "int"})
    client.register_schema(subject, Schema(with_qty, "AVRO"))
    client.register_schema(subject, Schema(V1, "AVRO"))  # drops qty: readable backwards
    # qty comes back as a long without a default: v1's ints promote, v2's data lacks it
    readds = avro_record({"name": "id", "type": "long"}, {"name": "qty", "type": "long"})
    assert client.test_compatibility(subject, Schema(readds, "AVRO"), version=1) is True
    assert client.test_compatibility_all_versions(subject, Schema(readds, "AVRO")) is False
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema(subject, Schema(readds, "AVRO"))
    assert refused.value.error_code == 409


@pytest.mark.parametrize("level", ["BACKWARD_TRANSITIVE", "FORWARD_TRANSITIVE", "FULL_TRANSITIVE"])
def test_a_named_version_is_the_only_one_checked_under_a_transitive_level(
        client: SchemaRegistryClient, server: RegistryProcess, subject: str, level: str) -> None:
    # Confluent: /compatibility/subjects/S/versions/V tests against version V ("latest": the
    # newest) alone; /compatibility/subjects/S/versions tests as register does (every version)
    note_string = avro_record({"name": "id", "type": "long"}, {"name": "note", "type": "string", "default": ""})
    note_int = avro_record({"name": "id", "type": "long"}, {"name": "note", "type": "int", "default": 0})
    client.set_compatibility(subject, level)
    client.register_schema(subject, Schema(note_string, "AVRO"))
    client.register_schema(subject, Schema(V1, "AVRO"))  # drops note: compatible both ways
    # note comes back as an int: fine against version 2, a type clash with version 1's string
    assert client.test_compatibility(subject, Schema(note_int, "AVRO")) is True  # "latest"
    assert client.test_compatibility(subject, Schema(note_int, "AVRO"), version=2) is True
    assert client.test_compatibility(subject, Schema(note_int, "AVRO"), version=1) is False
    assert client.test_compatibility_all_versions(subject, Schema(note_int, "AVRO")) is False
    body = {"schema": note_int}
    assert http(server, "POST", f"/compatibility/subjects/{subject}/versions/latest?verbose=true", body)[2] == {
        "is_compatible": True, "messages": []}
    status, _, answer = http(server, "POST", f"/compatibility/subjects/{subject}/versions?verbose=true", body)
    assert status == 200 and answer["is_compatible"] is False and "/fields/1/type" in " ".join(answer["messages"])
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema(subject, Schema(note_int, "AVRO"))
    assert refused.value.error_code == 409
    client.delete_version(subject, 1)  # a soft-deleted version is no longer checked
    assert client.test_compatibility_all_versions(subject, Schema(note_int, "AVRO")) is True


def test_config_global_and_subject(client: SchemaRegistryClient, server: RegistryProcess, subject: str) -> None:
    assert client.get_compatibility() == "BACKWARD"
    with pytest.raises(SchemaRegistryError) as unset:
        client.get_compatibility(subject)
    assert unset.value.error_code == 40408
    client.register_schema(subject, Schema(V1, "AVRO"))
    client.set_compatibility(subject, "full_transitive")
    assert client.get_config(subject).compatibility_level.value == "FULL_TRANSITIVE"
    assert client.delete_config(subject).compatibility_level.value == "FULL_TRANSITIVE"
    assert http(server, "GET", f"/config/{subject}?defaultToGlobal=true")[2] == {"compatibilityLevel": "BACKWARD"}
    status, _, body = http(server, "PUT", "/config", {"compatibility": "SIDEWAYS"})
    assert (status, body["error_code"]) == (422, 42203)


def test_soft_and_hard_deletes(client: SchemaRegistryClient, subject: str) -> None:
    only_here = avro_record({"name": "id", "type": "long"}, name=f"Deleted{uuid.uuid4().hex[:8]}")
    first = client.register_schema(subject, Schema(only_here, "AVRO"))
    client.set_compatibility(subject, "NONE")
    client.register_schema(subject, Schema(V2_DEFAULT, "AVRO"))
    with pytest.raises(SchemaRegistryError) as not_soft:
        client.delete_version(subject, 1, permanent=True)
    assert not_soft.value.error_code == 40407
    assert client.delete_version(subject, 1) == 1
    assert client.get_versions(subject) == [2]
    assert client.get_versions(subject, deleted=True) == [1, 2]
    assert client.get_version(subject, 1, deleted=True).schema_id == first
    assert client.get_schema(first)  # a soft-deleted version's id still decodes
    # a fresh client: confluent-kafka 2.12's cache raises KeyError in delete_version(permanent=True)
    # after get_version() cached that version (its remove_by_subject_version indexes by the wrong key)
    fresh = SchemaRegistryClient({"url": client._rest_client.base_urls[0]})
    assert fresh.delete_version(subject, 1, permanent=True) == 1
    assert client.delete_subject(subject) == [2]
    assert subject not in client.get_subjects() and subject in client.get_subjects(deleted=True)
    with pytest.raises(SchemaRegistryError) as again:
        client.delete_subject(subject)
    assert again.value.error_code == 40404
    assert client.delete_subject(subject, permanent=True) == [2]
    assert subject not in client.get_subjects(deleted=True)
    with pytest.raises(SchemaRegistryError) as gone:
        fresh.get_schema(first)
    assert gone.value.error_code == 40403


def test_avro_serializer_round_trip_through_the_server(client: SchemaRegistryClient, subject: str) -> None:
    topic = subject.removesuffix("-value")
    serialize = AvroSerializer(client, V2_DEFAULT)
    context = SerializationContext(topic, MessageField.VALUE)
    payload = serialize({"id": 7, "note": "rush"}, context)
    assert payload[0] == 0  # Confluent's wire format: magic byte, then the schema id
    schema_id = int.from_bytes(payload[1:5], "big")
    assert client.get_latest_version(subject).schema_id == schema_id
    fresh = SchemaRegistryClient({"url": client._rest_client.base_urls[0]})
    assert AvroDeserializer(fresh)(payload, context) == {"id": 7, "note": "rush"}
    # evolution on read: a reader schema with one more field (with its default)
    reader = avro_record({"name": "id", "type": "long"}, {"name": "note", "type": "string", "default": ""},
                         {"name": "qty", "type": "int", "default": 1})
    assert AvroDeserializer(fresh, reader)(payload, context) == {"id": 7, "note": "rush", "qty": 1}
    strict = AvroSerializer(client, V1, conf={"auto.register.schemas": False})
    with pytest.raises(Exception):  # V1 was never registered under this subject
        strict({"id": 1}, context)


def test_plain_http_shapes(server: RegistryProcess, subject: str) -> None:
    assert http(server, "GET", "/") == (200, "application/vnd.schemaregistry.v1+json", {})
    assert http(server, "GET", "/", accept="application/json") == (200, "application/json", {})
    status, _, body = http(server, "POST", f"/subjects/{subject}/versions", {"schema": V1}, "application/json")
    assert status == 200 and set(body) >= {"id"}
    schema_id = body["id"]
    assert http(server, "GET", f"/subjects/{subject}/versions/latest")[2] == {
        "subject": subject, "version": 1, "id": schema_id, "schema": json.dumps(json.loads(V1), separators=(",", ":"))}
    assert http(server, "GET", f"/subjects/{subject}/versions/1/schema")[2] == json.loads(V1)
    assert http(server, "GET", f"/schemas/ids/{schema_id}/schema")[2] == json.loads(V1)
    assert http(server, "GET", "/mode")[2] == {"mode": "READWRITE"}
    status, _, body = http(server, "POST", f"/compatibility/subjects/{subject}/versions/latest?verbose=true",
                           {"schema": V2_NO_DEFAULT})
    assert status == 200 and body["is_compatible"] is False and any("note" in m for m in body["messages"])
    assert http(server, "POST", f"/compatibility/subjects/{subject}/versions", {"schema": V2_DEFAULT})[2] == {
        "is_compatible": True}
    status, _, body = http(server, "GET", f"/subjects/{subject}/versions/0")
    assert (status, body["error_code"]) == (422, 42202)
    status, _, body = http(server, "GET", f"/subjects/{subject}/versions/5")
    assert (status, body["error_code"]) == (404, 40402)
    status, _, body = http(server, "POST", f"/subjects/{subject}/versions", {"schema": "{", "schemaType": "AVRO"})
    assert (status, body["error_code"]) == (422, 42201)
    status, content_type, body = http(server, "GET", "/no/such/path")
    assert (status, content_type, body["error_code"]) == (404, "application/vnd.schemaregistry.v1+json", 404)
    http(server, "DELETE", f"/subjects/{subject}")
    assert http(server, "GET", "/subjects?deletedOnly=true")[2].count(subject) == 1
    assert subject not in http(server, "GET", "/subjects")[2]


ORDER_PROTO = """syntax = "proto3";
package shop;

message Order {
  int64 id = 1;
  string note = 2;
}
"""


def test_protobuf_serializer_round_trip_through_the_server(client: SchemaRegistryClient, subject: str) -> None:
    """confluent-kafka's Protobuf serializer registers base64 descriptors and its
    deserializer asks for them back (``?format=serialized``); the same file registered
    as ``.proto`` text is the same schema (one id)."""
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer

    from streamkit.schemas.protobuf_text import message_class

    namespaced = ORDER_PROTO.replace("package shop;", f"package shop{uuid.uuid4().hex[:6]};")
    package = namespaced.split("package ")[1].split(";")[0]
    order_class = message_class(namespaced, f"{package}.Order")
    topic = subject.removesuffix("-value")
    context = SerializationContext(topic, MessageField.VALUE)
    payload = ProtobufSerializer(order_class, client, {"use.deprecated.format": False})(
        order_class(id=5, note="gift"), context)
    schema_id = int.from_bytes(payload[1:5], "big")
    fresh = SchemaRegistryClient({"url": client._rest_client.base_urls[0]})
    assert fresh.register_schema(subject, Schema(namespaced, "PROTOBUF")) == schema_id
    stored = fresh.get_schema(schema_id)
    assert stored.schema_type == "PROTOBUF" and "message Order" in stored.schema_str
    # a client of its own: confluent-kafka caches schemas by id whatever format it asked for
    reading = SchemaRegistryClient({"url": client._rest_client.base_urls[0]})
    decoded = ProtobufDeserializer(order_class, {"use.deprecated.format": False}, reading)(payload, context)
    assert (decoded.id, decoded.note) == (5, "gift")
    # BACKWARD (the default): a field's type may not change across wire groups
    changed = namespaced.replace("string note = 2;", "double note = 2;")
    assert fresh.test_compatibility(subject, Schema(changed, "PROTOBUF")) is False
    with pytest.raises(SchemaRegistryError) as refused:
        fresh.register_schema(subject, Schema(changed, "PROTOBUF"))
    assert refused.value.error_code == 409
    added = namespaced.replace("string note = 2;", "string note = 2;\n  int32 qty = 3;")
    assert fresh.register_schema(subject, Schema(added, "PROTOBUF")) == schema_id + 1


def test_json_schema_serializer_round_trip_through_the_server(client: SchemaRegistryClient, subject: str) -> None:
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer

    order = {"$schema": "http://json-schema.org/draft-07/schema#", "title": f"Order{uuid.uuid4().hex[:6]}",
             "type": "object", "properties": {"id": {"type": "integer"}, "note": {"type": "string"}},
             "required": ["id"]}
    context = SerializationContext(subject.removesuffix("-value"), MessageField.VALUE)
    payload = JSONSerializer(json.dumps(order), client)({"id": 3, "note": "x"}, context)
    schema_id = int.from_bytes(payload[1:5], "big")
    fresh = SchemaRegistryClient({"url": client._rest_client.base_urls[0]})
    stored = fresh.get_schema(schema_id)
    assert stored.schema_type == "JSON" and json.loads(stored.schema_str) == order
    assert JSONDeserializer(None, schema_registry_client=fresh)(payload, context) == {"id": 3, "note": "x"}
    with pytest.raises(SchemaRegistryError) as invalid:
        fresh.register_schema(subject, Schema(json.dumps({"type": 12}), "JSON"))
    assert invalid.value.error_code == 42201
    # BACKWARD: the new schema must read what the old one wrote; a new required property breaks that
    stricter = {**order, "properties": {**order["properties"], "qty": {"type": "integer"}},
                "required": ["id", "qty"]}
    assert fresh.test_compatibility(subject, Schema(json.dumps(stricter), "JSON")) is False
    with pytest.raises(SchemaRegistryError) as refused:
        fresh.register_schema(subject, Schema(json.dumps(stricter), "JSON"))
    assert refused.value.error_code == 409
