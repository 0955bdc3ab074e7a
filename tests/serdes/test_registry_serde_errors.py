"""Bad registry-encoded input goes through the runtime's error handlers like any serde
failure: ``fail`` names topic, partition, offset and the schema id; ``dead_letter``
keeps the raw bytes and says why in its headers. Runs the real tasks on the
TopologyTestDriver."""
from __future__ import annotations

import json
from typing import Dict

import pytest

import streamkit as sk
from streamkit.errors import RecordError
from streamkit.schemas.model import Schema
from streamkit.schemas.registry.service import SchemaRegistry
from streamkit.serdes import Avro
from streamkit.testing import TopologyTestDriver

ORDER = {"type": "record", "name": "Order", "namespace": "shop",
         "fields": [{"name": "id", "type": "string"}, {"name": "qty", "type": "int"}]}
DOUBLED = {"type": "record", "name": "Doubled", "namespace": "shop",
           "fields": [{"name": "id", "type": "string"}, {"name": "qty2", "type": "int"}]}


@pytest.fixture
def registry() -> SchemaRegistry:
    with SchemaRegistry.in_memory() as reg:
        yield reg


def _app(registry: SchemaRegistry, handler: str) -> sk.App:
    app = sk.App("orders-app", deserialization_error_handler=handler, processing_error_handler=handler)
    app.topic("orders", value_serde=Avro(ORDER, registry=registry))
    app.topic("doubled", value_serde=Avro(DOUBLED, registry=registry))

    @app.topology
    def build(b):
        b.stream("orders").map_values(lambda v: {"id": v["id"], "qty2": v["qty"] * 2} if v["qty"] else {}).to("doubled")
    return app


def _headers(record) -> Dict[str, str]:
    return {name: value.decode() for name, value in record.headers or ()}


def test_bad_records_are_dead_lettered_raw_with_the_schema_id(registry: SchemaRegistry) -> None:
    driver = TopologyTestDriver(_app(registry, "dead_letter"))
    orders = driver.input_topic("orders")
    orders.pipe_input("k0", {"id": "o0", "qty": 1})  # registers orders-value
    order_id = registry.latest_version("orders-value").schema_id
    json_id = registry.register("elsewhere-value", Schema(json.dumps({"type": "object"}), "JSON"))
    bad = [
        b'{"id": "o1", "qty": 1}',                                   # plain JSON: no magic byte
        b"\x00" + (9999).to_bytes(4, "big") + b"\x04o1\x02",         # an id the registry never gave
        b"\x00" + order_id.to_bytes(4, "big") + b"\x0ao1",           # truncated: does not decode
        b"\x00" + order_id.to_bytes(4, "big") + b"\x04o1\x02extra",  # bytes left over
        b"\x00" + json_id.to_bytes(4, "big") + b"{}",                # a JSON Schema id
    ]
    for value in bad:
        orders.pipe_raw(b"k", value)
    orders.pipe_input("k6", {"id": "o6", "qty": 3})

    doubled = driver.output_topic("doubled").read_values()
    assert doubled == [{"id": "o0", "qty2": 2}, {"id": "o6", "qty2": 6}]
    dlq = driver.output_topic("orders-app-dlq", key_serde=sk.serdes.Bytes(),
                              value_serde=sk.serdes.Bytes()).read_records()
    assert [r.value for r in dlq] == bad  # the raw bytes, untouched
    messages = []
    for offset, record in enumerate(dlq, start=1):
        headers = _headers(record)
        assert headers["streamkit.error.stage"] == "deserialization"
        assert (headers["streamkit.error.topic"], headers["streamkit.error.partition"]) == ("orders", "0")
        assert headers["streamkit.error.offset"] == str(offset)
        assert headers["streamkit.error.class"] == "SerializationError"
        messages.append(headers["streamkit.error.message"])
    assert "unknown magic byte 123" in messages[0]
    assert "schema id 9999" in messages[1] and "unknown schema id 9999" in messages[1]
    for message in messages[2:4]:
        assert f"subject 'orders-value', schema id {order_id}" in message
    assert "does not decode" in messages[2] and "left over" in messages[3]
    assert f"schema id {json_id} is a JSON schema; this serde reads AVRO" in messages[4]


def test_fail_names_topic_partition_offset_and_schema_id(registry: SchemaRegistry) -> None:
    driver = TopologyTestDriver(_app(registry, "fail"))
    orders = driver.input_topic("orders")
    orders.pipe_input("k0", {"id": "o0", "qty": 1})
    with pytest.raises(RecordError) as failure:
        orders.pipe_raw(b"k", b"\x00" + (777).to_bytes(4, "big") + b"\x04o1\x02")
    message = str(failure.value)
    assert message.startswith("deserialization failed at topic 'orders', partition 0, offset 1")
    assert "unknown schema id 777" in message and "subject 'orders-value'" in message


def test_a_value_that_does_not_fit_the_output_schema_is_a_processing_error(registry: SchemaRegistry) -> None:
    driver = TopologyTestDriver(_app(registry, "dead_letter"))
    orders = driver.input_topic("orders")
    orders.pipe_input("k0", {"id": "o0", "qty": 0})  # maps to {}: no field of shop.Doubled
    dlq = driver.output_topic("orders-app-dlq", key_serde=sk.serdes.Bytes(),
                              value_serde=sk.serdes.Bytes()).read_records()
    assert len(dlq) == 1
    headers = _headers(dlq[0])
    assert headers["streamkit.error.stage"] == "processing"
    assert "topic 'doubled' value, subject 'doubled-value', schema id" in headers["streamkit.error.message"]
    assert dlq[0].value == Avro(ORDER, registry=registry).for_topic("orders", False).serialize({"id": "o0", "qty": 0})
