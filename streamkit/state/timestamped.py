"""A key-value store whose values carry the timestamp of the update that wrote them.

DSL aggregations and tables use it (as Kafka Streams' timestamped stores do) so
a result's timestamp is the largest of its inputs': a late record never moves a
result back in time. Reads through the plain :class:`KeyValueStore` methods see
values only.
"""
from __future__ import annotations

import struct
from typing import Any, Callable, Dict, Optional, Tuple

from ..serdes import Serde
from .serialized import DECODED_ENTRIES, SerializedKeyValueStore, round_trip_types
from .write_buffer import WriteBuffer

_TIMESTAMP = struct.Struct(">q")
_KEY_CACHE_ENTRIES = 100_000
_NO_TIMESTAMP = _TIMESTAMP.pack(-1)


class TimestampedKeyValueStore(SerializedKeyValueStore):
    """Stores ``<8-byte big-endian timestamp><value bytes>`` per key."""

    def __init__(self, name: str, inner: WriteBuffer, key_serde: Serde, value_serde: Serde) -> None:
        super().__init__(name, inner, key_serde, value_serde)
        value_serialize, value_deserialize = value_serde.serialize, value_serde.deserialize
        self._value_serialize = value_serialize
        self._value_deserialize = value_deserialize
        self._vser = lambda value: _NO_TIMESTAMP + value_serialize(value)
        self._vdes = lambda raw: value_deserialize(raw[8:])
        self._key_bytes: Dict[Any, bytes] = {}
        self._decoded: Dict[bytes, Tuple[bytes, Any, int]] = {}
        """key bytes -> (the bytes written, value, timestamp) of values that read back as
        themselves: a read of those very bytes (identity) skips decoding them."""
        self._decodable = round_trip_types(value_serde)
        # When a flush listener forwards cached updates, a deletion is forwarded at its
        # own timestamp (the buffer keeps no timestamp for a deleted key).
        self._deleted_at: Optional[Dict[bytes, int]] = None

    def get_with_timestamp(self, key: Any) -> Optional[Tuple[Any, int]]:
        """``(value, timestamp)`` of ``key``, or ``None``."""
        return self.get_serialized(self._kser(key))

    def put_with_timestamp(self, key: Any, value: Any, timestamp: int) -> None:
        """Set ``key`` to ``value`` written at ``timestamp``; ``None`` deletes."""
        self.put_serialized(self._kser(key), value, timestamp)

    # Read-modify-write paths (aggregations) serialize the key once and use these.

    def serialize_key(self, key: Any) -> bytes:
        """The key's bytes, remembered for string keys (aggregations see the same keys again
        and again). Only strings: 1, 1.0 and True are equal dict keys but serialize apart."""
        if key.__class__ is not str:
            return self._kser(key)
        data = self._key_bytes.get(key)
        if data is None:
            if len(self._key_bytes) >= _KEY_CACHE_ENTRIES:
                self._key_bytes.clear()
            data = self._key_bytes[key] = self._kser(key)
        return data

    def get_serialized(self, key: bytes) -> Optional[Tuple[Any, int]]:
        raw = self.inner.get(key)
        if raw is None:
            return None
        known = self._decoded.get(key)
        if known is not None and known[0] is raw:
            return known[1], known[2]
        return self._value_deserialize(raw[8:]), _TIMESTAMP.unpack_from(raw)[0]

    def put_serialized(self, key: bytes, value: Any, timestamp: int) -> None:
        if value is None:
            self.inner.delete(key)
            if self._deleted_at is not None:
                self._deleted_at[key] = timestamp
            return
        data = _TIMESTAMP.pack(timestamp) + self._value_serialize(value)
        self.inner.put(key, data)
        if value.__class__ in self._decodable:
            decoded = self._decoded
            if len(decoded) >= DECODED_ENTRIES:
                decoded.clear()
            decoded[key] = (data, value, timestamp)

    def decode(self, raw: Optional[bytes]) -> Tuple[Any, int]:
        """``(value, timestamp)`` of a stored value; ``(None, -1)`` for None."""
        if raw is None:
            return None, -1
        return self._value_deserialize(raw[8:]), _TIMESTAMP.unpack_from(raw)[0]

    def on_flush(self, listener: Callable[[Any, Any, Any, int], None]) -> None:
        """Call ``listener(key, new_value, old_value, timestamp)`` for each key written
        since the last commit, when the commit flushes the store (the record cache)."""
        key_deserialize, decode = self._kdes, self.decode
        deleted_at = self._deleted_at = {} if self._deleted_at is None else self._deleted_at

        def raw_listener(key: bytes, new: Optional[bytes], old: Optional[bytes]) -> None:
            new_value, timestamp = decode(new)
            old_value, old_timestamp = decode(old)
            deleted = deleted_at.pop(key, old_timestamp)
            listener(key_deserialize(key), new_value, old_value, timestamp if new is not None else deleted)
        self.inner.flush_listeners.append(raw_listener)
