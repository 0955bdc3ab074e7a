"""In-memory byte store: a dict plus a lazily sorted key list for scans."""
from __future__ import annotations

import bisect
from typing import Dict, Iterator, List, Mapping, Optional, Tuple

from .bytes_store import BytesStore


class InMemoryBytesStore(BytesStore):
    """For tests and small state. Lost with the process: a worker restores it from
    the changelog's start."""

    def __init__(self) -> None:
        self._data: Dict[bytes, bytes] = {}
        self._sorted: Optional[List[bytes]] = None
        self._offset: Optional[int] = None
        self._input_positions: Optional[bytes] = None

    def get(self, key: bytes) -> Optional[bytes]:
        return self._data.get(key)

    def apply(self, entries: Mapping[bytes, Optional[bytes]], changelog_offset: Optional[int],
              input_positions: Optional[bytes] = None) -> None:
        if input_positions is not None:
            self._input_positions = input_positions
        data = self._data
        for key, value in entries.items():
            if value is None:
                if data.pop(key, None) is not None:
                    self._sorted = None
            else:
                if self._sorted is not None and key not in data:
                    self._sorted = None
                data[key] = value
        if changelog_offset is not None:
            self._offset = changelog_offset

    def delete_range(self, start: bytes, end: bytes) -> None:
        if start >= end:
            return
        if self._sorted is None:
            self._sorted = sorted(self._data)
        keys = self._sorted
        lo, hi = bisect.bisect_left(keys, start), bisect.bisect_left(keys, end)
        if lo == hi:
            return
        data = self._data
        for key in keys[lo:hi]:
            del data[key]
        self._sorted = None

    def changelog_offset(self) -> Optional[int]:
        return self._offset

    def input_positions(self) -> Optional[bytes]:
        return self._input_positions

    def range(self, start: Optional[bytes], end: Optional[bytes]) -> Iterator[Tuple[bytes, bytes]]:
        if self._sorted is None:
            self._sorted = sorted(self._data)
        keys = self._sorted
        lo = 0 if start is None else bisect.bisect_left(keys, start)
        hi = len(keys) if end is None else bisect.bisect_right(keys, end)
        data = self._data
        for key in keys[lo:hi]:  # a snapshot of the slice: writes during iteration are safe
            value = data.get(key)
            if value is not None:
                yield key, value

    def approximate_len(self) -> int:
        return len(self._data)

    def reset(self) -> None:
        self._data, self._sorted, self._offset, self._input_positions = {}, None, None, None
