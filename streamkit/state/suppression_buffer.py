"""The buffer of a suppression: held-back table updates, one per key, each due at a
stream time (its window's close, or its time limit).

Entries live in the task's write buffer like any store's, so they are changelogged
and restored; an in-memory index of due times (rebuilt from the store on first
use after a restore) finds what is due without scanning.
"""
from __future__ import annotations

import heapq
import struct
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from ..serdes import Serde
from .segmented import STREAM_TIME_KEY
from .write_buffer import WriteBuffer

_ENTRY = b"\x01"
_END = b"\x02"
_HEADER = struct.Struct(">qqii")  # due, timestamp, new length, old length (-1 = None)
_TIME = struct.Struct(">q")
_ENTRY_OVERHEAD = 64

Emit = Callable[[bytes, Optional[bytes], Optional[bytes], int], None]
"""emit(key_bytes, new_value_bytes, old_value_bytes, timestamp)."""


def _encode(due: int, timestamp: int, new: Optional[bytes], old: Optional[bytes]) -> bytes:
    return (_HEADER.pack(due, timestamp, -1 if new is None else len(new), -1 if old is None else len(old))
            + (new or b"") + (old or b""))


def _decode(raw: bytes) -> Tuple[int, int, Optional[bytes], Optional[bytes]]:
    due, timestamp, new_len, old_len = _HEADER.unpack_from(raw)
    at = _HEADER.size
    new = None if new_len < 0 else raw[at:at + new_len]
    at += max(new_len, 0)
    old = None if old_len < 0 else raw[at:at + old_len]
    return due, timestamp, new, old


class SuppressionBuffer:
    """Held-back updates of one suppression node of one task."""

    def __init__(self, name: str, inner: WriteBuffer, key_serde: Serde, value_serde: Serde) -> None:
        self.name = name
        self.inner = inner
        self.key_serde = key_serde
        self.value_serde = value_serde
        self._kser, self._kdes = key_serde.serialize, key_serde.deserialize
        self._vdes = value_serde.deserialize
        self._due: Optional[Dict[bytes, int]] = None
        self._sizes: Dict[bytes, int] = {}
        self._heap: List[Tuple[int, bytes]] = []
        self.size_bytes = 0

    # -- index ------------------------------------------------------------------------

    def _index(self) -> Dict[bytes, int]:
        if self._due is None:
            self._due, self._sizes, self._heap, self.size_bytes = {}, {}, [], 0
            for key, raw in self.inner.range(_ENTRY, _END):
                self._track(key[1:], _decode(raw)[0], len(key) + len(raw))
        return self._due

    def _track(self, key: bytes, due: int, size: int) -> None:
        assert self._due is not None
        self._due[key] = due
        self._set_size(key, size)
        heapq.heappush(self._heap, (due, key))

    def _untrack(self, key: bytes) -> None:
        assert self._due is not None
        self._due.pop(key, None)
        self.size_bytes -= self._sizes.pop(key, 0)

    def reset_index(self) -> None:
        """Forget the index (the store was emptied or replaced underneath)."""
        self._due = None

    # -- runtime ----------------------------------------------------------------------

    @property
    def count(self) -> int:
        return len(self._index())

    def next_due(self) -> float:
        """The earliest due time, or infinity when the buffer is empty."""
        due = self._due if self._due is not None else self._index()
        heap = self._heap
        while heap and due.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)  # superseded by a later put or an eviction
        return heap[0][0] if heap else float("inf")

    def holds(self, key: bytes) -> bool:
        """Whether an update of ``key`` is held back."""
        return key in (self._due if self._due is not None else self._index())

    def put(self, key: bytes, due: int, timestamp: int, new: Optional[bytes], old: Optional[bytes]) -> None:
        """Hold back ``new`` for ``key``. A key already held keeps its due time and its
        ``old`` (the value downstream last saw; the ``old`` given is then ignored). An update
        that cancels out (no value before, none now) is not held for a key not held; a held
        key keeps its entry and due time (a later update does not restart its time limit),
        and nothing is emitted for it unless a value comes before it is due."""
        index = self._due if self._due is not None else self._index()
        stored_key = _ENTRY + key
        held_due = index.get(key)
        if held_due is not None:
            due, _ts, _new, old = _decode(self.inner.get(stored_key))  # type: ignore[arg-type]
        elif new is None and old is None:
            return
        raw = _encode(due, timestamp, new, old)
        self.inner.put(stored_key, raw)
        if held_due != due:
            self._track(key, due, len(stored_key) + len(raw))
        else:
            self._set_size(key, len(stored_key) + len(raw))

    def _set_size(self, key: bytes, size: int) -> None:
        self.size_bytes += size + _ENTRY_OVERHEAD - self._sizes.get(key, 0)
        self._sizes[key] = size + _ENTRY_OVERHEAD

    def evict_due(self, stream_time: int, emit: Emit) -> int:
        """Emit and remove every entry due at or before ``stream_time``, by due time."""
        emitted = 0
        while self.next_due() <= stream_time:
            _due, key = heapq.heappop(self._heap)
            self._emit(key, emit)
            emitted += 1
        return emitted

    def evict_oldest(self, emit: Emit) -> None:
        """Emit and remove the entry due first (the buffer is full)."""
        if self.next_due() != float("inf"):
            _due, key = heapq.heappop(self._heap)
            self._emit(key, emit)

    def _emit(self, key: bytes, emit: Emit) -> None:
        stored_key = _ENTRY + key
        _due, timestamp, new, old = _decode(self.inner.get(stored_key))  # type: ignore[arg-type]
        self.inner.delete(stored_key)
        self._untrack(key)
        if new is not None or old is not None:  # an update that cancelled out changes nothing downstream
            emit(key, new, old, timestamp)

    # -- stream time --------------------------------------------------------------------

    def stream_time(self) -> int:
        raw = self.inner.get(STREAM_TIME_KEY)
        return -1 if raw is None else _TIME.unpack(raw)[0]

    def record_stream_time(self, stream_time: int) -> None:
        if stream_time > self.stream_time():
            self.inner.put(STREAM_TIME_KEY, _TIME.pack(stream_time))

    # -- reads (test driver, Processor API) ---------------------------------------------

    def get(self, key: Any) -> Any:
        """The held-back value of ``key`` (``None`` if none is held or it is a deletion)."""
        raw = self.inner.get(_ENTRY + self._kser(key))
        if raw is None:
            return None
        new = _decode(raw)[2]
        return None if new is None else self._vdes(new)

    def all(self) -> Iterator[Tuple[Any, Any]]:
        """Every held-back (key, value), in key order."""
        for key, raw in self.inner.range(_ENTRY, _END):
            new = _decode(raw)[2]
            yield self._kdes(key[1:]), None if new is None else self._vdes(new)

    def approximate_num_entries(self) -> int:
        return self.count

    def __repr__(self) -> str:
        return f"<SuppressionBuffer {self.name!r}>"
