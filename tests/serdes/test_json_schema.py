"""The JSON Schema serde on the in-process registry: wire format, validation on write
and (optionally) on read, the title as record name, unknown ids."""
from __future__ import annotations

import json

import pytest

from streamkit.errors import ConfigError, SerializationError
from streamkit.schemas.model import Schema, SchemaType
from streamkit.schemas.registry.service import SchemaRegistry
from streamkit.serdes import JsonSchema

ORDER = {"$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", "type": "object",
         "properties": {"id": {"type": "string"}, "qty": {"type": "integer", "minimum": 1}},
         "required": ["id", "qty"]}


@pytest.fixture
def registry() -> SchemaRegistry:
    with SchemaRegistry.in_memory() as reg:
        yield reg


def test_writes_magic_byte_id_and_compact_json(registry: SchemaRegistry) -> None:
    serde = JsonSchema(ORDER, registry=registry).for_topic("orders", False)
    data = serde.serialize({"id": "o1", "qty": 2})
    registered = registry.latest_version("orders-value")
    assert registered.schema.schema_type is SchemaType.JSON
    assert data == b"\x00" + registered.schema_id.to_bytes(4, "big") + b'{"id":"o1","qty":2}'
    assert serde.deserialize(data) == {"id": "o1", "qty": 2}


def test_a_value_failing_validation_is_refused_on_write_with_its_path(registry: SchemaRegistry) -> None:
    serde = JsonSchema(ORDER, registry=registry).for_topic("orders", False)
    with pytest.raises(SerializationError,
                       match=r"JsonSchema serde \(topic 'orders' value, subject 'orders-value', schema id \d+\): "
                             r"the value fails validation at /qty: 0 is less than the minimum of 1"):
        serde.serialize({"id": "o1", "qty": 0})
    with pytest.raises(SerializationError, match="'qty' is a required property"):
        serde.serialize({"id": "o1"})
    unchecked = JsonSchema(ORDER, registry=registry, validate=False).for_topic("orders", False)
    assert unchecked.deserialize(unchecked.serialize({"id": "o1"})) == {"id": "o1"}


def test_validation_on_read_is_optional(registry: SchemaRegistry) -> None:
    writer = JsonSchema(ORDER, registry=registry, validate=False).for_topic("orders", False)
    invalid = writer.serialize({"id": 5, "qty": 1})
    assert JsonSchema(ORDER, registry=registry).for_topic("orders", False).deserialize(invalid) == {"id": 5, "qty": 1}
    strict = JsonSchema(registry=registry, validate_on_read=True).for_topic("orders", False)
    with pytest.raises(SerializationError, match="fails validation at /id: 5 is not of type 'string'"):
        strict.deserialize(invalid)


def test_title_is_the_record_name(registry: SchemaRegistry) -> None:
    serde = JsonSchema(ORDER, registry=registry, subject_name_strategy="topic_record").for_topic("orders", True)
    serde.serialize({"id": "o1", "qty": 1})
    assert registry.subjects() == ["orders-Order"]
    untitled = JsonSchema({"type": "object"}, registry=registry, subject_name_strategy="record")
    with pytest.raises(ConfigError, match="needs a record name"):
        untitled.for_topic("orders", False).serialize({})


def test_unknown_ids_and_other_formats_are_refused(registry: SchemaRegistry) -> None:
    serde = JsonSchema(ORDER, registry=registry).for_topic("orders", False)
    with pytest.raises(SerializationError, match="unknown schema id 4242"):
        serde.deserialize(b"\x00" + (4242).to_bytes(4, "big") + b"{}")
    avro_id = registry.register("other-value", Schema(json.dumps({"type": "string"})))
    with pytest.raises(SerializationError, match=f"schema id {avro_id} is a AVRO schema; this serde reads JSON"):
        serde.deserialize(b"\x00" + avro_id.to_bytes(4, "big") + b"{}")
    good = serde.serialize({"id": "o1", "qty": 1})
    with pytest.raises(SerializationError, match="does not decode"):
        serde.deserialize(good[:5] + b"{not json")


def test_invalid_schemas_fail_at_construction() -> None:
    with pytest.raises(ConfigError, match="invalid JSON Schema"):
        JsonSchema({"type": "no-such-type"}, registry="embedded")
    with pytest.raises(ConfigError, match="not JSON"):
        JsonSchema("{oops", registry="embedded")


def test_references_are_resolved_when_validating(registry: SchemaRegistry) -> None:
    from streamkit.schemas.model import SchemaReference

    address = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
               "properties": {"city": {"type": "string"}}, "required": ["city"]}
    registry.register("address", Schema(json.dumps(address), SchemaType.JSON))
    customer = {"$schema": "http://json-schema.org/draft-07/schema#", "title": "Customer", "type": "object",
                "properties": {"name": {"type": "string"}, "address": {"$ref": "address.json"}}}
    registry.register("customers-value", Schema(json.dumps(customer), SchemaType.JSON,
                                                references=[SchemaReference("address.json", "address", 1)]))
    writer = JsonSchema(registry=registry, use_latest_version=True).for_topic("customers", False)
    good = writer.serialize({"name": "ann", "address": {"city": "Oslo"}})
    reader = JsonSchema(registry=registry, validate_on_read=True).for_topic("customers", False)
    assert reader.deserialize(good) == {"name": "ann", "address": {"city": "Oslo"}}
    with pytest.raises(SerializationError, match="fails validation at /address: 'city' is a required property"):
        writer.serialize({"name": "bob", "address": {}})
