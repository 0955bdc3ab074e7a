"""Serde for table updates crossing a repartition topic (grouped-table aggregations).

A re-keyed table update travels as a retraction of the old value (under the old
group) and an addition of the new one, or as one record carrying both when the
row stays in its group. One flag byte says which.
"""
from __future__ import annotations

import struct
from typing import Optional

from ..errors import SerializationError
from ..serdes import Serde
from .nodes import Change

_SUBTRACT, _ADD, _UPDATE = b"\x00", b"\x01", b"\x02"
_LENGTH = struct.Struct(">I")


class ChangeSerde(Serde[Change]):
    """Wraps the value serde. Flag 0: retract ``old``; 1: add ``new``; 2: both, as
    ``<4-byte length of new><new><old>`` (a row updated within its group)."""

    def __init__(self, inner: Serde) -> None:
        self.inner = inner

    def serialize(self, change: Optional[Change]) -> Optional[bytes]:
        if change is None:
            return None
        serialize = self.inner.serialize
        if change.new is not None and change.old is not None:
            new = serialize(change.new) or b""
            return _UPDATE + _LENGTH.pack(len(new)) + new + (serialize(change.old) or b"")
        if change.new is not None:
            return _ADD + (serialize(change.new) or b"")
        if change.old is not None:
            return _SUBTRACT + (serialize(change.old) or b"")
        raise SerializationError("a table change with neither a new nor an old value cannot be sent")

    def deserialize(self, data: Optional[bytes]) -> Optional[Change]:
        if data is None:
            return None
        if not data:
            raise SerializationError("table change record is empty: expected a flag byte")
        flag, deserialize = data[:1], self.inner.deserialize
        if flag == _ADD:
            return Change(deserialize(data[1:]), None)
        if flag == _SUBTRACT:
            return Change(None, deserialize(data[1:]))
        if flag == _UPDATE:
            (length,) = _LENGTH.unpack_from(data, 1)
            return Change(deserialize(data[5:5 + length]), deserialize(data[5 + length:]))
        raise SerializationError(f"table change record has an unknown flag byte {flag!r}")

    def for_topic(self, topic: str, is_key: bool, *, broker: Optional[str] = None) -> Serde[Change]:
        inner = self.inner.for_topic(topic, is_key, broker=broker)
        return self if inner is self.inner else ChangeSerde(inner)

    def __repr__(self) -> str:
        return f"ChangeSerde({self.inner!r})"
