"""The Protobuf serde on the in-process registry: message indexes, imports registered as
references under their import paths, generic reading, wrong messages refused."""
from __future__ import annotations

import pytest

from streamkit.errors import ConfigError, SerializationError
from streamkit.schemas.model import SchemaReference
from streamkit.schemas.protobuf_text import message_class
from streamkit.schemas.registry.service import SchemaRegistry
from streamkit.serdes import Protobuf

MONEY = """syntax = "proto3";
package shop;
message Money { string currency = 1; int64 cents = 2; }
"""
ORDER = """syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "shop/money.proto";
message Order {
  string id = 1;
  int32 qty = 2;
  google.protobuf.Timestamp at = 3;
  shop.Money price = 4;
  message Line { string sku = 1; int32 qty = 2; }
  repeated Line lines = 5;
}
message Refund { string order_id = 1; }
"""
IMPORTS = {"shop/money.proto": MONEY}
Order = message_class(ORDER, "shop.Order", IMPORTS)
Line = message_class(ORDER, "shop.Order.Line", IMPORTS)
Refund = message_class(ORDER, "shop.Refund", IMPORTS)


@pytest.fixture
def registry() -> SchemaRegistry:
    with SchemaRegistry.in_memory() as reg:
        yield reg


def _order() -> "Order":
    order = Order(id="o1", qty=2)
    order.at.seconds = 1_700_000_000
    order.price.currency, order.price.cents = "EUR", 1250
    order.lines.add(sku="apple", qty=2)
    return order


def test_first_message_is_written_with_the_single_zero_index_byte(registry: SchemaRegistry) -> None:
    serde = Protobuf(Order, registry=registry).for_topic("orders", False)
    order = _order()
    data = serde.serialize(order)
    schema_id = registry.latest_version("orders-value").schema_id
    assert data == b"\x00" + schema_id.to_bytes(4, "big") + b"\x00" + order.SerializeToString()
    assert serde.deserialize(data) == order


def test_imports_are_registered_first_under_their_import_paths(registry: SchemaRegistry) -> None:
    Protobuf(Order, registry=registry).for_topic("orders", False).serialize(_order())
    assert registry.subjects() == ["google/protobuf/timestamp.proto", "orders-value", "shop/money.proto"]
    registered = registry.latest_version("orders-value").schema
    assert set(registered.references) == {
        SchemaReference("google/protobuf/timestamp.proto", "google/protobuf/timestamp.proto", 1),
        SchemaReference("shop/money.proto", "shop/money.proto", 1)}
    assert "message Order" in registered.schema_str  # .proto text, as Java clients register
    with SchemaRegistry.in_memory() as other:
        Protobuf(Order, registry=other, skip_known_types=True).for_topic("orders", False).serialize(_order())
        assert other.subjects() == ["orders-value", "shop/money.proto"]


def test_nested_and_later_messages_carry_their_index_path(registry: SchemaRegistry) -> None:
    lines = Protobuf(Line, registry=registry).for_topic("lines", False)
    refunds = Protobuf(Refund, registry=registry).for_topic("refunds", False)
    line_bytes = lines.serialize({"sku": "pear", "qty": 3})  # dicts are parsed into the class
    refund_bytes = refunds.serialize(Refund(order_id="o1"))
    assert line_bytes[5:8] == b"\x04\x00\x00"  # [0, 0]: 2 indexes, zigzag
    assert refund_bytes[5:7] == b"\x02\x02"  # [1]
    assert lines.deserialize(line_bytes) == Line(sku="pear", qty=3)
    assert refunds.deserialize(refund_bytes) == Refund(order_id="o1")
    generic = Protobuf(registry=registry).for_topic("any", False)  # classes from the registered .proto
    decoded = generic.deserialize(line_bytes)
    assert decoded.DESCRIPTOR.full_name == "shop.Order.Line" and (decoded.sku, decoded.qty) == ("pear", 3)
    assert generic.deserialize(refund_bytes).order_id == "o1"


def test_a_record_of_another_message_is_refused(registry: SchemaRegistry) -> None:
    refund_bytes = Protobuf(Refund, registry=registry).for_topic("orders", False).serialize(Refund(order_id="o1"))
    serde = Protobuf(Order, registry=registry).for_topic("orders", False)
    with pytest.raises(SerializationError, match=r"the record is a shop.Refund \(message indexes \[1\]\), "
                                                 r"this serde reads shop.Order"):
        serde.deserialize(refund_bytes)
    with pytest.raises(SerializationError, match=r"message indexes \[7\] name no message"):
        serde.deserialize(refund_bytes[:5] + b"\x02\x0e" + refund_bytes[7:])
    with pytest.raises(SerializationError, match=r"\(topic 'orders' value, subject 'orders-value', schema id \d+\): "
                                                 "truncated Protobuf message-index list"):
        serde.deserialize(refund_bytes[:6] + b"\xff\xff\xff")
    order_bytes = serde.serialize(_order())
    with pytest.raises(SerializationError, match="the payload does not decode with schema id"):
        serde.deserialize(order_bytes[:6] + b"\xff\xff\xff")
    with pytest.raises(SerializationError, match="expected a shop.Order message or a dict"):
        serde.serialize(Refund(order_id="o1"))


def test_record_strategy_uses_the_message_full_name(registry: SchemaRegistry) -> None:
    Protobuf(Line, registry=registry, subject_name_strategy="record",
             skip_known_types=True).for_topic("t", False).serialize(Line(sku="a"))
    assert "shop.Order.Line" in registry.subjects()


def test_only_message_classes_are_accepted() -> None:
    with pytest.raises(ConfigError, match="message class"):
        Protobuf(dict, registry="embedded")
