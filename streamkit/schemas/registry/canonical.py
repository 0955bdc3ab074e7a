"""What makes two schema texts "the same schema" for the registry.

Avro and JSON Schema texts are JSON: they are stored and compared as compact JSON
(no whitespace, member order kept), as Confluent's registry stores Avro's canonical
string. With ``normalize=True`` members are also sorted, so texts that differ only
in member order are one schema. Protobuf schemas, given as ``.proto`` text or as
the base64 ``FileDescriptorProto`` confluent-kafka's serializer sends, are compiled
(protoc, with their references) and stored as the compiled file printed back as
``.proto`` text, so both forms of one file are one schema (as Confluent's registry
stores its canonical text).
"""
from __future__ import annotations

import json
from typing import Callable, Optional

from ..model import InvalidSchema, Schema, SchemaReference, SchemaType

__all__ = ["canonical", "serialized"]

Resolver = Callable[[SchemaReference], Schema]


def canonical(schema: Schema, *, normalize: bool = False, resolve: Optional[Resolver] = None) -> Schema:
    """``schema`` with its text in the registry's stored form; ``InvalidSchema`` when
    an Avro or JSON Schema text is not JSON, or protoc refuses a Protobuf one.
    ``resolve`` finds references (Protobuf only; without it the text is only stripped)."""
    text = schema.schema_str
    if not isinstance(text, str):
        raise InvalidSchema("Invalid schema: the schema text is missing")
    if schema.schema_type is SchemaType.PROTOBUF:
        stored = text.strip() if resolve is None else _proto_text(schema, resolve)
    else:
        try:
            parsed = json.loads(text)
        except ValueError as exc:
            raise InvalidSchema(f"Invalid schema: not JSON: {exc}") from None
        stored = json.dumps(parsed, separators=(",", ":"), sort_keys=normalize, ensure_ascii=False)
    if stored == text:
        return schema
    return Schema(stored, schema.schema_type, schema.references)


def _proto_text(schema: Schema, resolve: Resolver) -> str:
    from ..protobuf_text import collect_imports, parse, to_proto_text

    return to_proto_text(parse(schema.schema_str, collect_imports(schema, resolve)).file)


def serialized(schema: Schema, resolve: Resolver) -> Schema:
    """A Protobuf ``schema`` as base64 of its compiled ``FileDescriptorProto`` (Confluent's
    ``?format=serialized``, what confluent-kafka's Protobuf deserializer asks for)."""
    from ..protobuf_text import collect_imports, parse, to_serialized

    return Schema(to_serialized(parse(schema.schema_str, collect_imports(schema, resolve)).file),
                  schema.schema_type, schema.references)
