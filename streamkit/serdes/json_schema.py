"""JSON values checked by a JSON Schema, in Confluent's wire format.

``JsonSchema(schema, registry=...)`` writes ``[0][schema id][JSON text]`` as Java's
``KafkaJsonSchemaSerializer`` and confluent-kafka's ``JSONSerializer`` do (both write
compact JSON), and reads what they write into dicts (lists, numbers ...).

Why jsonschema + orjson and not confluent-kafka's serializers: confluent-kafka's
``JSONSerializer`` is itself jsonschema plus orjson behind per-call context objects and
a rule engine; streamkit keeps the compiled validator and the schema id, so a record
costs one validation and one orjson call, and confluent-kafka stays out of the runtime.

On write every value is validated (``validate=False`` skips it); a value that fails
raises :class:`~streamkit.errors.SerializationError` with the first violation and its
path. On read the payload is parsed; with ``validate_on_read=True`` it is also
validated against the schema of its id (fetched once per id). An unknown id fails
either way: each id is fetched once to check it is a JSON schema.
"""
from __future__ import annotations

import json
from typing import Any, Dict, Optional, Union

import orjson
from jsonschema import exceptions as jsonschema_errors
from jsonschema.validators import validator_for

from ..errors import ConfigError, SerializationError
from ..schemas.model import Schema, SchemaType
from ..schemas.registry_resolution import RegistryOption
from ..schemas.wire_format import header
from .basic import compact_json
from .registry_serde import Reader, RegistrySerde, Writer

__all__ = ["JsonSchema"]


class JsonSchema(RegistrySerde):
    """JSON Schema with a Schema Registry.

    ``schema``: the JSON Schema (text or dict); its ``title`` is the record name of the
    ``record``/``topic_record`` strategies. ``validate``: check values on write
    (default); ``validate_on_read``: also check records on read. Other options as
    :class:`~streamkit.serdes.Avro`.
    """

    schema_type = SchemaType.JSON

    def __init__(self, schema: Optional[Union[str, Dict[str, Any]]] = None, *, registry: RegistryOption,
                 validate: bool = True, validate_on_read: bool = False, subject_name_strategy: str = "topic",
                 auto_register: bool = True, use_latest_version: bool = False, normalize: bool = False) -> None:
        super().__init__(registry=registry, subject_name_strategy=subject_name_strategy,
                         auto_register=auto_register, use_latest_version=use_latest_version, normalize=normalize)
        self.validate = bool(validate)
        self.validate_on_read = bool(validate_on_read)
        self.schema_str: Optional[str] = None
        self._schema_obj: Any = None
        if schema is not None:
            if isinstance(schema, str):
                try:
                    self._schema_obj = json.loads(schema)
                except ValueError as exc:
                    raise ConfigError(f"JsonSchema serde: the schema is not JSON ({exc})") from None
                self.schema_str = schema
            elif isinstance(schema, dict):
                self._schema_obj = schema
                self.schema_str = json.dumps(schema, separators=(",", ":"))
            else:
                raise ConfigError(f"JsonSchema serde: schema must be JSON text or a dict, got {type(schema).__name__}")
            _validator(self._schema_obj, None)  # fail at construction on an invalid schema

    def registration_schema(self) -> Optional[Schema]:
        return None if self.schema_str is None else Schema(self.schema_str, SchemaType.JSON)

    def record_name(self) -> Optional[str]:
        title = self._schema_obj.get("title") if isinstance(self._schema_obj, dict) else None
        return title if isinstance(title, str) else None

    def _build_writer(self, schema: Schema, schema_id: int) -> Writer:
        head = header(schema_id)
        check = self._checker(schema, schema_id) if self.validate else None

        def write(obj: Any) -> bytes:
            if check is not None:
                check(obj)
            return head + compact_json(obj)
        return write

    def _build_reader(self, schema: Schema, schema_id: int) -> Reader:
        loads = orjson.loads
        if not self.validate_on_read:
            return lambda data, offset: loads(memoryview(data)[offset:])
        check = self._checker(schema, schema_id)

        def read(data: bytes, offset: int) -> Any:
            value = loads(memoryview(data)[offset:])
            check(value)
            return value
        return read

    def _checker(self, schema: Schema, schema_id: int) -> Any:
        validator = _validator(json.loads(schema.schema_str), self._references(schema))
        is_valid = validator.is_valid
        where = self._where

        def check(value: Any) -> None:
            if not is_valid(value):
                error = jsonschema_errors.best_match(validator.iter_errors(value))
                path = "/".join(str(p) for p in error.absolute_path) if error is not None else ""
                raise SerializationError(
                    f"{where(schema_id)}: the value fails validation"
                    f"{f' at /{path}' if path else ''}: {error.message if error is not None else 'invalid'}")
        return check

    def _references(self, schema: Schema) -> Optional[Any]:
        """A ``referencing`` registry of the schemas ``schema`` refers to (by their ``$ref`` names)."""
        if not schema.references:
            return None
        from referencing import Registry, Resource
        from referencing.jsonschema import DRAFT7

        resources = []
        pending = list(schema.references)
        seen = set()
        while pending:
            ref = pending.pop()
            if (ref.subject, ref.version) in seen:
                continue
            seen.add((ref.subject, ref.version))
            referenced = self.client().version(ref.subject, ref.version).schema
            resources.append((ref.name, Resource.from_contents(json.loads(referenced.schema_str),
                                                               default_specification=DRAFT7)))
            pending.extend(referenced.references)
        return Registry().with_resources(resources)

    def _identity(self) -> tuple:
        return super()._identity() + (self.schema_str, self.validate, self.validate_on_read)

    def __repr__(self) -> str:
        return f"JsonSchema({self.record_name() or 'schema from the registry'})"


def _validator(schema: Any, registry: Optional[Any]) -> Any:
    cls = validator_for(schema)
    try:
        cls.check_schema(schema)
    except jsonschema_errors.SchemaError as exc:
        raise ConfigError(f"JsonSchema serde: invalid JSON Schema: {exc.message}") from None
    return cls(schema) if registry is None else cls(schema, registry=registry)
