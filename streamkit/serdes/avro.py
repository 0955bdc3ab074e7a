"""Avro values in Confluent's wire format, on fastavro.

``Avro(schema, registry=...)`` writes ``[0][schema id][Avro binary]`` as Java's
``KafkaAvroSerializer`` and confluent-kafka's ``AvroSerializer`` do, and reads what
they write. Records decode to dicts (or to ``record_type`` instances).

Why fastavro and not confluent-kafka's serializers: fastavro is what confluent-kafka's
``AvroSerializer`` calls underneath, so the bytes are the same, without its per-call
context objects, rule engine and librdkafka dependency; streamkit keeps the parsed
schemas and the id itself, so a record costs one fastavro call and a dict lookup.

Schema evolution on read: the writer schema of each id is fetched once and resolved
against this serde's schema (the reader schema) by Avro's rules (fields added with
defaults, removed fields skipped, promotions); a serde without a schema reads each
record with its writer schema. Writer schemas with references (named types from
other subjects) are resolved through the registry.
"""
from __future__ import annotations

import dataclasses
import io
import json
from typing import Any, Dict, List, Optional, Type, Union

from fastavro import parse_schema, schemaless_reader, schemaless_writer

from ..errors import ConfigError, SerializationError
from ..schemas.model import Schema, SchemaType
from ..schemas.registry_resolution import RegistryOption
from ..schemas.wire_format import header
from .registry_serde import Reader, RegistrySerde, Writer

__all__ = ["Avro"]

AvroSchema = Union[str, Dict[str, Any], List[Any]]


class Avro(RegistrySerde):
    """Avro with a Schema Registry.

    ``schema``: the Avro schema (JSON text or its parsed form) used to write, and as the
    reader schema on read; None to read each record with its writer schema (and write
    with the subject's latest version, ``use_latest_version=True``).
    ``record_type``: a dataclass; records decode to it (its fields must match the
    record's top-level fields; nested records stay dicts) and its instances encode.
    ``registry``: an ``http(s)://`` URL, ``"embedded"`` or a RegistryClient.
    ``subject_name_strategy``: ``topic`` (``<topic>-key|value``), ``record`` or
    ``topic_record``; ``auto_register``, ``use_latest_version``, ``normalize`` as in
    Confluent's serializers. See :mod:`.registry_serde` for when the registry is asked.

    Bad input raises :class:`~streamkit.errors.SerializationError` naming the subject
    and schema id: a value that does not fit the schema on write, a record that is not
    in the wire format, an unknown id, a payload that does not decode (or leaves bytes
    over).
    """

    schema_type = SchemaType.AVRO

    def __init__(self, schema: Optional[AvroSchema] = None, *, registry: RegistryOption,
                 record_type: Optional[Type[Any]] = None, subject_name_strategy: str = "topic",
                 auto_register: bool = True, use_latest_version: bool = False, normalize: bool = False) -> None:
        super().__init__(registry=registry, subject_name_strategy=subject_name_strategy,
                         auto_register=auto_register, use_latest_version=use_latest_version, normalize=normalize)
        self.schema_str: Optional[str] = None
        self._schema_obj: Any = None
        self._reader_parsed: Any = None
        if schema is not None:
            self.schema_str, self._schema_obj = _schema_text(schema)
            try:
                self._reader_parsed = parse_schema(self._schema_obj, named_schemas={})
            except Exception as exc:
                raise ConfigError(f"Avro serde: invalid Avro schema ({type(exc).__name__}: {exc})") from None
        if record_type is not None and not (dataclasses.is_dataclass(record_type) and isinstance(record_type, type)):
            raise ConfigError(f"Avro serde: record_type must be a dataclass type, got {record_type!r}")
        self.record_type = record_type

    def registration_schema(self) -> Optional[Schema]:
        return None if self.schema_str is None else Schema(self.schema_str, SchemaType.AVRO)

    def record_name(self) -> Optional[str]:
        return _full_name(self._schema_obj)

    def _build_writer(self, schema: Schema, schema_id: int) -> Writer:
        if self.use_latest_version or self._reader_parsed is None:
            parsed = self._parse_registered(schema)
        else:
            parsed = self._reader_parsed
        head = header(schema_id)
        to_dict = _to_dict if self.record_type is not None else None
        BytesIO = io.BytesIO

        def write(obj: Any) -> bytes:
            if to_dict is not None and not isinstance(obj, dict):
                obj = to_dict(obj)
            out = BytesIO()
            out.write(head)
            schemaless_writer(out, parsed, obj)
            return out.getvalue()
        return write

    def _build_reader(self, schema: Schema, schema_id: int) -> Reader:
        writer_parsed = self._parse_registered(schema)
        reader_parsed = None
        if self._reader_parsed is not None and json.loads(schema.schema_str) != self._schema_obj:
            reader_parsed = self._reader_parsed  # schema evolution: resolve writer -> reader
        record_type = self.record_type
        BytesIO = io.BytesIO

        def read(data: bytes, offset: int) -> Any:
            buf = BytesIO(data)
            buf.seek(offset)
            value = schemaless_reader(buf, writer_parsed, reader_parsed)
            if buf.tell() != len(data):
                raise SerializationError(
                    f"{self._where(schema_id)}: {len(data) - buf.tell()} byte(s) left over after the Avro "
                    f"value (written with another schema or not Avro?): {bytes(data[:24])!r}")
            return value if record_type is None else record_type(**value)
        return read

    def _parse_registered(self, schema: Schema) -> Any:
        """Parse a registered schema, its references' named types first."""
        named: Dict[str, Any] = {}
        self._parse_references(schema, named, set())
        return parse_schema(json.loads(schema.schema_str), named_schemas=named)

    def _parse_references(self, schema: Schema, named: Dict[str, Any], seen: set) -> None:
        for ref in schema.references:
            if (ref.subject, ref.version) in seen:
                continue
            seen.add((ref.subject, ref.version))
            referenced = self.client().version(ref.subject, ref.version).schema
            self._parse_references(referenced, named, seen)
            parse_schema(json.loads(referenced.schema_str), named_schemas=named)

    def _identity(self) -> tuple:
        return super()._identity() + (self.schema_str, self.record_type)

    def __repr__(self) -> str:
        if self.schema_str is None:
            return "Avro(schema from the registry)"
        return f"Avro({self.record_name() or self.schema_str[:40]})"


def _schema_text(schema: AvroSchema) -> tuple:
    """(text to register, parsed JSON) of a schema given as text or parsed JSON."""
    if isinstance(schema, str):
        try:
            return schema, json.loads(schema)
        except ValueError as exc:
            raise ConfigError(f"Avro serde: the schema is not JSON ({exc}); pass the schema's JSON text or "
                              "its parsed dict") from None
    if isinstance(schema, (dict, list)):
        return json.dumps(schema, separators=(",", ":")), schema
    raise ConfigError(f"Avro serde: schema must be JSON text or a dict, got {type(schema).__name__}")


def _full_name(schema: Any) -> Optional[str]:
    """An Avro named type's full name (``namespace.Name``); None for other schemas."""
    if not isinstance(schema, dict) or "name" not in schema:
        return None
    name = schema["name"]
    namespace = schema.get("namespace")
    return name if "." in name or not namespace else f"{namespace}.{name}"


def _to_dict(obj: Any) -> Dict[str, Any]:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    raise TypeError(f"expected a dict or a dataclass instance, got {type(obj).__name__}")
