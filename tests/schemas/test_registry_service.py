"""The registry's logic (streamkit.schemas.registry.SchemaRegistry) on both logs it runs
on: a list in memory and the ``_schemas`` topic of an embedded broker directory."""
from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Iterator, List

import pytest

from streamkit.schemas.model import (CompatibilityLevel, IncompatibleSchema, InvalidSchema, RegistryError, Schema,
                                     SchemaNotFound, SchemaReference, SubjectNotFound, VersionNotFound)
from streamkit.schemas.registry import SchemaRegistry
from streamkit.schemas.registry.broker_log import registry_on_broker
from streamkit.schemas.registry.state import claim_key, claim_value
from streamkit.schemas.registry_client import RegistryClient


def record(*fields: dict, name: str = "Order") -> Schema:
    return Schema(json.dumps({"type": "record", "name": name, "namespace": "shop", "fields": list(fields)}))


V1 = record({"name": "id", "type": "long"})
V2_WITH_DEFAULT = record({"name": "id", "type": "long"}, {"name": "note", "type": "string", "default": ""})
V2_NO_DEFAULT = record({"name": "id", "type": "long"}, {"name": "note", "type": "string"})
V3_DROPS_NOTE_ADDS_QTY = record({"name": "id", "type": "long"}, {"name": "qty", "type": "int", "default": 0})


@pytest.fixture(params=["memory", "embedded"])
def registry(request, tmp_path: Path) -> Iterator[SchemaRegistry]:
    if request.param == "memory":
        reg = SchemaRegistry.in_memory()
    else:
        reg = registry_on_broker(f"embedded://{tmp_path}/broker")
    yield reg
    reg.close()


def test_is_a_registry_client(registry: SchemaRegistry) -> None:
    assert isinstance(registry, RegistryClient)


def test_ids_are_shared_across_subjects_and_registering_again_is_a_no_op(registry: SchemaRegistry) -> None:
    first = registry.register("orders-value", V1)
    assert registry.register("orders-value", V1) == first
    assert registry.register("returns-value", V1) == first
    assert registry.versions("orders-value") == [1]
    # whitespace does not make another schema
    spaced = Schema(json.dumps(json.loads(V1.schema_str), indent=4))
    assert registry.register("orders-value", spaced) == first
    assert registry.schema_by_id(first).schema_str == json.dumps(json.loads(V1.schema_str), separators=(",", ":"))
    assert registry.versions_of_id(first) == [("orders-value", 1), ("returns-value", 1)]
    second = registry.register("orders-value", V2_WITH_DEFAULT)
    assert second == first + 1
    latest = registry.latest_version("orders-value")
    assert (latest.subject, latest.version, latest.schema_id) == ("orders-value", 2, second)
    assert registry.version("orders-value", 1).schema_id == first
    assert registry.lookup("orders-value", V1).version == 1
    assert registry.subjects() == ["orders-value", "returns-value"]


def test_missing_things_raise_confluents_errors(registry: SchemaRegistry) -> None:
    with pytest.raises(SubjectNotFound):
        registry.latest_version("nope")
    with pytest.raises(SchemaNotFound):
        registry.schema_by_id(99)
    registry.register("s", V1)
    with pytest.raises(VersionNotFound):
        registry.version("s", 7)
    with pytest.raises(SchemaNotFound):
        registry.lookup("s", V2_WITH_DEFAULT)
    with pytest.raises(SubjectNotFound):
        registry.lookup("other", V1)
    with pytest.raises(InvalidSchema):
        registry.register("s", Schema('{"type": "record", "name": "X"}'))
    with pytest.raises(InvalidSchema):
        registry.register("s", Schema("not json"))
    with pytest.raises(RegistryError) as bad_version:
        registry.version("s", "zero")
    assert bad_version.value.error_code == 42202


@pytest.mark.parametrize("level, accepted, rejected", [
    ("BACKWARD", [V2_WITH_DEFAULT], [V2_NO_DEFAULT]),
    ("FORWARD", [V2_NO_DEFAULT, V2_WITH_DEFAULT], []),
    ("FULL", [V2_WITH_DEFAULT], [V2_NO_DEFAULT]),
    ("NONE", [V2_NO_DEFAULT], []),
])
def test_compatibility_levels(registry: SchemaRegistry, level: str, accepted: List[Schema],
                              rejected: List[Schema]) -> None:
    registry.set_compatibility(level, "s")
    registry.register("s", V1)
    for schema in rejected:
        with pytest.raises(IncompatibleSchema) as exc:
            registry.register("s", schema)
        assert exc.value.error_code == 409 and "note" in exc.value.message
        assert registry.test_compatibility("s", schema)
    for schema in accepted:
        assert registry.test_compatibility("s", schema) == []
    assert registry.register("s", accepted[0]) > 0


def test_forward_rejects_removing_a_field_without_default() -> None:
    with SchemaRegistry.in_memory() as registry:
        registry.set_compatibility("FORWARD")
        registry.register("s", V2_NO_DEFAULT)
        with pytest.raises(IncompatibleSchema):
            registry.register("s", V1)  # old readers need 'note', the new writer drops it


def test_transitive_levels_check_every_earlier_version(registry: SchemaRegistry) -> None:
    registry.set_compatibility(CompatibilityLevel.FORWARD_TRANSITIVE, "t")
    registry.set_compatibility(CompatibilityLevel.FORWARD, "n")
    for subject in ("t", "n"):
        registry.register(subject, V2_NO_DEFAULT)
        registry.register(subject, record({"name": "id", "type": "long"},
                                          {"name": "note", "type": "string", "default": ""}))
    # v3 drops 'note': v2 (note with default) reads it, v1 (note without default) does not
    assert registry.register("n", V3_DROPS_NOTE_ADDS_QTY) > 0
    with pytest.raises(IncompatibleSchema):
        registry.register("t", V3_DROPS_NOTE_ADDS_QTY)
    assert registry.test_compatibility("t", V3_DROPS_NOTE_ADDS_QTY, 2) == []
    assert registry.test_compatibility("t", V3_DROPS_NOTE_ADDS_QTY, 1)


def test_config_global_and_per_subject(registry: SchemaRegistry) -> None:
    assert registry.compatibility() is CompatibilityLevel.BACKWARD
    assert registry.subject_compatibility("s") is None
    registry.set_compatibility("full")
    registry.set_compatibility("NONE", "s")
    assert registry.compatibility() is CompatibilityLevel.FULL
    assert registry.compatibility("s") is CompatibilityLevel.NONE
    assert registry.compatibility("other") is CompatibilityLevel.FULL
    assert registry.delete_compatibility("s") is CompatibilityLevel.NONE
    assert registry.compatibility("s") is CompatibilityLevel.FULL
    with pytest.raises(RegistryError) as exc:
        registry.set_compatibility("SIDEWAYS")
    assert exc.value.error_code == 42203


def test_soft_and_hard_deletes(registry: SchemaRegistry) -> None:
    first = registry.register("s", V1)
    registry.register("s", V2_WITH_DEFAULT)
    registry.register("keep", V1)
    with pytest.raises(RegistryError) as exc:
        registry.delete_version("s", 1, permanent=True)
    assert exc.value.error_code == 40407
    assert registry.delete_version("s", 1) == 1
    assert registry.versions("s") == [2]
    assert registry.versions("s", deleted=True) == [1, 2]
    assert registry.version("s", 1, deleted=True).schema_id == first
    with pytest.raises(VersionNotFound):
        registry.version("s", 1)
    with pytest.raises(RegistryError) as exc:
        registry.delete_version("s", 1)
    assert exc.value.error_code == 40406
    assert registry.delete_version("s", 1, permanent=True) == 1
    assert registry.versions("s", deleted=True) == [2]
    assert registry.schema_by_id(first)  # still used by 'keep'
    assert registry.delete_subject("s") == [2]
    assert registry.subjects() == ["keep"] and registry.subjects(deleted=True) == ["keep", "s"]
    with pytest.raises(RegistryError) as exc:
        registry.delete_subject("s")
    assert exc.value.error_code == 40404
    with pytest.raises(RegistryError) as exc:
        registry.delete_subject("keep", permanent=True)
    assert exc.value.error_code == 40405
    assert registry.delete_subject("s", permanent=True) == [2]
    assert registry.subjects(deleted=True) == ["keep"]
    registry.delete_subject("keep")
    registry.delete_subject("keep", permanent=True)
    with pytest.raises(SchemaNotFound):
        registry.schema_by_id(first)
    # ids are never given out twice
    assert registry.register("new", V3_DROPS_NOTE_ADDS_QTY) == first + 2


def test_re_registering_a_soft_deleted_schema_makes_a_new_version_with_the_same_id(registry: SchemaRegistry) -> None:
    first = registry.register("s", V1)
    registry.delete_subject("s")
    assert registry.register("s", V1) == first
    assert registry.versions("s") == [2]


def test_references_are_resolved_by_subject_and_version(registry: SchemaRegistry) -> None:
    address = Schema(json.dumps({"type": "record", "name": "Address", "namespace": "shop",
                                 "fields": [{"name": "city", "type": "string"}]}))
    registry.register("address", address)
    customer = Schema(json.dumps({"type": "record", "name": "Customer", "namespace": "shop",
                                  "fields": [{"name": "home", "type": "shop.Address"}]}),
                      references=(SchemaReference("shop.Address", "address", 1),))
    schema_id = registry.register("customer", customer)
    assert registry.schema_by_id(schema_id).references == (SchemaReference("shop.Address", "address", 1),)
    assert registry.referenced_by("address", 1) == [schema_id]
    with pytest.raises(RegistryError) as exc:
        registry.delete_subject("address")
    assert exc.value.error_code == 42206
    dangling = Schema(customer.schema_str, references=(SchemaReference("shop.Address", "address", 9),))
    with pytest.raises(InvalidSchema):
        registry.register("other", dangling)
    with pytest.raises(InvalidSchema):  # the named type is unknown without the reference
        registry.register("other", Schema(customer.schema_str))


def test_concurrent_registrations_in_one_process_get_distinct_ids(registry: SchemaRegistry) -> None:
    schemas = [record({"name": f"f{i}", "type": "int"}, name=f"R{i}") for i in range(8)]
    ids = {}

    def register(i: int) -> None:
        ids[i] = registry.register(f"s{i % 2}", schemas[i])

    registry.set_compatibility("NONE")
    threads = [threading.Thread(target=register, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(ids.values()) == list(range(1, 9))
    assert sorted(registry.versions("s0") + registry.versions("s1")) == [1, 1, 2, 2, 3, 3, 4, 4]


def test_a_claim_that_lost_is_retried_with_the_next_id(tmp_path: Path) -> None:
    """Two instances on one log: a claim for an id another instance's claim took first is
    rejected, and its writer retries with the next id; both instances agree."""
    url = f"embedded://{tmp_path}/broker"
    with registry_on_broker(url) as a, registry_on_broker(url) as b:
        assert a.register("x", V1) == 1
        # b has not read a's record yet when it claims: emulate it by appending b's stale
        # claim (id 1, version 1 of 'y', another schema) straight to the log
        b._log.append([(claim_key("stale", "y", 1), claim_value("y", 1, 1, V2_NO_DEFAULT))])
        assert b.register("y", V2_NO_DEFAULT) == 2
        assert a.schema_by_id(2) == b.schema_by_id(2)
        assert a.latest_version("y").schema_id == 2
        # the lost claim is in neither view, and b's next write removed it from the log
        assert a._state.rejected == {} and b._state.rejected == {}
        a.delete_subject("x")
        a.delete_subject("x", permanent=True)
        assert b.versions_of_id(2) == [("y", 1)]


def test_every_write_removes_lost_claims_first(tmp_path: Path) -> None:
    """A claim that lost, left by a writer that died before removing it, is tombstoned by
    the next write of any instance, so replaying a compacted log cannot revive it."""
    url = f"embedded://{tmp_path}/broker"
    with registry_on_broker(url) as registry:
        registry.register("x", V1)
        registry._log.append([(claim_key("dead", "x", 1), claim_value("x", 1, 1, V2_NO_DEFAULT))])
        assert registry.subjects() == ["x"] and registry._state.rejected == {"dead": claim_key("dead", "x", 1)}
        registry.set_compatibility("NONE")
        assert registry._state.rejected == {}
        registry.delete_subject("x")
        registry.delete_subject("x", permanent=True)
    with registry_on_broker(url) as again:  # replay: the lost claim never wins
        assert again.subjects(deleted=True) == [] and again.compatibility() is CompatibilityLevel.NONE


def test_state_survives_a_restart_on_the_broker(tmp_path: Path) -> None:
    url = f"embedded://{tmp_path}/broker"
    with registry_on_broker(url) as registry:
        registry.register("s", V1)
        registry.register("s", V2_WITH_DEFAULT)
        registry.set_compatibility("FULL", "s")
        registry.delete_version("s", 1)
    with registry_on_broker(url) as again:
        assert again.versions("s") == [2]
        assert again.compatibility("s") is CompatibilityLevel.FULL
        assert again.schema_by_id(1) == Schema(json.dumps(json.loads(V1.schema_str), separators=(",", ":")))
        assert again.register("s", V3_DROPS_NOTE_ADDS_QTY) == 3
    from streamkit.broker import EmbeddedBroker

    with EmbeddedBroker(f"{tmp_path}/broker") as broker:
        meta = broker.topic("_schemas")
    assert meta.partitions == 1 and meta.config.get("cleanup.policy") == "compact"


def _view(registry: SchemaRegistry) -> dict:
    state = registry._state
    versions = {s: [(v.version, v.schema_id, v.schema.schema_str, v.deleted) for v in state.versions(s, deleted=True)]
                for s in state.subjects}
    return {"versions": versions,
            "ids": dict(state.schemas), "configs": dict(state.configs), "max_id": state.max_id}


def test_compaction_of_the_log_keeps_the_view(tmp_path: Path) -> None:
    """Compacting the ``_schemas`` topic (small segments, tombstones dropped at once) after
    lost claims, soft and hard deletes and config changes leaves a log whose replay gives
    the same view, and the same next id."""
    from streamkit.broker import EmbeddedBroker

    directory = tmp_path / "broker"
    with EmbeddedBroker(directory) as broker:
        broker.create_topic("_schemas", 1, {"cleanup.policy": "compact", "segment.bytes": "400",
                                            "delete.retention.ms": "0"})
    url = f"embedded://{directory}"
    with registry_on_broker(url) as registry:
        registry.set_compatibility("NONE")
        registry.register("a", V1)
        registry._log.append([(claim_key("lost", "a", 1), claim_value("a", 1, 1, V2_NO_DEFAULT))])
        registry.register("a", V2_NO_DEFAULT)
        registry.register("b", V2_NO_DEFAULT)
        registry.delete_version("a", 1)
        registry.delete_version("a", 1, permanent=True)
        registry.register("c", V3_DROPS_NOTE_ADDS_QTY)
        registry.delete_subject("c")
        registry.delete_subject("c", permanent=True)
        registry.set_compatibility("FULL", "b")
        registry.set_compatibility("FORWARD", "b")
        registry.set_compatibility("BACKWARD")
        registry.register("a", V1)
        before = _view(registry)
    with EmbeddedBroker(directory) as broker:
        removed = sum(stats.get("records_removed", 0) for stats in
                      broker.run_housekeeping(now_ms=2 ** 41).values())
    assert removed > 0
    with registry_on_broker(url) as again:
        assert _view(again) == before
        assert again.register("d", record({"name": "d", "type": "int"}, name="D")) == before["max_id"] + 1
