"""Serde for table updates crossing a repartition topic (grouped-table aggregations).

A re-keyed table update travels as two records: a retraction of the old value
(under the old group) and an addition of the new one. One flag byte says which.
"""
from __future__ import annotations

from typing import Optional

from ..errors import SerializationError
from ..serdes import Serde
from .nodes import Change

_ADD = b"\x01"
_SUBTRACT = b"\x00"


class ChangeSerde(Serde[Change]):
    """Wraps the value serde; a Change must carry exactly one of new/old."""

    def __init__(self, inner: Serde) -> None:
        self.inner = inner

    def serialize(self, change: Optional[Change]) -> Optional[bytes]:
        if change is None:
            return None
        if change.new is not None:
            return _ADD + (self.inner.serialize(change.new) or b"")
        return _SUBTRACT + (self.inner.serialize(change.old) or b"")

    def deserialize(self, data: Optional[bytes]) -> Optional[Change]:
        if data is None:
            return None
        if not data:
            raise SerializationError("table change record is empty: expected a flag byte")
        value = self.inner.deserialize(data[1:])
        return Change(value, None) if data[:1] == _ADD else Change(None, value)

    def __repr__(self) -> str:
        return f"ChangeSerde({self.inner!r})"
