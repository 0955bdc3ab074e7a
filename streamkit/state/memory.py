"""In-memory byte store: a dict plus a lazily sorted key list for scans."""
from __future__ import annotations

import bisect
from typing import Dict, Iterator, List, Optional, Tuple

from .bytes_store import BytesStore


class InMemoryBytesStore(BytesStore):
    """For tests and small state; lost with the process (the changelog restores it)."""

    def __init__(self) -> None:
        self._data: Dict[bytes, bytes] = {}
        self._sorted: Optional[List[bytes]] = None

    def get(self, key: bytes) -> Optional[bytes]:
        return self._data.get(key)

    def put(self, key: bytes, value: bytes) -> None:
        if self._sorted is not None and key not in self._data:
            self._sorted = None
        self._data[key] = value

    def delete(self, key: bytes) -> None:
        if self._data.pop(key, None) is not None:
            self._sorted = None

    def range(self, start: Optional[bytes], end: Optional[bytes]) -> Iterator[Tuple[bytes, bytes]]:
        if self._sorted is None:
            self._sorted = sorted(self._data)
        keys = self._sorted
        lo = 0 if start is None else bisect.bisect_left(keys, start)
        hi = len(keys) if end is None else bisect.bisect_right(keys, end)
        data = self._data
        # Snapshot the slice so writes during iteration cannot break it.
        for key in keys[lo:hi]:
            value = data.get(key)
            if value is not None:
                yield key, value

    def __len__(self) -> int:
        return len(self._data)
