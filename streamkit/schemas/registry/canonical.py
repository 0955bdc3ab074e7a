"""What makes two schema texts "the same schema" for the registry.

Avro and JSON Schema texts are JSON: they are stored and compared as compact JSON
(no whitespace, member order kept), as Confluent's registry stores Avro's canonical
string. With ``normalize=True`` members are also sorted, so texts that differ only
in member order are one schema. Protobuf texts are compared with surrounding
whitespace stripped (normalizing them further needs the protobuf compiler's model).
"""
from __future__ import annotations

import json

from ..model import InvalidSchema, Schema, SchemaType

__all__ = ["canonical"]


def canonical(schema: Schema, *, normalize: bool = False) -> Schema:
    """``schema`` with its text in the registry's stored form; ``InvalidSchema`` when
    an Avro or JSON Schema text is not JSON."""
    text = schema.schema_str
    if not isinstance(text, str):
        raise InvalidSchema("Invalid schema: the schema text is missing")
    if schema.schema_type is SchemaType.PROTOBUF:
        stored = text.strip()
    else:
        try:
            parsed = json.loads(text)
        except ValueError as exc:
            raise InvalidSchema(f"Invalid schema: not JSON: {exc}") from None
        stored = json.dumps(parsed, separators=(",", ":"), sort_keys=normalize, ensure_ascii=False)
    if stored == text:
        return schema
    return Schema(stored, schema.schema_type, schema.references)
