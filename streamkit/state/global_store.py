"""The store of a global table: every partition of its topic in one byte store.

Layout: ``b"d" + key bytes`` → value bytes, and ``b"o" + 4-byte partition`` → the next
offset to read there. A batch of records and the offset it reaches are written in one
atomic ``apply``, so after a crash the store resumes exactly where its data stops (the
topic is its changelog; nothing else is written).
"""
from __future__ import annotations

import struct
from typing import Any, Dict, Optional, Sequence

from ..errors import RecordError
from ..serdes import Serde
from ..core.records import RawRecord
from .bytes_store import BytesStore

_DATA, _OFFSET = b"d", b"o"
_PARTITION = struct.Struct(">I")
_POSITION = struct.Struct(">q")


class GlobalStore:
    """Read access for joins (``get``) and batch updates from the topic (``apply``)."""

    def __init__(self, name: str, topic: str, key_serde: Serde, value_serde: Serde, inner: BytesStore) -> None:
        self.name = name
        self.topic = topic
        self.inner = inner
        self._serialize_key = key_serde.serialize
        self._deserialize_key = key_serde.deserialize
        self._deserialize_value = value_serde.deserialize

    def get(self, key: Any) -> Any:
        """The row of ``key``, or ``None``."""
        key_bytes = self._serialize_key(key)
        if key_bytes is None:
            return None
        raw = self.inner.get(_DATA + key_bytes)
        return None if raw is None else self._deserialize_value(raw)

    def position(self, partition: int) -> Optional[int]:
        """The next offset of ``partition`` to apply, or ``None`` if never read."""
        raw = self.inner.get(_OFFSET + _PARTITION.pack(partition))
        return None if raw is None else _POSITION.unpack(raw)[0]

    def apply(self, partition: int, records: Sequence[RawRecord], next_offset: int) -> None:
        """Apply ``records`` of ``partition`` (a ``None`` value deletes its key) and move the
        partition's position to ``next_offset``, atomically. A value that does not
        deserialize stops the update with an error naming its topic, partition and offset."""
        entries: Dict[bytes, Optional[bytes]] = {}
        check = self._deserialize_value
        for offset, _timestamp, key, value, _headers in records:
            if key is None:
                continue  # a table row needs a key (Kafka Streams skips these too)
            if value is not None:
                try:
                    check(value)
                except Exception as exc:
                    raise RecordError("deserializing a global table's value", self.topic, partition, offset, exc,
                                      node=self.name) from exc
            entries[_DATA + key] = value
        entries[_OFFSET + _PARTITION.pack(partition)] = _POSITION.pack(next_offset)
        self.inner.apply(entries, None)

    def all(self):
        """Every row, in key-byte order."""
        for key, value in self.inner.range(_DATA, _DATA + b"\xff" * 8):
            if key[:1] == _DATA:
                yield self._deserialize_key(key[1:]), self._deserialize_value(value)

    def approximate_num_entries(self) -> int:
        return self.inner.approximate_len()

    def close(self) -> None:
        self.inner.close()

    def __repr__(self) -> str:
        return f"<GlobalStore {self.name!r} of topic {self.topic!r}>"
