"""The part every Schema Registry serde shares: binding, ids, caches, errors.

A registry serde writes Confluent's wire format (see
:mod:`streamkit.schemas.wire_format`). What happens when:

- **Binding.** The subject needs the topic and whether the serde writes keys or
  values, and ``registry="embedded"`` needs the app's broker: the runtime calls
  :meth:`RegistrySerde.for_topic` for each topic (source, sink, repartition) and
  store changelog, which returns a bound copy. The serde you construct is never
  changed, so one instance may serve several topics.
- **First write** of a bound serde: its subject (per ``subject_name_strategy``) gets
  an id: registered (``auto_register=True``, the default; a no-op if already there),
  else looked up (the schema must be registered already), or, with
  ``use_latest_version=True``, the subject's latest version is used as the writer
  schema. The id and the encoder are kept: later writes never ask the registry.
- **First read of a schema id**: the writer schema is fetched by id, parsed and kept
  with a decoder for it (Avro resolves it against the serde's reader schema). Later
  records with that id never ask the registry (an id the registry does not know is
  asked again at most once a second). The registry client is shared per
  registry and caches answers too (:class:`~streamkit.schemas.registry_resolution.CachedRegistry`).
- **Bad input**: a record without the magic byte 0 and a 4-byte id, an id the
  registry does not know, a payload that does not decode with its schema, a value
  that does not fit (or validate against) the schema on write, a registry refusal:
  each raises :class:`~streamkit.errors.SerializationError` naming the serde, the
  subject and the schema id, which the runtime's error handlers (fail, log_and_skip,
  dead_letter) report with topic, partition and offset.
"""
from __future__ import annotations

import copy
import logging
import struct
import time
from typing import Any, Callable, ClassVar, Dict, Optional, Tuple

from ..errors import ConfigError, SerializationError
from ..schemas.model import RegistryError, Schema, SchemaNotFound, SchemaType
from ..schemas.registry_resolution import (CachedRegistry, RegistryOption, check_registry_option,
                                           describe_registry, resolve_registry)
from ..schemas.subject_naming import check_strategy, subject_name
from ..schemas.wire_format import HEADER_SIZE, read_header
from .basic import Serde

__all__ = ["RegistrySerde"]

log = logging.getLogger(__name__)

Writer = Callable[[Any], bytes]
"""Encodes one non-None object to the full record bytes (header included)."""
Reader = Callable[[bytes, int], Any]
"""Decodes the record bytes from the offset after the 5-byte header."""

_ID = struct.Struct(">I")

UNKNOWN_ID_RETRY_S = 1.0
"""A schema id the registry did not know, or a write id it refused (incompatible,
not registered, unreachable), is not asked again for this long: a flood of records
with a foreign id, or of values for a refused schema, costs one round trip per second,
not one per record (and what was fixed meanwhile, e.g. an id known to another registry
instance still catching up, is found on the next ask)."""


class RegistrySerde(Serde[Any]):
    """Base of :class:`~streamkit.serdes.Avro`, :class:`~streamkit.serdes.JsonSchema` and
    :class:`~streamkit.serdes.Protobuf`. Subclasses give the schema to register, the
    record name, and build a writer per write schema and a reader per schema id."""

    schema_type: ClassVar[SchemaType]

    def __init__(self, *, registry: RegistryOption, subject_name_strategy: str = "topic",
                 auto_register: bool = True, use_latest_version: bool = False, normalize: bool = False) -> None:
        self.registry = check_registry_option(registry, type(self).__name__)
        self.subject_name_strategy = check_strategy(subject_name_strategy)
        self.auto_register = bool(auto_register)
        self.use_latest_version = bool(use_latest_version)
        self.normalize = bool(normalize)
        self.topic: Optional[str] = None
        """The topic this copy is bound to (None: not bound)."""
        self.is_key = False
        self.broker: Optional[str] = None
        self._client: Optional[CachedRegistry] = None
        self._writer: Optional[Writer] = None
        self._write_id: Optional[int] = None
        self._readers: Dict[int, Reader] = {}
        self._unknown: Dict[int, float] = {}
        """Ids the registry did not know, with when it was asked (asked again after UNKNOWN_ID_RETRY_S)."""
        self._write_failure: Optional[Tuple[float, str]] = None
        """When the registry last refused this serde a write id, and why (asked again after UNKNOWN_ID_RETRY_S)."""

    # -- what subclasses provide ----------------------------------------------------

    def registration_schema(self) -> Optional[Schema]:
        """The schema this serde registers or looks up (None: it has none, it only reads)."""
        raise NotImplementedError

    def record_name(self) -> Optional[str]:
        """The full name the ``record`` and ``topic_record`` strategies use."""
        raise NotImplementedError

    def _build_writer(self, schema: Schema, schema_id: int) -> Writer:
        raise NotImplementedError

    def _build_reader(self, schema: Schema, schema_id: int) -> Reader:
        raise NotImplementedError

    # -- binding --------------------------------------------------------------------

    def for_topic(self, topic: str, is_key: bool, *, broker: Optional[str] = None) -> "RegistrySerde":
        """A copy of this serde for ``topic``'s keys (``is_key``) or values; ``broker`` is
        the app's broker URL, where ``registry="embedded"`` lives. Caches start empty."""
        bound = copy.copy(self)
        bound.topic = topic
        bound.is_key = bool(is_key)
        bound.broker = broker or self.broker
        bound._client = None
        bound._writer = None
        bound._write_id = None
        bound._readers = {}
        bound._unknown = {}
        bound._write_failure = None
        return bound

    def client(self) -> CachedRegistry:
        """The registry this serde talks to (resolved once)."""
        if self._client is None:
            self._client = resolve_registry(self.registry, broker=self.broker, owner=self._name())
        return self._client

    def subject(self) -> str:
        """The subject this serde writes under (ConfigError if it needs a topic it lacks)."""
        return subject_name(self.subject_name_strategy, self.topic, is_key=self.is_key,
                            record_name=self.record_name())

    # -- Serde ------------------------------------------------------------------------

    def serialize(self, obj: Any) -> Optional[bytes]:
        if obj is None:
            return None
        writer = self._writer or self._resolve_writer()
        try:
            return writer(obj)
        except SerializationError:
            raise
        except Exception as exc:
            raise SerializationError(
                f"{self._where(self._write_id)}: cannot serialize {type(obj).__name__} "
                f"({type(exc).__name__}: {exc})") from exc

    def deserialize(self, data: Optional[bytes]) -> Any:
        if data is None:
            return None
        try:
            schema_id, offset = read_header(data)
        except SerializationError as exc:
            raise SerializationError(f"{self._where(None)}: {exc}") from None
        reader = self._readers.get(schema_id) or self._resolve_reader(schema_id)
        try:
            return reader(data, offset)
        except SerializationError as exc:
            if str(exc).startswith(self._name()):
                raise
            raise SerializationError(f"{self._where(schema_id)}: {exc}") from exc
        except Exception as exc:
            raise SerializationError(
                f"{self._where(schema_id)}: the payload does not decode with schema id {schema_id} "
                f"({type(exc).__name__}: {exc}); {len(data)} byte(s): {bytes(data[:24])!r}") from exc

    def fast_deserializer(self) -> Callable[[bytes], Any]:
        """Decodes records whose schema id was seen before; anything else raises, and the
        runtime then calls :meth:`deserialize`, which loads the id or names the error."""
        readers = self._readers
        unpack = _ID.unpack_from

        def fast(data: bytes) -> Any:
            if data[0]:
                raise ValueError("magic byte")
            return readers[unpack(data, 1)[0]](data, HEADER_SIZE)
        return fast

    def output_serializer(self) -> Callable[[Any], Optional[bytes]]:
        def out(obj: Any) -> bytes:
            writer = self._writer or self._resolve_writer()
            return writer(obj)
        return out

    # -- resolution ---------------------------------------------------------------------

    def _resolve_writer(self) -> Writer:
        """Step 1: the subject; 2: the id (latest version, registration or lookup);
        3: an encoder for that schema, kept for every later write."""
        client = self.client()
        subject = self.subject()
        failed = self._write_failure
        if failed is not None and time.monotonic() - failed[0] < UNKNOWN_ID_RETRY_S:
            raise SerializationError(f"{failed[1]} (not asked again within {UNKNOWN_ID_RETRY_S:g} s)")
        schema: Optional[Schema] = None
        try:
            if not self.use_latest_version:
                schema = self.registration_schema()
            if self.use_latest_version:
                latest = client.latest_version(subject)
                schema, schema_id = latest.schema, latest.schema_id
            elif schema is None:
                raise ConfigError(f"{self._name()} has no schema to write with: give it one, or set "
                                  "use_latest_version=True to write with the subject's latest version")
            elif self.auto_register:
                schema_id = client.register(subject, schema, normalize=self.normalize)
            else:
                schema_id = client.lookup(subject, schema, normalize=self.normalize).schema_id
        except RegistryError as exc:
            hint = ("" if self.auto_register or self.use_latest_version else
                    "; register the schema first or set auto_register=True")
            message = (f"{self._name()} (subject '{subject}', registry {describe_registry(self.registry)}): "
                       f"{type(exc).__name__}: {exc.message}{hint}")
            self._write_failure = (time.monotonic(), message)
            raise SerializationError(message) from None
        if schema.schema_type is not self.schema_type:
            raise SerializationError(f"{self._where(schema_id)}: subject '{subject}' holds a "
                                     f"{schema.schema_type.value} schema, not {self.schema_type.value}")
        writer = self._build_writer(schema, schema_id)
        log.debug("%s writes with schema id %d under subject '%s'", self._name(), schema_id, subject)
        self._write_id = schema_id
        self._writer = writer
        return writer

    def _resolve_reader(self, schema_id: int) -> Reader:
        asked = self._unknown.get(schema_id)
        now = time.monotonic()
        try:
            if asked is not None and now - asked < UNKNOWN_ID_RETRY_S:
                raise SchemaNotFound(f"schema id {schema_id} (asked {now - asked:.1f} s ago)")
            schema = self.client().schema_by_id(schema_id)
        except SchemaNotFound:
            if asked is None or now - asked >= UNKNOWN_ID_RETRY_S:
                self._unknown[schema_id] = now
            raise SerializationError(
                f"{self._where(schema_id)}: unknown schema id {schema_id}: registry "
                f"{describe_registry(self.registry)} has no schema with that id (written against another "
                "registry?)") from None
        except RegistryError as exc:
            raise SerializationError(f"{self._where(schema_id)}: fetching schema id {schema_id}: "
                                     f"{type(exc).__name__}: {exc.message}") from None
        if schema.schema_type is not self.schema_type:
            raise SerializationError(
                f"{self._where(schema_id)}: schema id {schema_id} is a {schema.schema_type.value} schema; "
                f"this serde reads {self.schema_type.value}")
        try:
            reader = self._build_reader(schema, schema_id)
        except SerializationError:
            raise
        except Exception as exc:
            raise SerializationError(f"{self._where(schema_id)}: schema id {schema_id} cannot be used to "
                                     f"read ({type(exc).__name__}: {exc})") from exc
        self._readers[schema_id] = reader
        return reader

    # -- naming -------------------------------------------------------------------------

    def _name(self) -> str:
        return type(self).__name__ + " serde"

    def _where(self, schema_id: Optional[int]) -> str:
        """``Avro serde (topic 'orders' value, subject 'orders-value', schema id 3)``."""
        parts = []
        if self.topic is not None:
            parts.append(f"topic '{self.topic}' {'key' if self.is_key else 'value'}")
        try:
            parts.append(f"subject '{self.subject()}'")
        except ConfigError:
            pass
        if schema_id is not None:
            parts.append(f"schema id {schema_id}")
        return self._name() + (f" ({', '.join(parts)})" if parts else "")

    # -- identity -----------------------------------------------------------------------

    def _identity(self) -> Tuple[Any, ...]:
        """What makes two serdes equal: their settings and binding, not their caches."""
        registry = self.registry if isinstance(self.registry, str) else id(self.registry)
        return (type(self), registry, self.subject_name_strategy, self.auto_register, self.use_latest_version,
                self.normalize, self.topic, self.is_key, self.broker)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RegistrySerde) and self._identity() == other._identity()

    def __hash__(self) -> int:
        return hash(self._identity())

    def __getstate__(self) -> Dict[str, Any]:
        # Pickled (e.g. to Spark executors) without caches or the client: they rebuild on use.
        state = dict(vars(self))
        state.update(_client=None, _writer=None, _write_id=None, _readers={}, _unknown={}, _write_failure=None)
        return state

