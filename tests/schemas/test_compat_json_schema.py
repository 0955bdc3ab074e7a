"""Confluent's JSON Schema compatibility rules, one table per rule family. Each row is
an earlier schema, a new one and the verdicts Confluent gives (its documentation, the
"Understanding JSON Schema Compatibility" article and its JSON Schema ``SchemaDiff``):
BACKWARD (the new schema reads what the old one wrote: reader=new, writer=old) and
FORWARD (reader=old, writer=new)."""
from __future__ import annotations

import json
from typing import Any, Dict, List, Tuple

import pytest

from streamkit.schemas.compatibility import incompatibilities
from streamkit.schemas.compatibility import json_schema as compat
from streamkit.schemas.model import (CompatibilityLevel, InvalidSchema, Schema, SchemaNotFound,
                                     SchemaReference, SchemaType)

OK, NO = True, False


def _json(raw: Any, *references: SchemaReference) -> Schema:
    return Schema(json.dumps(raw), SchemaType.JSON, references)


def _no_references(ref: SchemaReference) -> Schema:
    raise SchemaNotFound(f"no schema {ref.subject} v{ref.version}")


def _verdicts(old: Any, new: Any, resolve=_no_references) -> Tuple[List[str], List[str]]:
    old_schema = old if isinstance(old, Schema) else _json(old)
    new_schema = new if isinstance(new, Schema) else _json(new)
    return (compat.read_incompatibilities(new_schema, old_schema, resolve),
            compat.read_incompatibilities(old_schema, new_schema, resolve))


def _check(old: Any, new: Any, backward_ok: bool, forward_ok: bool, resolve=_no_references) -> None:
    backward, forward = _verdicts(old, new, resolve)
    assert (not backward) == backward_ok, f"BACKWARD: {backward}"
    assert (not forward) == forward_ok, f"FORWARD: {forward}"


def _obj(properties: Dict[str, Any], **keywords: Any) -> Dict[str, Any]:
    return {"type": "object", "properties": properties, **keywords}


STR, NUM, INT = {"type": "string"}, {"type": "number"}, {"type": "integer"}
CLOSED = {"additionalProperties": False}


def _table(rows: List[tuple]) -> Any:
    return pytest.mark.parametrize("name, old, new, backward_ok, forward_ok", rows, ids=[row[0] for row in rows])


# --- types -------------------------------------------------------------------------------

TYPES = [
    ("number to string", NUM, STR, NO, NO),
    ("integer to number (widened)", INT, NUM, OK, NO),
    ("string to string-or-null", STR, {"type": ["string", "null"]}, OK, NO),
    ("string to anyOf string, integer", STR, {"anyOf": [STR, INT]}, OK, NO),
    ("string to true", STR, True, OK, NO),
    ("{} to string", {}, STR, NO, OK),
    ("false to string", False, STR, OK, NO),
    ("boolean to null", {"type": "boolean"}, {"type": "null"}, NO, NO),
    ("object to array", {"type": "object"}, {"type": "array"}, NO, NO),
    ("string to a one-branch anyOf of string", STR, {"anyOf": [STR]}, OK, OK),
    ("annotations change freely", {"type": "string", "title": "a", "description": "x", "default": "d"},
     {"type": "string", "title": "b", "description": "y", "default": "e", "$comment": "new"}, OK, OK),
]


@_table(TYPES)
def test_types(name: str, old: Any, new: Any, backward_ok: bool, forward_ok: bool) -> None:
    _check(old, new, backward_ok, forward_ok)


def test_a_type_change_names_the_path_and_both_types() -> None:
    backward, forward = _verdicts(_obj({"price": NUM}), _obj({"price": STR}))
    assert backward == ["#/properties/price: type changed from number to string"]
    assert forward == ["#/properties/price: type changed from string to number"]


# --- objects: open, closed and partially open content models -----------------------------

OBJECTS = [
    # open (additionalProperties absent or true): the writer may have sent any property
    ("open: property added", _obj({"a": STR}), _obj({"a": STR, "b": STR}), NO, OK),
    ("open: property with an empty schema added", _obj({"a": STR}), _obj({"a": STR, "b": {}}), OK, OK),
    ("open: property removed", _obj({"a": STR, "b": STR}), _obj({"a": STR}), OK, NO),
    ("open (explicit true): property added", _obj({"a": STR}, additionalProperties=True),
     _obj({"a": STR, "b": STR}, additionalProperties=True), NO, OK),
    # closed (additionalProperties false)
    ("closed: optional property added", _obj({"a": STR}, **CLOSED), _obj({"a": STR, "b": STR}, **CLOSED), OK, NO),
    ("closed: required property added", _obj({"a": STR}, **CLOSED),
     _obj({"a": STR, "b": STR}, required=["b"], **CLOSED), NO, NO),
    ("closed: required property with a default added", _obj({"a": STR}, **CLOSED),
     _obj({"a": STR, "b": {"type": "string", "default": "x"}}, required=["b"], **CLOSED), OK, NO),
    ("closed: property removed", _obj({"a": STR, "b": STR}, **CLOSED), _obj({"a": STR}, **CLOSED), NO, OK),
    ("closed: property that was false removed", _obj({"a": STR, "b": False}, **CLOSED), _obj({"a": STR}, **CLOSED),
     OK, OK),
    # partially open (additionalProperties or patternProperties give a schema)
    ("partial: covered property added", _obj({"a": STR}, additionalProperties=STR),
     _obj({"a": STR, "b": STR}, additionalProperties=STR), OK, OK),
    ("partial: uncovered property added", _obj({"a": STR}, additionalProperties=STR),
     _obj({"a": STR, "b": INT}, additionalProperties=STR), NO, NO),
    ("partial by pattern: covered property added", _obj({"a": STR}, patternProperties={"^s_": STR}),
     _obj({"a": STR, "s_x": STR}, patternProperties={"^s_": STR}), OK, OK),
    ("partial by pattern: uncovered property added", _obj({"a": STR}, patternProperties={"^s_": STR}),
     _obj({"a": STR, "n_x": INT}, patternProperties={"^s_": STR}), NO, OK),  # other names may hold anything
    # the content model itself
    ("additionalProperties true to false", _obj({"a": STR}), _obj({"a": STR}, **CLOSED), NO, OK),
    ("additionalProperties true to a schema", _obj({"a": STR}), _obj({"a": STR}, additionalProperties=STR), NO, OK),
    ("additionalProperties schema widened", _obj({}, additionalProperties=INT), _obj({}, additionalProperties=NUM),
     OK, NO),
    # required
    ("property becomes required", _obj({"a": STR}), _obj({"a": STR}, required=["a"]), NO, OK),
    ("property becomes required with a default", _obj({"a": STR}),
     _obj({"a": {"type": "string", "default": ""}}, required=["a"]), OK, OK),
    # property counts and dependencies
    ("maxProperties added", _obj({}), _obj({}, maxProperties=3), NO, OK),
    ("minProperties decreased", _obj({}, minProperties=2), _obj({}, minProperties=1), OK, NO),
    ("dependency added", _obj({"a": STR, "b": STR}), _obj({"a": STR, "b": STR}, dependencies={"a": ["b"]}), NO, OK),
    ("dependentRequired narrowed", _obj({"a": STR, "b": STR, "c": STR}, dependentRequired={"a": ["b", "c"]}),
     _obj({"a": STR, "b": STR, "c": STR}, dependentRequired={"a": ["b"]}), OK, NO),
    ("nested property type changed", _obj({"o": _obj({"x": INT})}), _obj({"o": _obj({"x": STR})}), NO, NO),
]


@_table(OBJECTS)
def test_objects(name: str, old: Any, new: Any, backward_ok: bool, forward_ok: bool) -> None:
    _check(old, new, backward_ok, forward_ok)


def test_object_messages_name_the_property_and_the_content_model() -> None:
    backward, forward = _verdicts(_obj({"a": STR}, **CLOSED), _obj({"a": STR, "b": STR}, required=["b"], **CLOSED))
    assert backward == ["#/properties/b: required property added without a default"]
    assert forward == ["#/properties/b: property removed from a closed content model (additionalProperties false)"]
    backward, _ = _verdicts(_obj({"o": _obj({"x": INT})}), _obj({"o": _obj({"x": STR})}))
    assert backward == ["#/properties/o/properties/x: type changed from integer to string"]


# --- strings, numbers, enums -------------------------------------------------------------

SCALARS = [
    ("maxLength added", STR, {"type": "string", "maxLength": 10}, NO, OK),
    ("maxLength increased", {"type": "string", "maxLength": 5}, {"type": "string", "maxLength": 10}, OK, NO),
    ("minLength increased", {"type": "string", "minLength": 1}, {"type": "string", "minLength": 2}, NO, OK),
    ("pattern added", STR, {"type": "string", "pattern": "^[a-z]+$"}, NO, OK),
    ("pattern changed", {"type": "string", "pattern": "^a"}, {"type": "string", "pattern": "^b"}, NO, NO),
    ("maximum decreased", {"type": "number", "maximum": 10}, {"type": "number", "maximum": 5}, NO, OK),
    ("minimum added", NUM, {"type": "number", "minimum": 0}, NO, OK),
    ("minimum decreased", {"type": "number", "minimum": 0}, {"type": "number", "minimum": -1}, OK, NO),
    ("exclusiveMinimum increased", {"type": "number", "exclusiveMinimum": 0}, {"type": "number", "exclusiveMinimum": 1},
     NO, OK),
    ("exclusiveMaximum removed", {"type": "number", "exclusiveMaximum": 9}, NUM, OK, NO),
    ("maximum made exclusive", {"type": "number", "maximum": 9}, {"type": "number", "exclusiveMaximum": 9}, NO, OK),
    ("exclusiveMaximum to a larger maximum", {"type": "number", "exclusiveMaximum": 9},
     {"type": "number", "maximum": 9}, OK, NO),
    ("multipleOf to a multiple", {"type": "integer", "multipleOf": 2}, {"type": "integer", "multipleOf": 4}, NO, OK),
    ("multipleOf to a coprime", {"type": "integer", "multipleOf": 2}, {"type": "integer", "multipleOf": 3}, NO, NO),
    ("multipleOf decimals", {"type": "number", "multipleOf": 0.5}, {"type": "number", "multipleOf": 0.25}, OK, NO),
    ("enum value added", {"enum": ["a", "b"]}, {"enum": ["a", "b", "c"]}, OK, NO),
    ("enum value removed", {"enum": ["a", "b"]}, {"enum": ["a"]}, NO, OK),
    ("enum changed", {"enum": ["a", "b"]}, {"enum": ["a", "c"]}, NO, NO),
    ("const changed", {"const": 1}, {"const": 2}, NO, NO),
    ("typed enum dropped", {"type": "string", "enum": ["a"]}, STR, OK, NO),
    ("typed enum extended", {"type": "string", "enum": ["a"]}, {"type": "string", "enum": ["a", "b"]}, OK, NO),
]


@_table(SCALARS)
def test_strings_numbers_and_enums(name: str, old: Any, new: Any, backward_ok: bool, forward_ok: bool) -> None:
    _check(old, new, backward_ok, forward_ok)


def test_constraint_messages_give_the_limits() -> None:
    backward, forward = _verdicts({"type": "number", "maximum": 10}, {"type": "number", "maximum": 5.5})
    assert backward == ["#/maximum: upper limit tightened from <= 10 to <= 5.5"]
    assert forward == []
    backward, _ = _verdicts({"enum": ["a", "b"]}, {"enum": ["a"]})
    assert backward == ['#/enum: values removed: "b"']
    _, forward = _verdicts({"type": "string", "enum": ["a"]}, {"type": "string", "enum": ["a", "b"]})
    assert forward == ['#/enum: values removed: "b"']


def test_draft4_boolean_exclusive_limits_count_as_limits() -> None:
    draft4 = "http://json-schema.org/draft-04/schema#"
    old = {"$schema": draft4, "type": "number", "maximum": 10}
    new = {"$schema": draft4, "type": "number", "maximum": 10, "exclusiveMaximum": True}
    _check(old, new, NO, OK)
    backward, _ = _verdicts(old, new)
    assert backward == ["#/exclusiveMaximum: upper limit tightened from <= 10 to < 10"]
    _check({"type": "number", "exclusiveMaximum": 10}, new, OK, OK)  # the same limit in draft 7's spelling


# --- arrays ------------------------------------------------------------------------------

ARRAYS = [
    ("items type changed", {"type": "array", "items": STR}, {"type": "array", "items": INT}, NO, NO),
    ("items widened", {"type": "array", "items": INT}, {"type": "array", "items": NUM}, OK, NO),
    ("items schema added", {"type": "array"}, {"type": "array", "items": STR}, NO, OK),
    ("minItems added", {"type": "array"}, {"type": "array", "minItems": 1}, NO, OK),
    ("maxItems decreased", {"type": "array", "maxItems": 5}, {"type": "array", "maxItems": 3}, NO, OK),
    ("uniqueItems added", {"type": "array"}, {"type": "array", "uniqueItems": True}, NO, OK),
    ("tuple item added to an open tuple", {"type": "array", "items": [STR]}, {"type": "array", "items": [STR, INT]},
     NO, OK),
    ("tuple item added to a closed tuple", {"type": "array", "items": [STR], "additionalItems": False},
     {"type": "array", "items": [STR, INT], "additionalItems": False}, OK, NO),
    ("prefixItems item type changed", {"type": "array", "prefixItems": [STR, INT]},
     {"type": "array", "prefixItems": [STR, STR]}, NO, NO),
    ("prefixItems closed by items false", {"type": "array", "prefixItems": [STR]},
     {"type": "array", "prefixItems": [STR], "items": False}, NO, OK),
]


@_table(ARRAYS)
def test_arrays(name: str, old: Any, new: Any, backward_ok: bool, forward_ok: bool) -> None:
    _check(old, new, backward_ok, forward_ok)


# --- combined schemas and not ------------------------------------------------------------

BOOL = {"type": "boolean"}
COMBINED = [
    ("oneOf branch added", {"oneOf": [STR, INT]}, {"oneOf": [STR, INT, BOOL]}, OK, NO),
    ("anyOf branch removed", {"anyOf": [STR, INT]}, {"anyOf": [STR]}, NO, OK),
    ("allOf branch removed", {"allOf": [_obj({"a": STR}), {"required": ["a"]}]}, {"allOf": [_obj({"a": STR})]},
     OK, NO),
    ("oneOf to anyOf", {"oneOf": [STR, INT]}, {"anyOf": [STR, INT]}, OK, NO),
    ("allOf to oneOf", {"allOf": [STR, {"maxLength": 3}]}, {"oneOf": [STR, {"maxLength": 3}]}, NO, NO),
    ("oneOf branch replaced", {"oneOf": [STR, INT]}, {"oneOf": [STR, BOOL]}, NO, NO),
    ("oneOf branch widened", {"oneOf": [STR, INT]}, {"oneOf": [STR, NUM]}, OK, NO),
    ("oneOf branches reordered", {"oneOf": [STR, INT]}, {"oneOf": [INT, STR]}, OK, OK),
    ("not widened", {"not": STR}, {"not": {"type": ["string", "null"]}}, NO, OK),
]


@_table(COMBINED)
def test_combined_schemas(name: str, old: Any, new: Any, backward_ok: bool, forward_ok: bool) -> None:
    _check(old, new, backward_ok, forward_ok)


# --- references --------------------------------------------------------------------------

NODE_V1 = {"definitions": {"node": _obj({"value": INT, "next": {"$ref": "#/definitions/node"}})},
           "$ref": "#/definitions/node"}
NODE_V2 = {"definitions": {"node": _obj({"value": NUM, "next": {"$ref": "#/definitions/node"}})},
           "$ref": "#/definitions/node"}
NODE_V3 = {"$defs": {"node": _obj({"value": STR, "next": {"$ref": "#/$defs/node"}})}, "$ref": "#/$defs/node"}


def test_local_and_recursive_refs_are_followed() -> None:
    _check(NODE_V1, NODE_V2, OK, NO)
    backward, _ = _verdicts(NODE_V1, NODE_V3)
    assert backward == ["#/properties/value: type changed from integer to string"]


def test_keywords_beside_ref_count_from_draft_2019_09_on() -> None:
    defs = {"name": STR}
    old = {"definitions": defs, "type": "object", "properties": {"n": {"$ref": "#/definitions/name"}}}
    new = {"definitions": defs, "type": "object", "properties": {"n": {"$ref": "#/definitions/name", "maxLength": 3}}}
    _check(old, new, OK, OK)  # draft 7: maxLength beside $ref is ignored
    dialect = {"$schema": "https://json-schema.org/draft/2020-12/schema"}
    backward, forward = _verdicts({**dialect, **old}, {**dialect, **new})
    assert backward == ["#/properties/n: constraints added: allOf [string, string] (the writer had allOf [string])"]
    assert forward == []


CUSTOMER_V1 = {"$id": "https://example.com/customer.json", **_obj({"name": STR})}
CUSTOMER_V2 = {"$id": "https://example.com/customer.json", **_obj({"name": STR, "age": INT})}
REGISTRY = {("customer", 1): _json(CUSTOMER_V1), ("customer", 2): _json(CUSTOMER_V2)}


def _from_registry(ref: SchemaReference) -> Schema:
    return REGISTRY[(ref.subject, ref.version)]


def _order(version: int, ref: str = "customer.json") -> Schema:
    return _json({"$id": "https://example.com/order.json", **_obj({"customer": {"$ref": ref}})},
                 SchemaReference("customer.json", "customer", version))


def test_references_are_followed_by_name_and_by_id() -> None:
    backward, forward = _verdicts(_order(1), _order(2), _from_registry)
    assert backward == ["#/properties/customer/properties/age: property added to an open content model "
                        "(the writer allowed any value for it)"]
    assert forward == []
    _check(_order(1, "https://example.com/customer.json"), _order(2), NO, OK, _from_registry)


# --- validation and the level dispatch ---------------------------------------------------

@pytest.mark.parametrize("text, message", [
    ("{not json", "not JSON"),
    ("[1, 2]", "an object or a boolean"),
    ('{"type": 5}', "invalid JSON schema at #/type"),
    ('{"type": "string", "minLength": -1}', "invalid JSON schema at #/minLength"),
    ('{"type": "number", "maximum": 3, "exclusiveMaximum": true}', "invalid JSON schema"),  # draft 7 by default
    ('{"$ref": "#/definitions/missing"}', "unresolvable $ref '#/definitions/missing'"),
])
def test_invalid_schemas_are_refused_with_the_reason(text: str, message: str) -> None:
    with pytest.raises(InvalidSchema) as caught:
        compat.validate(Schema(text, SchemaType.JSON), _no_references)
    assert message in caught.value.message


def test_valid_schemas_pass_with_their_drafts_and_references() -> None:
    compat.validate(_json({"$schema": "http://json-schema.org/draft-04/schema#", "type": "number",
                           "maximum": 3, "exclusiveMaximum": True}), _no_references)
    compat.validate(_json({"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "array",
                           "prefixItems": [STR], "items": False}), _no_references)
    compat.validate(_json(True), _no_references)
    compat.validate(_order(1), _from_registry)
    with pytest.raises(SchemaNotFound):
        compat.validate(_order(7), _no_references)


def test_the_levels_apply_both_directions_transitively() -> None:
    v1, v2, v3 = _json(_obj({"a": STR})), _json(_obj({"a": STR, "b": {}})), _json(_obj({"a": STR, "b": INT}))
    assert incompatibilities(CompatibilityLevel.BACKWARD, v3, [v1, v2], _no_references)
    assert incompatibilities(CompatibilityLevel.FORWARD, v3, [v1, v2], _no_references) == []
    assert incompatibilities(CompatibilityLevel.FULL_TRANSITIVE, v2, [v1], _no_references) == []
