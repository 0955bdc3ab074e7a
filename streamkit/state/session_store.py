"""The session store: one value per (key, session), as in Kafka Streams.

A session is ``[start, end]`` with an inclusive end. Keys are
``<4-byte length><key><8-byte end><8-byte start>`` (big-endian), so one key's
sessions are one contiguous range ordered by end; sessions of one key never
overlap, so that is also their order by start. Values are
``<8-byte timestamp><value bytes>``.

The store is segmented by session end (:func:`session_time_of`): a session
expires once its end is older than stream time minus retention. Reads hide
expired sessions even while they linger in the write buffer or its read cache.
"""
from __future__ import annotations

import struct
from typing import Any, Callable, Iterator, Optional, Tuple

from ..errors import SerializationError
from ..windowing.windowed_keys import Windowed
from .segmented import STREAM_TIME_KEY
from .window_store import TimeOrderedStore

__all__ = ["SessionStore", "session_store_key", "split_session_store_key", "session_time_of"]

_LENGTH = struct.Struct(">I")
_TIME = struct.Struct(">q")
_END_START = struct.Struct(">QQ")
_MAX_TIME = 2**63 - 1
_LAST_SUFFIX = b"\xff" * _END_START.size
_FIRST_KEY = b"\x00"
"""Scans start here: above STREAM_TIME_KEY (b""), at or below every length-prefixed key."""


def session_store_key(key_bytes: bytes, start: int, end: int) -> bytes:
    """The session store's key of ``key_bytes``'s session ``[start, end]``."""
    return _LENGTH.pack(len(key_bytes)) + key_bytes + _END_START.pack(end, start)


def split_session_store_key(data: bytes) -> Tuple[bytes, int, int]:
    """The inverse of :func:`session_store_key`: ``(key_bytes, start, end)``."""
    if len(data) < _LENGTH.size + _END_START.size:
        raise SerializationError(f"session store key too short ({len(data)} bytes): {data[:64]!r}")
    (length,) = _LENGTH.unpack_from(data)
    if len(data) != _LENGTH.size + length + _END_START.size:
        raise SerializationError(
            f"session store key of {len(data)} bytes does not match its key length {length}: {data[:64]!r}")
    key_end = _LENGTH.size + length
    end, start = _END_START.unpack_from(data, key_end)
    return bytes(data[_LENGTH.size:key_end]), start, end


def session_time_of(logical_key: bytes) -> int:
    """The segmenting time of a session store key: the session end."""
    return _END_START.unpack_from(logical_key, len(logical_key) - _END_START.size)[0]


class SessionStore(TimeOrderedStore):
    """Sessions per key: ``Windowed(key, start, end)`` with an inclusive end.

    ``SessionStore(name, inner: WriteBuffer, key_serde, value_serde)``.
    """

    # Public API, on objects

    def find_sessions(self, key: Any, earliest_end: int, latest_start: int) -> Iterator[Tuple[Windowed, Any]]:
        """``key``'s sessions with end >= earliest_end and start <= latest_start, by end."""
        for start, end, value, _ts in self.find_serialized(self.serialize_key(key), earliest_end, latest_start):
            yield Windowed(key, start, end), value

    def fetch(self, key: Any) -> Iterator[Tuple[Windowed, Any]]:
        """Every session of ``key``, by end."""
        return self.find_sessions(key, 0, _MAX_TIME)

    def fetch_session(self, key: Any, start: int, end: int) -> Any:
        """The value of ``key``'s session ``[start, end]``, or ``None``."""
        _check_session(start, end)
        if end < self._cutoff():
            return None
        raw = self.inner.get(session_store_key(self.serialize_key(key), start, end))
        return None if raw is None else self._vdes(raw[8:])

    def put(self, windowed: Windowed, value: Any) -> None:
        """Set the session ``windowed`` to ``value`` (timestamped at its end); ``None`` deletes."""
        _check_session(windowed.start, windowed.end)
        self.put_serialized(self.serialize_key(windowed.key), windowed.start, windowed.end, value, windowed.end)

    def remove(self, windowed: Windowed) -> None:
        """Delete the session ``windowed``."""
        _check_session(windowed.start, windowed.end)
        self.remove_serialized(self.serialize_key(windowed.key), windowed.start, windowed.end)

    def all(self) -> Iterator[Tuple[Windowed, Any]]:
        """Every session, in store order (by length-prefixed key bytes, then end)."""
        cutoff, kdes, vdes = self._cutoff(), self._kdes, self._vdes
        for raw_key, raw in self.inner.range(_FIRST_KEY, None):
            key_bytes, start, end = split_session_store_key(raw_key)
            if end >= cutoff:
                yield Windowed(kdes(key_bytes), start, end), vdes(raw[8:])

    # Internal API, on serialized keys (the runtime's hot path)

    def find_serialized(self, key_bytes: bytes, earliest_end: int, latest_start: int
                        ) -> Iterator[Tuple[int, int, Any, int]]:
        """``(start, end, value, timestamp)`` of the key's sessions with end >= earliest_end
        and start <= latest_start, by end."""
        earliest_end = max(earliest_end, self._cutoff(), 0)
        if earliest_end > _MAX_TIME or latest_start < 0:
            return
        prefix = _LENGTH.pack(len(key_bytes)) + key_bytes
        offset = len(prefix)
        vdes, unpack_key, unpack_time = self._vdes, _END_START.unpack_from, _TIME.unpack_from
        for raw_key, raw in self.inner.range(prefix + _END_START.pack(earliest_end, 0), prefix + _LAST_SUFFIX):
            end, start = unpack_key(raw_key, offset)
            if start > latest_start:
                return  # sessions of a key do not overlap: every later one starts later too
            yield start, end, vdes(raw[8:]), unpack_time(raw)[0]

    def put_serialized(self, key_bytes: bytes, start: int, end: int, value: Any, timestamp: int) -> None:
        """Write the session ``[start, end]`` (``None`` deletes)."""
        key = _LENGTH.pack(len(key_bytes)) + key_bytes + _END_START.pack(end, start)
        if value is None:
            self.inner.delete(key)
        else:
            self.inner.put(key, _TIME.pack(timestamp) + self._vser(value))

    def remove_serialized(self, key_bytes: bytes, start: int, end: int) -> None:
        self.inner.delete(_LENGTH.pack(len(key_bytes)) + key_bytes + _END_START.pack(end, start))

    def on_flush(self, listener: Callable[[Windowed, Any, Any, int], None]) -> None:
        """Call ``listener(windowed, new_value, old_value, timestamp)`` for each session
        written since the last commit, when the commit flushes the store (the record
        cache). ``timestamp`` is the new value's, or the old one's for a delete."""
        kdes, vdes = self._kdes, self._vdes

        def raw_listener(raw_key: bytes, new: Optional[bytes], old: Optional[bytes]) -> None:
            if raw_key == STREAM_TIME_KEY:
                return
            key_bytes, start, end = split_session_store_key(raw_key)
            current = new if new is not None else old
            listener(Windowed(kdes(key_bytes), start, end),
                     None if new is None else vdes(new[8:]),
                     None if old is None else vdes(old[8:]),
                     _TIME.unpack_from(current)[0])  # type: ignore[arg-type]
        self.inner.flush_listeners.append(raw_listener)

    def __repr__(self) -> str:
        return f"<SessionStore {self.name!r} entries~{self.approximate_num_entries()}>"


def _check_session(start: int, end: int) -> None:
    for name, value in (("start", start), ("end", end)):
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= _MAX_TIME:
            raise ValueError(f"session {name} must be an int of epoch ms in [0, 2**63 - 1], got {value!r}")
    if start > end:
        raise ValueError(f"a session needs start <= end, got start={start}, end={end}")
