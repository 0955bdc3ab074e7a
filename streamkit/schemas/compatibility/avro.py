"""Avro schemas: parsing with references, and Avro's schema resolution rules.

The rules are the ``avro`` package's (Apache Avro's reference implementation for
Python): :class:`avro.compatibility.ReaderWriterCompatibilityChecker` decides whether
a reader schema can read what a writer schema wrote (fields added with defaults,
promotions int -> long -> float -> double, enum symbols, union branches, aliases ...);
nothing of those rules is reimplemented here.

References: a schema may use named types (records, enums, fixed) defined by other
registered schemas; each reference's schema is parsed first, depth first, into the
same name table, so the referencing schema can name them.
"""
from __future__ import annotations

import json
from typing import Callable, List, Set, Tuple

import avro.errors
import avro.name
import avro.schema
from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

from ..model import InvalidSchema, Schema, SchemaReference

__all__ = ["parse", "validate", "read_incompatibilities"]

Resolver = Callable[[SchemaReference], Schema]


def parse(schema: Schema, resolve: Resolver) -> avro.schema.Schema:
    """The parsed Avro schema, its references' named types known; ``InvalidSchema`` if
    the text is not an Avro schema."""
    names = avro.name.Names()
    _load_references(schema, resolve, names, set())
    return _parse_text(schema.schema_str, names)


def _load_references(schema: Schema, resolve: Resolver, names: avro.name.Names,
                     seen: Set[Tuple[str, int]]) -> None:
    for reference in schema.references:
        where = (reference.subject, reference.version)
        if where in seen:
            continue
        seen.add(where)
        referenced = resolve(reference)
        _load_references(referenced, resolve, names, seen)
        _parse_text(referenced.schema_str, names, context=f" (reference {reference.name!r})")


def _parse_text(text: str, names: avro.name.Names, context: str = "") -> avro.schema.Schema:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise InvalidSchema(f"Invalid schema{context}: not JSON: {exc}") from None
    default_namespace = names.default_namespace
    try:
        return avro.schema.make_avsc_object(data, names)
    except (avro.errors.AvroException, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise InvalidSchema(f"Invalid schema{context}: {exc}") from None
    finally:
        names.default_namespace = default_namespace


def validate(schema: Schema, resolve: Resolver) -> None:
    """Raise ``InvalidSchema`` unless ``schema`` parses as Avro (references resolved)."""
    parse(schema, resolve)


def read_incompatibilities(reader: Schema, writer: Schema, resolve: Resolver) -> List[str]:
    """Why data written with ``writer`` cannot be read with ``reader`` under Avro's
    resolution rules, one message per incompatibility (``TYPE at /location: detail``)."""
    result = ReaderWriterCompatibilityChecker().get_compatibility(parse(reader, resolve), parse(writer, resolve))
    if result.compatibility is SchemaCompatibilityType.compatible:
        return []
    kinds = ", ".join(sorted({kind.name.upper() for kind in result.incompatibilities})) or "INCOMPATIBLE"
    locations = ", ".join(sorted(result.locations))
    details = "; ".join(sorted(result.messages))
    return [f"{kinds} at {locations}: {details}" if details else f"{kinds} at {locations}"]
