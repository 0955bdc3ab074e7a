"""The Avro serde on the in-process registry: wire format, subjects, registration,
evolution on read, typed records, caching, binding to an app's topics."""
from __future__ import annotations

import json
import time
from datetime import timedelta
from dataclasses import dataclass

import pytest

import streamkit as sk
from streamkit.errors import ConfigError, SerializationError
from streamkit.schemas.model import Schema
from streamkit.schemas.registry.service import SchemaRegistry
from streamkit.serdes import Avro
from streamkit.serdes.registry_serde import UNKNOWN_ID_RETRY_S
from streamkit.testing import TopologyTestDriver

ORDER_V1 = {"type": "record", "name": "Order", "namespace": "shop",
            "fields": [{"name": "id", "type": "string"}, {"name": "qty", "type": "int"}]}
ORDER_V2 = {**ORDER_V1, "fields": ORDER_V1["fields"] + [{"name": "note", "type": "string", "default": ""}]}


@pytest.fixture
def registry() -> SchemaRegistry:
    with SchemaRegistry.in_memory() as reg:
        yield reg


def test_writes_magic_byte_id_and_avro_binary(registry: SchemaRegistry) -> None:
    serde = Avro(ORDER_V1, registry=registry).for_topic("orders", False)
    data = serde.serialize({"id": "o1", "qty": 3})
    schema_id = registry.lookup("orders-value", Schema(json.dumps(ORDER_V1, separators=(",", ":")))).schema_id
    # Avro binary: "o1" = zigzag length 2 (0x04) + bytes; 3 = zigzag 6
    assert data == b"\x00" + schema_id.to_bytes(4, "big") + b"\x04o1\x06"
    assert serde.deserialize(data) == {"id": "o1", "qty": 3}
    assert serde.serialize(None) is None and serde.deserialize(None) is None


@pytest.mark.parametrize("strategy, is_key, subject", [
    ("topic", False, "orders-value"), ("topic", True, "orders-key"),
    ("record", False, "shop.Order"), ("topic_record", True, "orders-shop.Order")])
def test_subject_name_strategies(registry: SchemaRegistry, strategy: str, is_key: bool, subject: str) -> None:
    serde = Avro(ORDER_V1, registry=registry, subject_name_strategy=strategy).for_topic("orders", is_key)
    serde.serialize({"id": "o1", "qty": 1})
    assert registry.subjects() == [subject]
    assert serde.subject() == subject


def test_without_auto_register_the_schema_must_be_registered(registry: SchemaRegistry) -> None:
    serde = Avro(ORDER_V1, registry=registry, auto_register=False).for_topic("orders", False)
    with pytest.raises(SerializationError, match=r"subject 'orders-value'.*register the schema first"):
        serde.serialize({"id": "o1", "qty": 1})
    assert registry.subjects() == []
    client = serde.client()
    asked = client.round_trips
    for _ in range(50):  # a refusal is remembered for a second, not asked again per record
        with pytest.raises(SerializationError, match="not asked again within 1 s"):
            serde.serialize({"id": "o1", "qty": 1})
    assert client.round_trips == asked
    schema_id = registry.register("orders-value", Schema(json.dumps(ORDER_V1)))
    time.sleep(UNKNOWN_ID_RETRY_S)
    data = serde.serialize({"id": "o1", "qty": 1})
    assert data[1:5] == schema_id.to_bytes(4, "big")


def test_schema_evolution_on_read(registry: SchemaRegistry) -> None:
    old_writer = Avro(ORDER_V1, registry=registry).for_topic("orders", False)
    old_record = old_writer.serialize({"id": "o1", "qty": 1})
    new_serde = Avro(ORDER_V2, registry=registry).for_topic("orders", False)
    new_record = new_serde.serialize({"id": "o2", "qty": 2, "note": "gift"})
    assert old_record[1:5] != new_record[1:5]
    assert registry.versions("orders-value") == [1, 2]
    # the new reader fills the added field's default; the old reader skips it
    assert new_serde.deserialize(old_record) == {"id": "o1", "qty": 1, "note": ""}
    assert old_writer.deserialize(new_record) == {"id": "o2", "qty": 2}
    # a reader without a schema reads each record with its writer schema
    generic = Avro(registry=registry).for_topic("orders", False)
    assert generic.deserialize(old_record) == {"id": "o1", "qty": 1}
    assert generic.deserialize(new_record) == {"id": "o2", "qty": 2, "note": "gift"}


def test_use_latest_version_writes_with_the_subjects_latest_schema(registry: SchemaRegistry) -> None:
    registry.register("orders-value", Schema(json.dumps(ORDER_V1)))
    v2 = registry.register("orders-value", Schema(json.dumps(ORDER_V2)))
    serde = Avro(registry=registry, use_latest_version=True).for_topic("orders", False)
    data = serde.serialize({"id": "o1", "qty": 1, "note": "n"})
    assert data[1:5] == v2.to_bytes(4, "big")
    assert serde.deserialize(data) == {"id": "o1", "qty": 1, "note": "n"}
    with pytest.raises(ConfigError, match="use_latest_version=True"):
        Avro(registry=registry).for_topic("orders", False).serialize({"id": "x", "qty": 1})


@dataclass
class Order:
    id: str
    qty: int


def test_record_type_decodes_to_and_encodes_from_a_dataclass(registry: SchemaRegistry) -> None:
    serde = Avro(ORDER_V1, registry=registry, record_type=Order).for_topic("orders", False)
    data = serde.serialize(Order("o1", 2))
    assert serde.deserialize(data) == Order("o1", 2)
    assert serde.serialize({"id": "o1", "qty": 2}) == data  # dicts still encode
    with pytest.raises(ConfigError, match="dataclass"):
        Avro(ORDER_V1, registry=registry, record_type=dict)


def test_registry_is_asked_once_per_subject_and_id_not_per_record(registry: SchemaRegistry) -> None:
    writer = Avro(ORDER_V1, registry=registry).for_topic("orders", False)
    reader = Avro(ORDER_V2, registry=registry).for_topic("orders", False)
    records = [writer.serialize({"id": f"o{i}", "qty": i}) for i in range(1000)]
    fast = reader.fast_deserializer()
    with pytest.raises(KeyError):
        fast(records[0])  # an id not seen yet: the runtime falls back to deserialize()
    values = [reader.deserialize(records[0])] + [fast(r) for r in records[1:]]
    assert values[999] == {"id": "o999", "qty": 999, "note": ""}
    client = writer.client()
    assert client is reader.client()  # one cache per registry, shared by every serde
    assert client.round_trips == 2  # one registration, one schema fetched by id
    foreign = b"\x00" + (31337).to_bytes(4, "big") + b"\x04o1\x02"
    for _ in range(100):
        with pytest.raises(SerializationError, match="unknown schema id 31337"):
            reader.deserialize(foreign)
    assert client.round_trips == 3  # an unknown id is asked once (again after a second), not per record


def test_fast_deserializer_refuses_what_deserialize_refuses(registry: SchemaRegistry) -> None:
    serde = Avro(ORDER_V1, registry=registry).for_topic("orders", False)
    good = serde.serialize({"id": "o1", "qty": 1})
    fast = serde.fast_deserializer()
    serde.deserialize(good)
    assert fast(good) == serde.deserialize(good)
    for bad in (b"\x01" + good[1:], b""):
        with pytest.raises(Exception):
            fast(bad)
        with pytest.raises(SerializationError):
            serde.deserialize(bad)


def test_binding_copies_the_serde_and_never_changes_it(registry: SchemaRegistry) -> None:
    serde = Avro(ORDER_V1, registry=registry)
    bound = serde.for_topic("orders", False)
    assert bound is not serde and serde.topic is None and bound.topic == "orders"
    assert bound == serde.for_topic("orders", False) and hash(bound) == hash(serde.for_topic("orders", False))
    assert bound != serde.for_topic("orders", True)
    with pytest.raises(ConfigError, match="needs the topic"):
        serde.serialize({"id": "o1", "qty": 1})


def test_embedded_registry_needs_an_app_to_bind_it() -> None:
    serde = Avro(ORDER_V1, registry="embedded")
    with pytest.raises(ConfigError, match=r"registry='embedded' but is not bound to an app's broker.*app\.topic"):
        serde.serialize({"id": "o1", "qty": 1})
    with pytest.raises(ConfigError, match="not a registry"):
        Avro(ORDER_V1, registry="localhost:8081")
    with pytest.raises(ConfigError, match="invalid Avro schema"):
        Avro({"type": "record", "name": "X", "fields": [{"name": "a", "type": "nope"}]}, registry="embedded")


def test_an_app_on_the_test_driver_binds_embedded_serdes_to_its_topics() -> None:
    app = sk.App("avro-app")
    totals = {"type": "record", "name": "Total", "namespace": "shop",
              "fields": [{"name": "id", "type": "string"}, {"name": "total", "type": "long"}]}
    app.topic("orders", value_serde=Avro(ORDER_V1, registry="embedded"))
    app.topic("totals", value_serde=Avro(totals, registry="embedded"))

    @app.topology
    def build(b):
        (b.stream("orders").group_by_key().aggregate(lambda: 0, lambda k, v, agg: agg + v["qty"], name="sum")
         .to_stream().map_values(lambda total: {"id": "all", "total": total}).to("totals"))

    driver = TopologyTestDriver(app)
    orders = driver.input_topic("orders")
    for i, qty in enumerate([2, 3, 4]):
        orders.pipe_input("k", {"id": f"o{i}", "qty": qty}, timestamp=i)
    raw = driver.output_topic("totals", key_serde=sk.serdes.Bytes(), value_serde=sk.serdes.Bytes()).read_values()
    assert len(raw) == 3 and all(value[:1] == b"\x00" for value in raw)  # wire format: magic byte, id
    reader = driver.topology.topics["totals"].value_serde  # bound to 'totals' on the driver's registry
    assert [reader.deserialize(value) for value in raw] == [
        {"id": "all", "total": 2}, {"id": "all", "total": 5}, {"id": "all", "total": 9}]
    assert reader.subject() == "totals-value"
    # serdes given to the driver's topic handles are bound to the topic and the driver's registry too
    orders.pipe_input("k", {"id": "o3", "qty": 1}, timestamp=3)
    generic = driver.output_topic("totals", value_serde=Avro(registry="embedded"))
    assert generic.read_values() == [{"id": "all", "total": 10}]


def test_windowed_keys_and_stores_with_avro_keys_are_bound_too(registry: SchemaRegistry) -> None:
    app = sk.App("avro-windows")
    users = Avro('"string"', registry=registry)
    app.topic("clicks", key_serde=users, value_serde=sk.serdes.Json())

    @app.topology
    def build(b):
        b.stream("clicks").group_by_key(key_serde=users).windowed_by(sk.TumblingWindows(timedelta(seconds=10))) \
            .count(name="per-10s").to_stream().to("counts")

    driver = TopologyTestDriver(app)
    for user, ts in [("ann", 1_000), ("bob", 2_000), ("ann", 3_000)]:
        driver.input_topic("clicks").pipe_input(user, {"ts": ts}, timestamp=ts)
    counts = driver.output_topic("counts").read_key_values()
    assert [(w.key, w.start, n) for w, n in counts] == [("ann", 0, 1), ("bob", 0, 1), ("ann", 0, 2)]
    # the windowed sink's key, the store's keys (its changelog) and the source: one subject each
    assert registry.subjects() == ["avro-windows-per-10s-changelog-key", "clicks-key", "counts-key"]


def test_schemas_with_references_are_resolved_through_the_registry(registry: SchemaRegistry) -> None:
    from streamkit.schemas.model import SchemaReference

    money = {"type": "record", "name": "Money", "namespace": "shop",
             "fields": [{"name": "currency", "type": "string"}, {"name": "cents", "type": "long"}]}
    registry.register("shop.Money", Schema(json.dumps(money)))
    priced = {"type": "record", "name": "Priced", "namespace": "shop",
              "fields": [{"name": "id", "type": "string"}, {"name": "price", "type": "shop.Money"}]}
    registry.register("priced-value", Schema(json.dumps(priced), references=[
        SchemaReference("shop.Money", "shop.Money", 1)]))
    writer = Avro(registry=registry, use_latest_version=True).for_topic("priced", False)
    value = {"id": "p1", "price": {"currency": "EUR", "cents": 250}}
    data = writer.serialize(value)
    assert Avro(registry=registry).for_topic("priced", False).deserialize(data) == value


@pytest.mark.parametrize("how", ["join", "outer_join"])
def test_a_stream_stream_join_buffers_each_side_under_its_own_stores_subject(registry: SchemaRegistry,
                                                                             how: str) -> None:
    payment = {"type": "record", "name": "Payment", "namespace": "shop",
               "fields": [{"name": "amount", "type": "int"}]}
    orders, payments = Avro(ORDER_V1, registry=registry), Avro(payment, registry=registry)
    app = sk.App("avro-join")
    app.topic("orders", value_serde=orders)
    app.topic("payments", value_serde=payments)

    @app.topology
    def build(b):
        joined = getattr(b.stream("orders"), how)
        joined(b.stream("payments"), lambda o, p: {"id": o and o["id"], "paid": p and p["amount"]},
                                sk.JoinWindows.of(timedelta(seconds=10)), name="paid",
                                value_serde=orders, other_value_serde=payments).to("paid-orders")

    driver = TopologyTestDriver(app)
    driver.input_topic("orders").pipe_input("k1", {"id": "o1", "qty": 2}, timestamp=1_000)
    driver.input_topic("payments").pipe_input("k1", {"amount": 40}, timestamp=2_000)
    driver.input_topic("payments").pipe_input("k2", {"amount": 7}, timestamp=3_000)  # no order: unmatched
    assert driver.output_topic("paid-orders").read_values()[0] == {"id": "o1", "paid": 40}
    subjects = registry.subjects()
    buffers = [s for s in subjects if s.startswith("avro-join-") and s.endswith("-changelog-value")]
    assert len(buffers) == 2  # one subject per join buffer: two record types never share a subject
    assert {registry.latest_version(s).schema.schema_str.count("Payment") for s in buffers} == {0, 1}
    assert {"orders-value", "payments-value"} <= set(subjects)
