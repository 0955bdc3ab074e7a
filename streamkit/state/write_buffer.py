"""A store's uncommitted writes, in front of its persistent byte store.

Every write of a commit interval lands here; at commit the buffer yields one
changelog record per written key, and after the transport commit it is applied
to the persistent store in one batch together with the changelog offset. So a
hot key costs one changelog record and one RocksDB write per commit, and the
persistent store never holds writes of an uncommitted interval (exactly-once
needs that). Reads see the buffer first.

Committed entries stay in a bounded read cache (absent keys too), so reading a
hot key does not go to RocksDB at every commit interval.

Flush listeners implement the DSL's record cache: an aggregation with caching
on forwards nothing per update; at commit each written key is forwarded once
with its latest value and the value it had at the previous commit.
"""
from __future__ import annotations

import heapq
from typing import Callable, Dict, Iterator, List, Optional, Tuple

from sortedcontainers import SortedList

from .bytes_store import BytesStore

FlushListener = Callable[[bytes, Optional[bytes], Optional[bytes]], None]
"""listener(key, new_value, old_value): raw bytes, None = absent."""

_MISSING = object()
_ENTRY_OVERHEAD = 64  # rough bytes per buffered entry beyond key and value
DEFAULT_READ_CACHE_BYTES = 32 * 1024 * 1024


class WriteBuffer:
    """Buffered reads and writes of one store of one task."""

    def __init__(self, name: str, persistent: BytesStore, *,
                 read_cache_bytes: int = DEFAULT_READ_CACHE_BYTES) -> None:
        self.name = name
        self.persistent = persistent
        self.pending: Dict[bytes, Optional[bytes]] = {}
        self.size_bytes = 0
        self.flush_listeners: List[FlushListener] = []
        self._committed: Dict[bytes, Optional[bytes]] = {}
        """Read cache of persistent entries (None = absent)."""
        self._committed_bytes = 0
        self._read_cache_bytes = read_cache_bytes
        self._pending_sorted: Optional[SortedList] = None
        """The pending keys in order, kept once a range scan needed them (window stores scan
        on every record: sorting the pending writes each time would be quadratic)."""
        self.reads = 0
        """Point reads (:meth:`get`) since the store opened."""
        self.misses = 0
        """Point reads that went to the persistent store (neither buffered nor cached)."""

    def get(self, key: bytes) -> Optional[bytes]:
        self.reads += 1
        value = self.pending.get(key, _MISSING)
        if value is _MISSING:
            value = self._committed.get(key, _MISSING)
            if value is _MISSING:
                self.misses += 1
                value = self.persistent.get(key)
                self._remember(key, value)
        return value  # type: ignore[return-value]

    @property
    def cached_bytes(self) -> int:
        """Bytes held in memory: uncommitted writes and the read cache (approximate)."""
        return self.size_bytes + self._committed_bytes

    def _remember(self, key: bytes, value: Optional[bytes]) -> None:
        committed = self._committed
        if key not in committed:
            if self._committed_bytes > self._read_cache_bytes:
                committed.clear()  # cheaper than LRU bookkeeping on every read
                self._committed_bytes = 0
            self._committed_bytes += len(key) + (len(value) if value else 0) + _ENTRY_OVERHEAD
        committed[key] = value

    def put(self, key: bytes, value: Optional[bytes]) -> None:
        pending = self.pending
        if key not in pending:
            self.size_bytes += len(key) + (len(value) if value else 0) + _ENTRY_OVERHEAD
            if self._pending_sorted is not None:
                self._pending_sorted.add(key)
        pending[key] = value

    def delete(self, key: bytes) -> None:
        self.put(key, None)

    def range(self, start: Optional[bytes], end: Optional[bytes]) -> Iterator[Tuple[bytes, bytes]]:
        """Persistent entries overlaid with buffered ones, in key order."""
        keys = self._pending_sorted
        if keys is None:
            keys = self._pending_sorted = SortedList(self.pending)
        pending = self.pending
        buffered = [(k, pending[k]) for k in keys.irange(start, end)]
        if not buffered:
            yield from self.persistent.range(start, end)
            return
        overridden = {k for k, _ in buffered}
        merged = heapq.merge(((k, 0, v) for k, v in buffered),
                             ((k, 1, v) for k, v in self.persistent.range(start, end) if k not in overridden))
        for key, _source, value in merged:
            if value is not None:
                yield key, value

    def approximate_len(self) -> int:
        return self.persistent.approximate_len() + sum(1 for v in self.pending.values() if v is not None)

    def _get_committed(self, key: bytes) -> Optional[bytes]:
        value = self._committed.get(key, _MISSING)
        if value is _MISSING:
            return self.persistent.get(key)
        return value  # type: ignore[return-value]

    def flush(self) -> None:
        """Forward each buffered key to the flush listeners (latest value, value at last commit)."""
        if not self.flush_listeners:
            return
        get_committed = self._get_committed
        for key, value in list(self.pending.items()):
            old = get_committed(key)
            if old is None and value is None:
                continue
            for listener in self.flush_listeners:
                listener(key, value, old)

    def persist(self, changelog_offset: Optional[int], input_positions: Optional[bytes] = None) -> None:
        """Apply the buffered writes (and the changelog offset they reach, or the encoded
        input positions they reflect) in one batch."""
        if self.pending or changelog_offset is not None or input_positions is not None:
            self.persistent.apply(self.pending, changelog_offset, input_positions)
        for key, value in self.pending.items():
            self._remember(key, value)
        self.pending = {}
        self.size_bytes = 0
        self._pending_sorted = None

    def discard(self) -> None:
        """Forget uncommitted writes (the interval is being abandoned)."""
        self.pending = {}
        self.size_bytes = 0
        self._pending_sorted = None

    def forget_cached(self) -> None:
        """Drop the read cache (the persistent store changed underneath, e.g. a reset)."""
        self._committed = {}
        self._committed_bytes = 0
