"""Serializers/deserializers ("serdes") between Python objects and record bytes.

A serde turns an object into ``bytes`` (or ``None``) and back. ``None`` always maps
to ``None`` so tombstones (a record whose value is ``None``) and key-less records
pass through every serde.

>>> Json().serialize({"page": "home"})
b'{"page":"home"}'
>>> String().deserialize(b"home")
'home'
>>> Int().deserialize(Int().serialize(-7))
-7
"""
from __future__ import annotations

import dataclasses
import struct
from typing import Any, Callable, Generic, Optional, Type, TypeVar

import orjson

from ..errors import SerializationError

__all__ = ["Serde", "Json", "String", "Bytes", "Int", "Float", "Dataclass", "Void", "compact_json"]

T = TypeVar("T")


class Serde(Generic[T]):
    """Base class: override ``serialize`` and ``deserialize``."""

    def serialize(self, obj: Optional[T]) -> Optional[bytes]:
        raise NotImplementedError

    def deserialize(self, data: Optional[bytes]) -> Optional[T]:
        raise NotImplementedError

    def fast_deserializer(self) -> Callable[[bytes], Any]:
        """``deserialize`` for the hot path, called with bytes only (never ``None``). It may
        raise where ``deserialize`` would, with any exception: the runtime then calls
        ``deserialize`` for the proper error. It never returns a different result."""
        return self.deserialize

    def output_serializer(self) -> Callable[[Any], Optional[bytes]]:
        """``serialize`` for records written out at once (not kept in caches or stores),
        called with non-``None`` objects only; as :meth:`fast_deserializer`, it may raise
        any exception where ``serialize`` would, and never returns different bytes."""
        return self.serialize

    def for_topic(self, topic: str, is_key: bool, *, broker: Optional[str] = None) -> "Serde[T]":
        """The serde to use for ``topic``'s keys (``is_key``) or values, on an app whose broker
        is ``broker``. The runtime calls it once per topic a serde meets (sources, sinks,
        repartition topics, store changelogs: ``<app-id>-<store>-changelog``) before any
        record; serdes whose bytes depend on the topic (the Schema Registry serdes: their
        subject) return a bound copy. Default: ``self``."""
        return self

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and vars(self) == vars(other)

    def __hash__(self) -> int:
        return hash(type(self))


def compact_json(obj: Any) -> bytes:
    """orjson.dumps, in a right-sized bytes object.

    orjson hands back each result in a ~4 KiB allocation however short it is; the
    runtime keeps serialized keys and values alive (write buffers, caches, output
    batches), so 100,000 keys would pin 400 MiB. Re-encoding copies it into an
    exact-size object for ~0.1 µs (JSON is always valid UTF-8).
    """
    return orjson.dumps(obj).decode().encode()


class Json(Serde[Any]):
    """JSON through orjson. Dict keys must be strings; datetimes become ISO text."""

    def serialize(self, obj: Any) -> Optional[bytes]:
        if obj is None:
            return None
        try:
            return compact_json(obj)
        except TypeError as exc:
            raise SerializationError(f"Json serde cannot serialize {type(obj).__name__}: {exc}") from exc

    def deserialize(self, data: Optional[bytes]) -> Any:
        if data is None:
            return None
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise SerializationError(f"Json serde: invalid JSON ({exc}): {_preview(data)}") from exc

    def fast_deserializer(self) -> Callable[[bytes], Any]:
        return orjson.loads

    def output_serializer(self) -> Callable[[Any], Optional[bytes]]:
        # compact_json even here: outputs wait in buffers until the round's send, and
        # 10,000 of orjson's ~4 KiB allocations cost ~10x the copy (measured).
        return compact_json


class String(Serde[str]):
    """UTF-8 text. Serializing anything but ``str`` is an error, not a silent ``str()``."""

    def serialize(self, obj: Optional[str]) -> Optional[bytes]:
        if obj is None:
            return None
        if obj.__class__ is not str and not isinstance(obj, str):
            raise SerializationError(
                f"String serde expects str, got {type(obj).__name__} ({obj!r}); "
                "convert it or pass key_serde=/value_serde=sk.serdes.Json()")
        return obj.encode()

    def deserialize(self, data: Optional[bytes]) -> Optional[str]:
        if data is None:
            return None
        try:
            return data.decode()
        except UnicodeDecodeError as exc:
            raise SerializationError(f"String serde: not UTF-8 ({exc}): {_preview(data)}") from exc

    def fast_deserializer(self) -> Callable[[bytes], Any]:
        return bytes.decode

    def output_serializer(self) -> Callable[[Any], Optional[bytes]]:
        return str.encode


class Bytes(Serde[bytes]):
    """Raw bytes, unchanged."""

    def serialize(self, obj: Optional[bytes]) -> Optional[bytes]:
        if obj is None or obj.__class__ is bytes:
            return obj
        if isinstance(obj, (bytearray, memoryview)):
            return bytes(obj)
        raise SerializationError(f"Bytes serde expects bytes, got {type(obj).__name__}")

    def deserialize(self, data: Optional[bytes]) -> Optional[bytes]:
        return data


class Int(Serde[int]):
    """A signed 64-bit big-endian integer, as Kafka's LongSerializer writes it."""

    _fmt = struct.Struct(">q")

    def serialize(self, obj: Optional[int]) -> Optional[bytes]:
        if obj is None:
            return None
        if not isinstance(obj, int) or isinstance(obj, bool):
            raise SerializationError(f"Int serde expects int, got {type(obj).__name__} ({obj!r})")
        try:
            return self._fmt.pack(obj)
        except struct.error:
            raise SerializationError(f"Int serde: {obj} does not fit in a signed 64-bit integer") from None

    def deserialize(self, data: Optional[bytes]) -> Optional[int]:
        if data is None:
            return None
        if len(data) != 8:
            raise SerializationError(f"Int serde expects 8 bytes, got {len(data)}: {_preview(data)}")
        return self._fmt.unpack(data)[0]


class Float(Serde[float]):
    """An IEEE 754 double, big-endian, as Kafka's DoubleSerializer writes it."""

    _fmt = struct.Struct(">d")

    def serialize(self, obj: Optional[float]) -> Optional[bytes]:
        if obj is None:
            return None
        if not isinstance(obj, (int, float)) or isinstance(obj, bool):
            raise SerializationError(f"Float serde expects float, got {type(obj).__name__} ({obj!r})")
        try:
            return self._fmt.pack(obj)
        except (struct.error, OverflowError):
            raise SerializationError(f"Float serde: {obj} does not fit in a 64-bit double") from None

    def deserialize(self, data: Optional[bytes]) -> Optional[float]:
        if data is None:
            return None
        if len(data) != 8:
            raise SerializationError(f"Float serde expects 8 bytes, got {len(data)}: {_preview(data)}")
        return self._fmt.unpack(data)[0]


class Dataclass(Serde[T]):
    """JSON for instances of one dataclass type; fields are checked on the way in.

    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class View:
    ...     page: str
    ...     ts: int
    >>> serde = Dataclass(View)
    >>> serde.deserialize(serde.serialize(View("home", 5)))
    View(page='home', ts=5)
    """

    def __init__(self, cls: Type[T]) -> None:
        if not dataclasses.is_dataclass(cls) or not isinstance(cls, type):
            raise TypeError(f"Dataclass serde needs a dataclass type, got {cls!r}")
        self.cls = cls
        self._fields = {f.name for f in dataclasses.fields(cls)}

    def serialize(self, obj: Optional[T]) -> Optional[bytes]:
        if obj is None:
            return None
        if not isinstance(obj, self.cls):
            raise SerializationError(f"Dataclass serde for {self.cls.__name__} got {type(obj).__name__}")
        return compact_json(obj)

    def deserialize(self, data: Optional[bytes]) -> Optional[T]:
        if data is None:
            return None
        try:
            fields = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise SerializationError(f"Dataclass serde for {self.cls.__name__}: invalid JSON ({exc})") from exc
        if not isinstance(fields, dict):
            raise SerializationError(f"Dataclass serde for {self.cls.__name__}: expected a JSON object")
        unknown = fields.keys() - self._fields
        if unknown:
            raise SerializationError(
                f"Dataclass serde for {self.cls.__name__}: unknown field(s) {sorted(unknown)}")
        try:
            return self.cls(**fields)
        except TypeError as exc:
            raise SerializationError(f"Dataclass serde for {self.cls.__name__}: {exc}") from exc

    def __repr__(self) -> str:
        return f"Dataclass({self.cls.__name__})"

    def __hash__(self) -> int:
        return hash((Dataclass, self.cls))


class Void(Serde[None]):
    """No data: records of a topic with a ``Void`` key serde have no key.

    A stream whose key serde is ``Void`` is key-less: a stateful operation on it
    fails at build time until ``group_by``/``select_key``/``map`` gives it a key.
    """

    def serialize(self, obj: Any) -> None:
        return None

    def deserialize(self, data: Optional[bytes]) -> None:
        return None


def _preview(data: bytes, limit: int = 60) -> str:
    text = repr(bytes(data[:limit]))
    return text + ("..." if len(data) > limit else "")
