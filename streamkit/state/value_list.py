"""Serde for a list of values under one store key: the records a join buffers for one
key and timestamp (duplicates are kept, in arrival order)."""
from __future__ import annotations

import struct
from typing import Any, List, Optional

from ..errors import SerializationError
from ..serdes import Serde

_LENGTH = struct.Struct(">I")


class ValueListSerde(Serde[List[Any]]):
    """``<4-byte length><value bytes>`` per value, each value through ``inner``."""

    def __init__(self, inner: Serde) -> None:
        self.inner = inner

    def serialize(self, values: Optional[List[Any]]) -> Optional[bytes]:
        if values is None:
            return None
        serialize, pack = self.inner.serialize, _LENGTH.pack
        parts = []
        for value in values:
            data = serialize(value)
            if data is None:
                raise SerializationError(f"{self.inner!r} serialized {value!r} to None: a join buffer "
                                         "cannot hold a value without bytes")
            parts.append(pack(len(data)))
            parts.append(data)
        return b"".join(parts)

    def deserialize(self, data: Optional[bytes]) -> Optional[List[Any]]:
        if data is None:
            return None
        deserialize, unpack = self.inner.deserialize, _LENGTH.unpack_from
        out, position, end = [], 0, len(data)
        while position < end:
            (length,) = unpack(data, position)
            position += 4
            out.append(deserialize(data[position:position + length]))
            position += length
        return out

    def for_topic(self, topic: str, is_key: bool, *, broker: Optional[str] = None) -> Serde[List[Any]]:
        inner = self.inner.for_topic(topic, is_key, broker=broker)
        return self if inner is self.inner else ValueListSerde(inner)

    def __repr__(self) -> str:
        return f"ValueListSerde({self.inner!r})"
