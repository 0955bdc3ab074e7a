"""The window store: one value per (key, window start), as in Kafka Streams.

Layers: a :class:`~streamkit.state.segmented.SegmentedBytesStore` (segmented by
window start) under a task's :class:`WriteBuffer`, under this typed store.

Keys are :func:`~streamkit.windowing.windowed_keys.window_store_key` (4-byte length,
key, 8-byte start), so one key's windows are one contiguous range by start.
Values are ``<8-byte timestamp>[<8-byte first timestamp>]<value bytes>``: the
largest record timestamp in the window and, for stores created
``with_first_timestamp``, the first one.

Reads hide entries the persistent store has expired (older than its stream time
minus retention) even while they linger in the write buffer or its read cache.
"""
from __future__ import annotations

import struct
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

from ..serdes import Serde
from ..windowing.windowed_keys import Windowed, split_window_store_key
from .segmented import STREAM_TIME_KEY, SegmentedBytesStore, decode_stream_time, encode_stream_time
from .serialized import DECODED_ENTRIES, round_trip_types
from .write_buffer import WriteBuffer

__all__ = ["WindowStore", "window_time_of"]

_LENGTH = struct.Struct(">I")
_TIME = struct.Struct(">q")
_TWO_TIMES = struct.Struct(">qq")
_START = struct.Struct(">Q")
_MAX_TIME = 2**63 - 1
_NO_CUTOFF = -(2**63)
_KEY_CACHE_ENTRIES = 100_000
_FIRST_KEY = b"\x00"
"""Scans start here: above STREAM_TIME_KEY (b""), at or below every length-prefixed key."""


def window_time_of(logical_key: bytes) -> int:
    """The segmenting time of a window store key: the window start."""
    return _START.unpack_from(logical_key, len(logical_key) - 8)[0]


class _NeverExpires:
    cutoff = _NO_CUTOFF


class TimeOrderedStore:
    """What window and session stores share: key serialization, stream time, expiry."""

    def __init__(self, name: str, inner: WriteBuffer, key_serde: Serde, value_serde: Serde) -> None:
        self.name = name
        self.inner = inner
        self._kser = key_serde.serialize
        self._kdes = key_serde.deserialize
        self._vser = value_serde.serialize
        self._vdes = value_serde.deserialize
        self._key_bytes: Dict[Any, bytes] = {}
        persistent = inner.persistent
        # Its ``cutoff`` moves as committed stream time does; a plain byte store never expires.
        self._expiry = persistent if isinstance(persistent, SegmentedBytesStore) else _NeverExpires()
        self.stream_time_source: Optional[Callable[[], int]] = None
        """The owning task's current stream time. Reads hide what it has expired, so what a
        record sees does not depend on when commits (which drop segments) happened."""

    def _cutoff(self) -> int:
        cutoff = self._expiry.cutoff
        source = self.stream_time_source
        if source is not None and isinstance(self._expiry, SegmentedBytesStore):
            current = source() - self._expiry.retention_ms
            if current > cutoff:
                return current
        return cutoff

    def serialize_key(self, key: Any) -> bytes:
        """The key's bytes, remembered for string keys (1, 1.0 and True are equal dict
        keys but serialize apart, so only strings)."""
        if key.__class__ is str:
            data = self._key_bytes.get(key)
            if data is None:
                if len(self._key_bytes) >= _KEY_CACHE_ENTRIES:
                    self._key_bytes.clear()
                data = self._key_bytes[key] = self._serialize_key(key)
            return data
        return self._serialize_key(key)

    def _serialize_key(self, key: Any) -> bytes:
        data = self._kser(key)
        if data is None:
            raise ValueError(f"store {self.name!r}: key {key!r} serializes to None; "
                             "windowed and session stores need a key")
        return data

    def stream_time(self) -> int:
        """The store's stream time (the pending one first), or -1 if unknown."""
        raw = self.inner.pending.get(STREAM_TIME_KEY)
        if raw is None:
            raw = self.inner.persistent.get(STREAM_TIME_KEY)
            if raw is None:
                return -1
        return decode_stream_time(raw)

    def record_stream_time(self, stream_time: int) -> None:
        """Advance the stream time to ``stream_time`` (never back); logged at commit."""
        if stream_time > self.stream_time():
            self.inner.put(STREAM_TIME_KEY, encode_stream_time(stream_time))

    def approximate_num_entries(self) -> int:
        return max(0, self.inner.approximate_len() - (STREAM_TIME_KEY in self.inner.pending))


class WindowStore(TimeOrderedStore):
    """Windows of ``window_size_ms`` per key: ``Windowed(key, start, start + size)``."""

    def __init__(self, name: str, inner: WriteBuffer, key_serde: Serde, value_serde: Serde, *,
                 window_size_ms: int, with_first_timestamp: bool = False) -> None:
        if not isinstance(window_size_ms, int) or isinstance(window_size_ms, bool) or window_size_ms < 1:
            raise ValueError(f"window store {name!r}: window_size_ms must be an int >= 1, got {window_size_ms!r}")
        super().__init__(name, inner, key_serde, value_serde)
        self.window_size_ms = window_size_ms
        self.with_first_timestamp = with_first_timestamp
        self._header = 16 if with_first_timestamp else 8
        self._decoded: Dict[bytes, Tuple[bytes, Any, int]] = {}
        """Stored key -> (the bytes written, value, timestamp) of open windows whose values
        read back as themselves: a read of those very bytes (identity) skips decoding them."""
        self._decodable = round_trip_types(value_serde)

    # Public API, on objects

    def get(self, key: Any, window_start: int) -> Any:
        """The value of ``key``'s window starting at ``window_start``, or ``None``."""
        found = self.get_serialized(self.serialize_key(key), _check_time("window_start", window_start))
        return None if found is None else found[0]

    def put(self, key: Any, value: Any, window_start: int, timestamp: Optional[int] = None) -> None:
        """Set ``key``'s window at ``window_start`` (``None`` deletes). ``timestamp``
        defaults to the window start; the first timestamp, if kept, is set to it too."""
        window_start = _check_time("window_start", window_start)
        self.put_serialized(self.serialize_key(key), window_start, value,
                            window_start if timestamp is None else timestamp)

    def fetch(self, key: Any, time_from: int, time_to: int) -> Iterator[Tuple[Windowed, Any]]:
        """``key``'s windows with start in [time_from, time_to], by start."""
        size = self.window_size_ms
        for start, value, _ts, _first in self.scan_serialized(self.serialize_key(key), time_from, time_to):
            yield Windowed(key, start, start + size), value

    def fetch_all(self, time_from: int, time_to: int) -> Iterator[Tuple[Windowed, Any]]:
        """Every key's windows with start in [time_from, time_to], in store order
        (by length-prefixed key bytes, then start)."""
        return self._scan(max(time_from, 0), time_to)

    def all(self) -> Iterator[Tuple[Windowed, Any]]:
        """Every window, in store order (by length-prefixed key bytes, then start)."""
        return self._scan(0, _MAX_TIME)

    def _scan(self, time_from: int, time_to: int) -> Iterator[Tuple[Windowed, Any]]:
        time_from = max(time_from, self._cutoff())
        if time_from > time_to:
            return
        size, kdes, vdes, header = self.window_size_ms, self._kdes, self._vdes, self._header
        for raw_key, raw in self.inner.range(_FIRST_KEY, None):
            start = window_time_of(raw_key)
            if time_from <= start <= time_to:
                key_bytes, _ = split_window_store_key(raw_key)
                yield Windowed(kdes(key_bytes), start, start + size), vdes(raw[header:])

    # Internal API, on serialized keys (the runtime's hot path)

    def get_serialized(self, key_bytes: bytes, start: int) -> Optional[Tuple[Any, int]]:
        """``(value, timestamp)`` of the window, or ``None``."""
        if start < self._cutoff():
            return None
        raw = self.inner.get(_LENGTH.pack(len(key_bytes)) + key_bytes + _START.pack(start))
        if raw is None:
            return None
        return self._vdes(raw[self._header:]), _TIME.unpack_from(raw)[0]

    def open_window_key(self, key_bytes: bytes, start: int) -> bytes:
        """The stored key of a window the caller knows is open (for get_open/put_open)."""
        return _LENGTH.pack(len(key_bytes)) + key_bytes + _START.pack(start)

    def get_open(self, window_key: bytes) -> Optional[Tuple[Any, int]]:
        """``(value, timestamp)`` of an open window (by :meth:`open_window_key`), or None.
        No expiry check: an open window lies within retention (retention is at least the
        windows' size plus grace, checked by the DSL)."""
        raw = self.inner.get(window_key)
        if raw is None:
            return None
        known = self._decoded.get(window_key)
        if known is not None and known[0] is raw:
            return known[1], known[2]
        return self._vdes(raw[self._header:]), _TIME.unpack_from(raw)[0]

    def put_open(self, window_key: bytes, value: Any, timestamp: int) -> None:
        """Write an open window's aggregate (not None) in a store without first timestamps."""
        data = _TIME.pack(timestamp) + self._vser(value)
        self.inner.put(window_key, data)
        if value.__class__ in self._decodable:
            decoded = self._decoded
            if len(decoded) >= DECODED_ENTRIES:
                decoded.clear()
            decoded[window_key] = (data, value, timestamp)

    def get_serialized_with_first(self, key_bytes: bytes, start: int) -> Optional[Tuple[Any, int, int]]:
        """``(value, timestamp, first_timestamp)`` of the window, or ``None``."""
        if not self.with_first_timestamp:
            raise ValueError(f"window store {self.name!r} keeps no first timestamps "
                             "(create it with with_first_timestamp=True)")
        if start < self._cutoff():
            return None
        raw = self.inner.get(_LENGTH.pack(len(key_bytes)) + key_bytes + _START.pack(start))
        if raw is None:
            return None
        timestamp, first = _TWO_TIMES.unpack_from(raw)
        return self._vdes(raw[16:]), timestamp, first

    def put_serialized(self, key_bytes: bytes, start: int, value: Any, timestamp: int,
                       first_timestamp: Optional[int] = None) -> None:
        """Write the window (``None`` deletes). ``first_timestamp`` (default: ``timestamp``)
        is kept only by stores ``with_first_timestamp``."""
        key = _LENGTH.pack(len(key_bytes)) + key_bytes + _START.pack(start)
        if value is None:
            self.inner.delete(key)
        elif self.with_first_timestamp:
            first = timestamp if first_timestamp is None else first_timestamp
            self.inner.put(key, _TWO_TIMES.pack(timestamp, first) + self._vser(value))
        else:
            self.inner.put(key, _TIME.pack(timestamp) + self._vser(value))

    def scan_serialized(self, key_bytes: bytes, start_from: int, start_to: int
                        ) -> Iterator[Tuple[int, Any, int, Optional[int]]]:
        """``(start, value, timestamp, first_timestamp or None)`` of the key's windows
        with start in [start_from, start_to], by start."""
        start_from = max(start_from, self._cutoff(), 0)
        start_to = min(start_to, _MAX_TIME)
        if start_from > start_to:
            return
        prefix = _LENGTH.pack(len(key_bytes)) + key_bytes
        offset = len(prefix)
        vdes, unpack_start = self._vdes, _START.unpack_from
        entries = self.inner.range(prefix + _START.pack(start_from), prefix + _START.pack(start_to))
        if self.with_first_timestamp:
            unpack = _TWO_TIMES.unpack_from
            for raw_key, raw in entries:
                timestamp, first = unpack(raw)
                yield unpack_start(raw_key, offset)[0], vdes(raw[16:]), timestamp, first
        else:
            unpack_time = _TIME.unpack_from
            for raw_key, raw in entries:
                yield unpack_start(raw_key, offset)[0], vdes(raw[8:]), unpack_time(raw)[0], None

    def on_flush(self, listener: Callable[[Windowed, Any, Any, int], None]) -> None:
        """Call ``listener(windowed, new_value, old_value, timestamp)`` for each window
        written since the last commit, when the commit flushes the store (the record
        cache). ``timestamp`` is the new value's, or the old one's for a delete."""
        kdes, vdes, header, size = self._kdes, self._vdes, self._header, self.window_size_ms

        def raw_listener(raw_key: bytes, new: Optional[bytes], old: Optional[bytes]) -> None:
            if raw_key == STREAM_TIME_KEY:
                return
            key_bytes, start = split_window_store_key(raw_key)
            current = new if new is not None else old
            listener(Windowed(kdes(key_bytes), start, start + size),
                     None if new is None else vdes(new[header:]),
                     None if old is None else vdes(old[header:]),
                     _TIME.unpack_from(current)[0])  # type: ignore[arg-type]
        self.inner.flush_listeners.append(raw_listener)

    def __repr__(self) -> str:
        return (f"<WindowStore {self.name!r} window_size_ms={self.window_size_ms} "
                f"entries~{self.approximate_num_entries()}>")


def _check_time(name: str, value: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= _MAX_TIME:
        raise ValueError(f"{name} must be an int of epoch ms in [0, 2**63 - 1], got {value!r}")
    return value

