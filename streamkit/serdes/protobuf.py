"""Protobuf messages in Confluent's wire format, on the protobuf runtime.

``Protobuf(message_class, registry=...)`` writes ``[0][schema id][message indexes]
[message bytes]`` as Java's ``KafkaProtobufSerializer`` and confluent-kafka's
``ProtobufSerializer`` do: the message indexes locate the message in its ``.proto``
file (``[0]``, the file's first message, is the single byte 0).

What is registered, when (on the first write of a bound serde): the message's file as
``.proto`` text under the subject, with a reference for each file it imports, each
registered first under its import path as subject (``google/protobuf/timestamp.proto``,
``shop/money.proto``), recursively, as Confluent's default reference naming does
(``skip_known_types=True`` leaves the ``google/protobuf/``, ``google/type/`` and
``confluent/`` files out, as confluent-kafka-python does by default).

Reading: records decode to ``message_class`` instances (unknown fields of a newer
writer are kept, missing ones take defaults: Protobuf's own evolution); a record whose
indexes name another message than ``message_class`` raises SerializationError. Without
a ``message_class`` (a generic reader such as ``streamkit consume``), message classes
are built from the registered ``.proto`` text of each schema id, once per id and index.

Why the protobuf runtime and not confluent-kafka's serializers: they wrap the same
runtime; streamkit caches the index bytes and the id, so a write is one
``SerializeToString`` and a concatenation, and confluent-kafka stays out of the runtime.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple, Type

from google.protobuf import json_format
from google.protobuf.message import Message

from ..errors import ConfigError, SerializationError
from ..schemas.model import Schema, SchemaReference, SchemaType
from ..schemas.registry_resolution import RegistryOption
from ..schemas.wire_format import decode_message_indexes, encode_message_indexes, header
from .registry_serde import Reader, RegistrySerde, Writer

__all__ = ["Protobuf"]

_BUILTIN_PREFIXES = ("google/protobuf/", "google/type/", "confluent/")


class Protobuf(RegistrySerde):
    """Protobuf with a Schema Registry.

    ``message_class``: a generated message class (``orders_pb2.Order``) or one built
    from ``.proto`` text (:func:`streamkit.schemas.protobuf_text.message_class`); None to
    read any message with classes built from the registry. Values to write are
    instances of it, or dicts (parsed with ``json_format.ParseDict``). Other options
    as :class:`~streamkit.serdes.Avro`, plus ``skip_known_types``.
    """

    schema_type = SchemaType.PROTOBUF

    def __init__(self, message_class: Optional[Type[Message]] = None, *, registry: RegistryOption,
                 subject_name_strategy: str = "topic", auto_register: bool = True,
                 use_latest_version: bool = False, normalize: bool = False,
                 skip_known_types: bool = False) -> None:
        super().__init__(registry=registry, subject_name_strategy=subject_name_strategy,
                         auto_register=auto_register, use_latest_version=use_latest_version, normalize=normalize)
        if message_class is not None and not (isinstance(message_class, type) and issubclass(message_class, Message)):
            raise ConfigError(f"Protobuf serde: message_class must be a protobuf message class, got {message_class!r}")
        self.message_class = message_class
        self.skip_known_types = bool(skip_known_types)

    def record_name(self) -> Optional[str]:
        return None if self.message_class is None else self.message_class.DESCRIPTOR.full_name

    def registration_schema(self) -> Optional[Schema]:
        if self.message_class is None:
            return None
        file = self.message_class.DESCRIPTOR.file
        return Schema(_proto_text(file), SchemaType.PROTOBUF, self._references(file))

    def _references(self, file: Any) -> Tuple[SchemaReference, ...]:
        """Register (``auto_register``) or look up each imported file under its import
        path, depth first, and return the references of ``file``."""
        client = self.client()
        refs: List[SchemaReference] = []
        for dependency in file.dependencies:
            if self.skip_known_types and dependency.name.startswith(_BUILTIN_PREFIXES):
                continue
            schema = Schema(_proto_text(dependency), SchemaType.PROTOBUF, self._references(dependency))
            if self.auto_register:
                client.register(dependency.name, schema, normalize=self.normalize)
            version = client.lookup(dependency.name, schema, normalize=self.normalize).version
            refs.append(SchemaReference(dependency.name, dependency.name, version))
        return tuple(refs)

    def _build_writer(self, schema: Schema, schema_id: int) -> Writer:
        cls = self.message_class
        if cls is None:
            raise ConfigError("Protobuf serde without a message_class cannot write: give it the message class")
        from ..schemas.protobuf_text import message_index

        prefix = header(schema_id) + encode_message_indexes(message_index(cls.DESCRIPTOR))
        parse_dict = json_format.ParseDict
        name = cls.DESCRIPTOR.full_name

        def write(obj: Any) -> bytes:
            if obj.__class__ is not cls:
                if isinstance(obj, dict):
                    obj = parse_dict(obj, cls())
                elif not isinstance(obj, cls):
                    raise SerializationError(
                        f"{self._where(schema_id)}: expected a {name} message or a dict, got {type(obj).__name__}")
            return prefix + obj.SerializeToString()
        return write

    def _build_reader(self, schema: Schema, schema_id: int) -> Reader:
        classes: Dict[Tuple[int, ...], Type[Message]] = {}
        names: Dict[Tuple[int, ...], str] = {}
        parsed: List[Any] = []  # the writer's file and imports, parsed on first need

        def writer_file() -> Tuple[Any, Dict[str, str]]:
            if not parsed:
                from ..schemas.protobuf_text import collect_imports, parse

                imports = collect_imports(schema, lambda ref: self.client().version(ref.subject, ref.version).schema)
                parsed.append((parse(schema.schema_str, imports).file, imports))
            return parsed[0]

        def load(indexes: Tuple[int, ...]) -> Type[Message]:
            from ..schemas.protobuf_text import message_class, message_name_at

            file, imports = writer_file()
            try:
                full_name = message_name_at(file, list(indexes))
            except IndexError:
                raise SerializationError(f"{self._where(schema_id)}: message indexes {list(indexes)} name no "
                                         f"message of schema id {schema_id}") from None
            own = self.message_class
            if own is not None:
                if own.DESCRIPTOR.full_name != full_name:
                    raise SerializationError(
                        f"{self._where(schema_id)}: the record is a {full_name} (message indexes "
                        f"{list(indexes)}), this serde reads {own.DESCRIPTOR.full_name}")
                cls = own
            else:
                cls = message_class(schema.schema_str, full_name, imports)
            classes[indexes] = cls
            names[indexes] = full_name
            return cls

        first = (0,)

        def read(data: bytes, offset: int) -> Any:
            if data[offset] == 0:
                indexes, start = first, offset + 1
            else:
                found, start = decode_message_indexes(data, offset)
                indexes = tuple(found)
            cls = classes.get(indexes) or load(indexes)
            message = cls()
            message.ParseFromString(data[start:])
            return message
        return read

    def _identity(self) -> tuple:
        return super()._identity() + (self.message_class, self.skip_known_types)

    def __repr__(self) -> str:
        return f"Protobuf({self.record_name() or 'messages from the registry'})"


def _proto_text(file: Any) -> str:
    from ..schemas.protobuf_text import to_proto_text

    return to_proto_text(file)
