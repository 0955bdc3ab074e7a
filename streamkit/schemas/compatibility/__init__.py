"""Schema validation and compatibility checking, one module per schema format.

Every format module (:mod:`.avro`, :mod:`.json_schema`, :mod:`.protobuf`) offers two
functions:

- ``validate(schema, resolve) -> None``: raises :class:`~..model.InvalidSchema` when
  ``schema`` is not a schema of its format (``resolve`` turns a
  :class:`~..model.SchemaReference` into the referenced :class:`~..model.Schema`);
- ``read_incompatibilities(reader, writer, resolve) -> list[str]``: why data written
  with ``writer`` cannot be read with ``reader`` (empty: it can).

:func:`incompatibilities` applies a :class:`~..model.CompatibilityLevel` with them:
BACKWARD checks reader=new against writer=the latest earlier version (every earlier
version when transitive), FORWARD reader=earlier against writer=new, FULL both, NONE
nothing. Format modules are imported on first use: each loads its own library.
"""
from __future__ import annotations

import importlib
from types import ModuleType
from typing import Callable, List, Sequence

from ..model import CompatibilityLevel, Schema, SchemaReference, SchemaType

__all__ = ["Resolver", "format_module", "validate", "incompatibilities"]

Resolver = Callable[[SchemaReference], Schema]
"""Turns a reference into the schema it names (raises a RegistryError if there is none)."""

_MODULES = {SchemaType.AVRO: "avro", SchemaType.JSON: "json_schema", SchemaType.PROTOBUF: "protobuf"}


def format_module(schema_type: SchemaType) -> ModuleType:
    """The module checking schemas of ``schema_type`` (imported on first use)."""
    return importlib.import_module(f"{__name__}.{_MODULES[SchemaType(schema_type)]}")


def validate(schema: Schema, resolve: Resolver) -> None:
    """Raise :class:`~..model.InvalidSchema` unless ``schema`` is valid for its format."""
    format_module(schema.schema_type).validate(schema, resolve)


def incompatibilities(level: CompatibilityLevel, new: Schema, earlier: Sequence[Schema],
                      resolve: Resolver) -> List[str]:
    """Why ``new`` may not follow ``earlier`` (a subject's live versions, oldest first)
    under ``level``; empty when it may."""
    level = CompatibilityLevel(level)
    if level is CompatibilityLevel.NONE or not earlier:
        return []
    targets = list(earlier) if level.transitive else [earlier[-1]]
    found: List[str] = []
    for old in targets:
        if old.schema_type != new.schema_type:
            found.append(f"the schema type changed from {old.schema_type.value} to {new.schema_type.value}")
            continue
        module = format_module(new.schema_type)
        if level.checks_backward:
            found.extend(f"the new schema cannot read data of an earlier one: {why}"
                         for why in module.read_incompatibilities(new, old, resolve))
        if level.checks_forward:
            found.extend(f"an earlier schema cannot read data of the new one: {why}"
                         for why in module.read_incompatibilities(old, new, resolve))
    return _unique(found)


def _unique(messages: Sequence[str]) -> List[str]:
    seen: dict = {}
    for message in messages:
        seen.setdefault(message, None)
    return list(seen)
