"""The Schema Registry with its state in a topic of a Kafka-protocol broker (Tansu by
default): the service in-process, and ``streamkit registry serve`` processes that
register at the same time and agree on ids, and keep their state over a restart."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from confluent_kafka.schema_registry import Schema as ConfluentSchema
from confluent_kafka.schema_registry import SchemaRegistryClient

from streamkit.schemas.model import CompatibilityLevel, Schema
from streamkit.schemas.registry.broker_log import registry_on_broker
from streamkit.schemas.registry.state import claim_key, claim_value

from ..schemas.registry_servers import RegistryProcess
from ..schemas.test_registry_processes import check_agreement, record, register_concurrently
from .broker import KafkaTestBroker


def avro(name: str) -> Schema:
    return Schema(record(name))


def test_service_on_kafka_survives_a_restart_and_instances_agree(kafka: KafkaTestBroker,
                                                                  unique_name: Callable[[str], str]) -> None:
    topic = unique_name("_schemas")
    with registry_on_broker(kafka.url, topic=topic) as a, registry_on_broker(kafka.url, topic=topic) as b:
        first = a.register("orders-value", avro("Order"))
        assert b.register("returns-value", avro("Order")) == first  # b reads a's record first
        a.set_compatibility("FULL", "orders-value")
        # b claims id 1 for another schema without having read the log: that claim loses
        b._log.append([(claim_key("stale", "late-value", 1), claim_value("late-value", 1, first, avro("Late")))])
        late = b.register("late-value", avro("Late"))
        assert late == first + 1 and a.schema_by_id(late) == b.schema_by_id(late)
        a.delete_subject("returns-value")
    with registry_on_broker(kafka.url, topic=topic) as again:
        assert again.subjects() == ["late-value", "orders-value"]
        assert again.subjects(deleted=True) == ["late-value", "orders-value", "returns-value"]
        assert again.compatibility("orders-value") is CompatibilityLevel.FULL
        assert json.loads(again.schema_by_id(first).schema_str) == json.loads(record("Order"))
        assert again._state.rejected == {}  # b's next write removed the lost claim
        meta = again._log._transport.admin.topic(topic)
    assert meta.partitions == 1


def test_two_servers_on_kafka_agree_and_keep_state(kafka: KafkaTestBroker, unique_name: Callable[[str], str],
                                                   tmp_path: Path) -> None:
    topic = unique_name("_schemas")
    first = RegistryProcess(kafka.url, tmp_path / "first.log", topic=topic)
    second = RegistryProcess(kafka.url, tmp_path / "second.log", topic=topic)
    try:
        SchemaRegistryClient({"url": first.url}).set_compatibility(level="NONE")
        results = register_concurrently([first.url, second.url], per_thread=4)
        check_agreement([first.url, second.url], results)
    finally:
        codes = (first.stop(), second.stop())
    assert codes == (0, 0), first.log() + second.log()
    restarted = RegistryProcess(kafka.url, tmp_path / "restarted.log", topic=topic)
    try:
        check_agreement([restarted.url], results)
        client = SchemaRegistryClient({"url": restarted.url})
        assert client.get_compatibility() == "NONE"
        assert client.register_schema("after-value", ConfluentSchema(record("After"), "AVRO")) == \
            max(results.values()) + 1
    finally:
        assert restarted.stop() == 0
