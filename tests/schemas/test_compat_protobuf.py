"""Confluent's Protobuf compatibility rules, one table per rule family. Each row is an
earlier schema, a new one and the verdicts Confluent's documentation and its Protobuf
``SchemaDiff`` give: BACKWARD (the new schema reads the old data: reader=new,
writer=old) and FORWARD (reader=old, writer=new)."""
from __future__ import annotations

from typing import Dict, List, Tuple

import pytest

from streamkit.schemas.compatibility import incompatibilities
from streamkit.schemas.compatibility import protobuf as compat
from streamkit.schemas.model import (CompatibilityLevel, InvalidSchema, Schema, SchemaNotFound,
                                     SchemaReference, SchemaType)

OK, NO = True, False


def _proto(body: str, *, syntax: str = "proto3", package: str = "shop") -> Schema:
    head = f'syntax = "{syntax}";\n' + (f"package {package};\n" if package else "")
    return Schema(head + body, SchemaType.PROTOBUF)


def _no_references(ref: SchemaReference) -> Schema:
    raise SchemaNotFound(f"no schema {ref.subject} v{ref.version}")


def _verdicts(old: Schema, new: Schema, resolve=_no_references) -> Tuple[List[str], List[str]]:
    backward = compat.read_incompatibilities(new, old, resolve)
    forward = compat.read_incompatibilities(old, new, resolve)
    return backward, forward


def _check(old: Schema, new: Schema, backward_ok: bool, forward_ok: bool, resolve=_no_references) -> None:
    backward, forward = _verdicts(old, new, resolve)
    assert (not backward) == backward_ok, f"BACKWARD: {backward}"
    assert (not forward) == forward_ok, f"FORWARD: {forward}"


# --- fields ------------------------------------------------------------------------------

FIELDS = [
    ("field added", "message Order { string id = 1; }",
     "message Order { string id = 1; double price = 2; }", OK, OK),
    ("field removed", "message Order { string id = 1; double price = 2; }",
     "message Order { string id = 1; }", OK, OK),
    ("field renamed", "message Order { string id = 1; }", "message Order { string key = 1; }", OK, OK),
    ("number moved to a free number (a removal and an addition)", "message Order { string id = 1; }",
     "message Order { string id = 2; }", OK, OK),
    ("numbers swapped between types", "message Order { string id = 1; int64 qty = 2; }",
     "message Order { int64 qty = 1; string id = 2; }", NO, NO),
    ("scalar to message", "message Order { string total = 1; } message Money { int64 units = 1; }",
     "message Order { Money total = 1; } message Money { int64 units = 1; }", NO, NO),
    ("scalar to map", "message Order { string tags = 1; }",
     "message Order { map<string, string> tags = 1; }", NO, NO),
    ("message to another message", "message Order { A a = 1; } message A { int32 x = 1; } message B { int32 x = 1; }",
     "message Order { B a = 1; } message A { int32 x = 1; } message B { int32 x = 1; }", NO, NO),
    ("map value type changed", "message Order { map<string, int64> qty = 1; }",
     "message Order { map<string, string> qty = 1; }", NO, NO),
    ("map value within a wire group", "message Order { map<string, int32> qty = 1; }",
     "message Order { map<string, int64> qty = 1; }", OK, OK),
]


@pytest.mark.parametrize("name, old, new, backward_ok, forward_ok", FIELDS, ids=[row[0] for row in FIELDS])
def test_fields(name: str, old: str, new: str, backward_ok: bool, forward_ok: bool) -> None:
    _check(_proto(old), _proto(new), backward_ok, forward_ok)


# --- scalar types: Confluent's wire-compatible groups ------------------------------------

GROUPS = [("int32", "uint32", OK), ("int32", "int64", OK), ("uint64", "bool", OK), ("int64", "uint64", OK),
          ("sint32", "sint64", OK), ("string", "bytes", OK), ("fixed32", "sfixed32", OK),
          ("fixed64", "sfixed64", OK),
          ("int32", "sint32", NO), ("int64", "fixed64", NO), ("float", "double", NO), ("string", "int32", NO),
          ("bytes", "fixed32", NO), ("fixed32", "fixed64", NO), ("sint64", "sfixed64", NO), ("bool", "string", NO),
          ("int32", "Color", OK), ("Color", "uint64", OK), ("Color", "string", NO), ("Color", "Size", OK)]


@pytest.mark.parametrize("old_type, new_type, ok", GROUPS, ids=[f"{a}->{b}" for a, b, _ in GROUPS])
def test_scalar_type_changes(old_type: str, new_type: str, ok: bool) -> None:
    enums = "enum Color { RED = 0; } enum Size { S = 0; }"
    _check(_proto(f"message M {{ {old_type} v = 1; }} {enums}"), _proto(f"message M {{ {new_type} v = 1; }} {enums}"),
           ok, ok)


def test_a_type_change_names_the_field_and_both_types() -> None:
    backward, forward = _verdicts(_proto("message Order { double price = 3; }"),
                                  _proto("message Order { string price = 3; }"))
    assert backward == ["shop.Order.price: type changed from double to string"]
    assert forward == ["shop.Order.price: type changed from string to double"]


# --- labels ------------------------------------------------------------------------------

LABELS = [
    ("proto3 implicit to repeated (numeric)", "message M { int32 v = 1; }", "message M { repeated int32 v = 1; }",
     "proto3", OK, OK),
    ("proto3 optional to repeated (numeric)", "message M { optional int32 v = 1; }",
     "message M { repeated int32 v = 1; }", "proto3", NO, NO),
    ("proto3 optional to repeated (string)", "message M { optional string v = 1; }",
     "message M { repeated string v = 1; }", "proto3", OK, OK),
    ("proto3 implicit to optional", "message M { int64 v = 1; }", "message M { optional int64 v = 1; }",
     "proto3", OK, OK),
    ("proto2 optional to repeated (numeric)", "message M { optional int32 v = 1; }",
     "message M { repeated int32 v = 1; }", "proto2", NO, NO),
    ("proto2 optional to required (numeric)", "message M { optional int32 v = 1; }",
     "message M { required int32 v = 1; }", "proto2", NO, NO),
    ("proto2 optional to repeated (bytes)", "message M { optional bytes v = 1; }",
     "message M { repeated bytes v = 1; }", "proto2", OK, OK),
    ("proto2 optional to repeated (message)", "message M { optional N v = 1; } message N { optional int32 x = 1; }",
     "message M { repeated N v = 1; } message N { optional int32 x = 1; }", "proto2", OK, OK),
]


@pytest.mark.parametrize("name, old, new, syntax, backward_ok, forward_ok", LABELS, ids=[row[0] for row in LABELS])
def test_labels(name: str, old: str, new: str, syntax: str, backward_ok: bool, forward_ok: bool) -> None:
    _check(_proto(old, syntax=syntax), _proto(new, syntax=syntax), backward_ok, forward_ok)


# --- required fields (proto2) ------------------------------------------------------------

REQUIRED = [
    ("required field added", "message M { optional int32 a = 1; }",
     "message M { optional int32 a = 1; required string b = 2; }", NO, NO),
    ("required field removed", "message M { optional int32 a = 1; required string b = 2; }",
     "message M { optional int32 a = 1; }", NO, NO),
    ("optional field added", "message M { required int32 a = 1; }",
     "message M { required int32 a = 1; optional string b = 2; }", OK, OK),
]


@pytest.mark.parametrize("name, old, new, backward_ok, forward_ok", REQUIRED, ids=[row[0] for row in REQUIRED])
def test_required_fields(name: str, old: str, new: str, backward_ok: bool, forward_ok: bool) -> None:
    _check(_proto(old, syntax="proto2"), _proto(new, syntax="proto2"), backward_ok, forward_ok)


# --- messages, enums and the package -----------------------------------------------------

TYPES = [
    ("message added", "message A { int32 x = 1; }", "message A { int32 x = 1; } message B { int32 y = 1; }", OK, NO),
    ("message removed", "message A { int32 x = 1; } message B { int32 y = 1; }", "message A { int32 x = 1; }",
     NO, OK),
    ("message renamed", "message A { int32 x = 1; }", "message Renamed { int32 x = 1; }", NO, NO),
    ("messages reordered (index moves)", "message A { int32 x = 1; } message B { int32 y = 1; }",
     "message B { int32 y = 1; } message A { int32 x = 1; }", OK, OK),
    ("nested message removed", "message A { message In { int32 z = 1; } int32 x = 1; }",
     "message A { int32 x = 1; }", NO, OK),
    ("nested message changed incompatibly", "message A { message In { int32 z = 1; } In in = 1; }",
     "message A { message In { string z = 1; } In in = 1; }", NO, NO),
    ("map field removed (its entry type goes too)", "message A { map<string, int32> m = 1; int32 x = 2; }",
     "message A { int32 x = 2; }", OK, OK),
    ("enum constant added", "enum E { A = 0; } message M { E e = 1; }",
     "enum E { A = 0; B = 1; } message M { E e = 1; }", OK, OK),
    ("enum constant removed and renumbered", "enum E { A = 0; B = 1; } message M { E e = 1; }",
     "enum E { A = 0; C = 2; } message M { E e = 1; }", OK, OK),
    ("enum removed", "enum E { A = 0; } message M { int32 e = 1; }", "message M { int32 e = 1; }", OK, OK),
]


@pytest.mark.parametrize("name, old, new, backward_ok, forward_ok", TYPES, ids=[row[0] for row in TYPES])
def test_messages_and_enums(name: str, old: str, new: str, backward_ok: bool, forward_ok: bool) -> None:
    _check(_proto(old), _proto(new), backward_ok, forward_ok)


def test_a_map_change_is_reported_once_at_the_map_field() -> None:
    backward, _ = _verdicts(_proto("message Order { map<string, int64> qty = 1; }"),
                            _proto("message Order { map<string, string> qty = 1; }"))
    assert backward == ["shop.Order.qty.value: type changed from int64 to string"]


def test_package_change_is_incompatible_both_ways() -> None:
    old, new = _proto("message A { int32 x = 1; }"), _proto("message A { int32 x = 1; }", package="store")
    backward, forward = _verdicts(old, new)
    assert backward == ["package changed from 'shop' to 'store'"]
    assert forward == ["package changed from 'store' to 'shop'"]


def test_recursive_messages_terminate() -> None:
    old = _proto("message Node { string name = 1; repeated Node children = 2; }")
    new = _proto("message Node { string name = 1; repeated Node children = 2; int32 depth = 3; }")
    _check(old, new, OK, OK)
    _check(old, _proto("message Node { int64 name = 1; repeated Node children = 2; }"), NO, NO)


# --- oneofs ------------------------------------------------------------------------------

ONEOFS = [
    ("oneof added with new fields", "message M { int32 a = 1; }",
     "message M { int32 a = 1; oneof pay { string card = 2; string iban = 3; } }", OK, OK),
    ("field added to a oneof", "message M { oneof pay { string card = 2; } }",
     "message M { oneof pay { string card = 2; string iban = 3; } }", OK, NO),
    ("one existing field moved into a new oneof", "message M { string card = 2; }",
     "message M { oneof pay { string card = 2; string iban = 3; } }", OK, OK),  # forward: the oneof is removed
    ("two existing fields moved into one oneof", "message M { string card = 2; string iban = 3; }",
     "message M { oneof pay { string card = 2; string iban = 3; } }", NO, OK),
    ("field moved into a oneof holding an earlier oneof's field",
     "message M { string card = 2; oneof pay { string iban = 3; } }",
     "message M { oneof pay2 { string card = 2; string iban = 3; } }", NO, OK),
    ("oneof renamed", "message M { oneof pay { string card = 2; } }",
     "message M { oneof payment { string card = 2; } }", OK, OK),
    ("type change inside a renamed oneof", "message M { oneof pay { string card = 2; } }",
     "message M { oneof payment { int64 card = 2; } }", NO, NO),
]


@pytest.mark.parametrize("name, old, new, backward_ok, forward_ok", ONEOFS, ids=[row[0] for row in ONEOFS])
def test_oneofs(name: str, old: str, new: str, backward_ok: bool, forward_ok: bool) -> None:
    _check(_proto(old), _proto(new), backward_ok, forward_ok)


# --- references, base64, validation, the level dispatch ----------------------------------

MONEY_V1 = 'syntax = "proto3"; package common; message Money { string currency = 1; int64 units = 2; }'
MONEY_V2 = 'syntax = "proto3"; package common; message Money { bytes currency = 1; int64 units = 2; int32 nanos = 3; }'
MONEY_V3 = 'syntax = "proto3"; package common; message Money { double currency = 1; int64 units = 2; }'
REFS: Dict[Tuple[str, int], Schema] = {("money", v): Schema(text, SchemaType.PROTOBUF)
                                       for v, text in [(1, MONEY_V1), (2, MONEY_V2), (3, MONEY_V3)]}


def _order(money_version: int) -> Schema:
    return Schema('syntax = "proto3"; package shop; import "common/money.proto"; '
                  "message Order { string id = 1; common.Money total = 2; }", SchemaType.PROTOBUF,
                  (SchemaReference("common/money.proto", "money", money_version),))


def _from_registry(ref: SchemaReference) -> Schema:
    return REFS[(ref.subject, ref.version)]


def test_referenced_messages_are_compared_through_the_fields_using_them() -> None:
    _check(_order(1), _order(2), OK, OK, _from_registry)
    backward, _ = _verdicts(_order(1), _order(3), _from_registry)
    assert backward == ["shop.Order.total.currency: type changed from string to double"]


def test_a_base64_schema_compares_with_its_text_form() -> None:
    from streamkit.schemas.protobuf_text import parse, to_serialized

    text = _proto("message Order { string id = 1; double price = 2; }")
    encoded = Schema(to_serialized(parse(text.schema_str).file), SchemaType.PROTOBUF)
    _check(text, encoded, OK, OK)
    backward, _ = _verdicts(encoded, _proto("message Order { string id = 1; string price = 2; }"))
    assert backward == ["shop.Order.price: type changed from double to string"]


def test_validate_accepts_what_compiles_and_names_what_does_not() -> None:
    compat.validate(_order(1), _from_registry)
    with pytest.raises(InvalidSchema, match='"Missing" is not defined'):
        compat.validate(_proto("message A { Missing m = 1; }"), _no_references)
    with pytest.raises(SchemaNotFound):
        compat.validate(_order(9), _no_references)


def test_the_levels_use_both_directions() -> None:
    old = _proto("message A { int32 x = 1; } message B { int32 y = 1; }")
    new = _proto("message A { int32 x = 1; }")
    assert incompatibilities(CompatibilityLevel.BACKWARD, new, [old], _no_references)
    assert incompatibilities(CompatibilityLevel.FORWARD, new, [old], _no_references) == []
    assert incompatibilities(CompatibilityLevel.FULL, new, [old], _no_references)
    assert incompatibilities(CompatibilityLevel.NONE, new, [old], _no_references) == []
