"""The outermost store layer: serdes between objects and the byte stores below."""
from __future__ import annotations

from typing import Any, FrozenSet, Iterator, Optional, Tuple

from ..serdes import Int, Json, Serde, String
from ..stores import KeyValueStore
from .write_buffer import WriteBuffer


DECODED_ENTRIES = 100_000
"""At most this many written values are kept decoded per store (see :func:`round_trip_types`)."""


def round_trip_types(serde: Serde) -> FrozenSet[type]:
    """The exact classes of immutable values that ``serde`` reads back as an equal object
    of the same class: a store may keep such a value as written instead of decoding its
    bytes again. Only the built-in serdes are known; any other serde: none."""
    kind = type(serde)
    if kind is Json:
        return frozenset((int, str))  # JSON writes floats' NaN as null: not floats
    if kind is Int:
        return frozenset((int,))
    if kind is String:
        return frozenset((str,))
    return frozenset()


class SerializedKeyValueStore(KeyValueStore):
    """A :class:`KeyValueStore` over a task's :class:`WriteBuffer` of the store."""

    def __init__(self, name: str, inner: WriteBuffer, key_serde: Serde, value_serde: Serde) -> None:
        self.name = name
        self.inner = inner
        self._kser = key_serde.serialize
        self._vser = value_serde.serialize
        self._kdes = key_serde.deserialize
        self._vdes = value_serde.deserialize

    def get(self, key: Any) -> Any:
        data = self.inner.get(self._kser(key))
        return None if data is None else self._vdes(data)

    def put(self, key: Any, value: Any) -> None:
        if value is None:
            self.inner.delete(self._kser(key))
        else:
            self.inner.put(self._kser(key), self._vser(value))

    def delete(self, key: Any) -> Any:
        raw_key = self._kser(key)
        old = self.inner.get(raw_key)
        if old is None:
            return None
        self.inner.delete(raw_key)
        return self._vdes(old)

    def range(self, start: Any = None, end: Any = None) -> Iterator[Tuple[Any, Any]]:
        lo: Optional[bytes] = None if start is None else self._kser(start)
        hi: Optional[bytes] = None if end is None else self._kser(end)
        kdes, vdes = self._kdes, self._vdes
        for raw_key, raw_value in self.inner.range(lo, hi):
            yield kdes(raw_key), vdes(raw_value)

    def prefix_scan(self, prefix: bytes) -> Iterator[Tuple[Any, Any]]:
        kdes, vdes = self._kdes, self._vdes
        for raw_key, raw_value in self.inner.range(prefix, None):
            if not raw_key.startswith(prefix):
                break
            yield kdes(raw_key), vdes(raw_value)

    def seek(self, start: Optional[bytes] = None, *, exclusive: bool = False,
             prefix: bytes = b"") -> Iterator[Tuple[bytes, Any, Any]]:
        """``(key bytes, key, value)`` in key-byte order from one seek: from ``start``
        (left out with ``exclusive``; None: from ``prefix``), only keys starting with
        ``prefix``, stopping at the first key past it. Lazy: each entry taken costs one
        iterator step, so a page of N entries reads N (+1) entries whatever the store holds."""
        lo = prefix if start is None or start < prefix else start
        kdes, vdes = self._kdes, self._vdes
        for raw_key, raw_value in self.inner.range(lo or None, None):
            if not raw_key.startswith(prefix):
                return
            if exclusive and raw_key == start:
                continue
            yield raw_key, kdes(raw_key), vdes(raw_value)

    def approximate_num_entries(self) -> int:
        return self.inner.approximate_len()

    def __repr__(self) -> str:
        return f"<KeyValueStore {self.name!r} entries~{self.inner.approximate_len()}>"
