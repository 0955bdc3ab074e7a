"""A byte store split into time segments, so retention drops whole segments.

Window and session stores keep data for a retention period of stream time. As
Kafka Streams does, their entries are grouped by time into segments of
``segment_interval_ms``; when stream time passes a segment's end plus the
retention, the whole segment goes with one range delete instead of one delete
per key.

Everything above this class (write buffer, changelog, restore) sees *logical*
keys: the segment is a physical key prefix added and removed here.

Physical layout in the inner store::

    <8-byte big-endian segment id><logical key>   one entry per logical key
    b"\\xff" * 8                                   the stream time (logical key b"")

Segment ids are ``time // segment_interval_ms`` with times in [0, 2**63), so
their first byte is below 0x80 and the stream-time entry sorts after every
segment.
"""
from __future__ import annotations

import bisect
import heapq
import struct
from typing import Callable, Dict, Iterator, List, Mapping, Optional, Set, Tuple

from .bytes_store import BytesStore

__all__ = ["SegmentedBytesStore", "STREAM_TIME_KEY", "encode_stream_time", "decode_stream_time"]

STREAM_TIME_KEY = b""
"""The reserved logical key holding a store's stream time (8-byte big-endian signed)."""

_SEGMENT = struct.Struct(">Q")
_TIME = struct.Struct(">q")
_STREAM_TIME_PHYSICAL = b"\xff" * 8
_NO_CUTOFF = -(2**63)
_PREFIX = _SEGMENT.size


def encode_stream_time(stream_time: int) -> bytes:
    """The stored form of a stream time (the value of :data:`STREAM_TIME_KEY`)."""
    return _TIME.pack(stream_time)


def decode_stream_time(raw: bytes) -> int:
    """The inverse of :func:`encode_stream_time`."""
    return _TIME.unpack(raw)[0]


class SegmentedBytesStore(BytesStore):
    """A :class:`BytesStore` of logical keys over ``inner``, segmented by ``time_of(key)``.

    ``apply`` enforces retention: with stream time ``T`` (the largest value ever
    written under :data:`STREAM_TIME_KEY`) and ``cutoff = T - retention_ms``, puts
    of keys with ``time_of(key) < cutoff`` are skipped, and every segment that
    ends at or before the cutoff is deleted.
    """

    def __init__(self, inner: BytesStore, *, retention_ms: int, segment_interval_ms: int,
                 time_of: Callable[[bytes], int]) -> None:
        if not isinstance(retention_ms, int) or retention_ms < 0:
            raise ValueError(f"retention_ms must be an int >= 0, got {retention_ms!r}")
        if not isinstance(segment_interval_ms, int) or segment_interval_ms < 1:
            raise ValueError(f"segment_interval_ms must be an int >= 1, got {segment_interval_ms!r}")
        self.inner = inner
        self.retention_ms = retention_ms
        self.segment_interval_ms = segment_interval_ms
        self._time_of = time_of
        self._segments: Set[int] = set()
        self._sorted_segments: Optional[List[int]] = None
        self._stream_time: Optional[int] = None
        self.cutoff = _NO_CUTOFF
        """Keys with ``time_of(key) < cutoff`` are expired (stream time - retention)."""
        self._load()

    # Opening

    def _load(self) -> None:
        raw = self.inner.get(_STREAM_TIME_PHYSICAL)
        if raw is not None:
            self._set_stream_time(decode_stream_time(raw))
        self._segments = set(self._discover_segments())
        self._sorted_segments = None
        # A crash between a batch and its range delete leaves expired segments behind.
        self._drop_expired()

    def _discover_segments(self) -> Iterator[int]:
        """Live segment ids, found with one seek per segment rather than a full scan."""
        seek = b""
        while True:
            first = next(iter(self.inner.range(seek, _STREAM_TIME_PHYSICAL)), None)
            if first is None or first[0][:_PREFIX] == _STREAM_TIME_PHYSICAL:
                return
            segment = _SEGMENT.unpack_from(first[0])[0]
            yield segment
            seek = _SEGMENT.pack(segment + 1)

    # Stream time and retention

    def stream_time(self) -> Optional[int]:
        """The persisted stream time, or None if none was ever written."""
        return self._stream_time

    def _set_stream_time(self, stream_time: int) -> None:
        self._stream_time = stream_time
        self.cutoff = stream_time - self.retention_ms

    def segment_ids(self) -> List[int]:
        """The live segment ids, ascending."""
        return list(self._ordered_segments())

    def _ordered_segments(self) -> List[int]:
        if self._sorted_segments is None:
            self._sorted_segments = sorted(self._segments)
        return self._sorted_segments

    def _drop_expired(self) -> None:
        if self.cutoff == _NO_CUTOFF:
            return
        # A segment is expired when (segment + 1) * interval <= cutoff.
        limit = self.cutoff // self.segment_interval_ms
        segments = self._ordered_segments()
        expired = bisect.bisect_left(segments, limit)
        if not expired:
            return
        # No keys exist between live segments, so one range covers every expired one.
        self.inner.delete_range(_SEGMENT.pack(segments[0]), _SEGMENT.pack(segments[expired - 1] + 1))
        self._segments.difference_update(segments[:expired])
        self._sorted_segments = segments[expired:]

    # BytesStore

    def get(self, key: bytes) -> Optional[bytes]:
        if key == STREAM_TIME_KEY:
            return None if self._stream_time is None else encode_stream_time(self._stream_time)
        return self.inner.get(_SEGMENT.pack(self._segment_of(key)) + key)

    def _segment_of(self, key: bytes) -> int:
        time = self._time_of(key)
        if time < 0:
            raise ValueError(f"segmented store: key {key[:64]!r} has a negative time {time}")
        return time // self.segment_interval_ms

    def range(self, start: Optional[bytes], end: Optional[bytes]) -> Iterator[Tuple[bytes, bytes]]:
        """Entries with start <= key <= end in logical key order, merged across segments."""
        if start is not None and end is not None and start > end:
            return
        if not start and self._stream_time is not None:
            yield STREAM_TIME_KEY, encode_stream_time(self._stream_time)
        segments = self._ordered_segments()
        bounds = self._time_bounds(start, end)
        if bounds is not None:
            first, last = bounds[0] // self.segment_interval_ms, bounds[1] // self.segment_interval_ms
            segments = segments[bisect.bisect_left(segments, first):bisect.bisect_right(segments, last)]
        scans = [self._scan_segment(segment, start, end) for segment in segments]
        if len(scans) == 1:
            yield from scans[0]
        elif scans:
            # A logical key lives in exactly one segment, so keys never tie across scans.
            yield from heapq.merge(*scans)

    def _time_bounds(self, start: Optional[bytes], end: Optional[bytes]) -> Optional[Tuple[int, int]]:
        """The times a scan can meet, when ``start`` and ``end`` are keys of one record key.

        Window and session keys begin with a 4-byte length and the record key; within one
        record key, logical order is time order, so only the segments between the two
        times can hold entries. A scan across record keys may meet any time."""
        if not start or not end or len(start) != len(end) or len(start) < 4:
            return None
        key_end = 4 + int.from_bytes(start[:4], "big")
        if key_end > len(start) or start[:key_end] != end[:key_end]:
            return None
        try:
            return self._time_of(start), self._time_of(end)
        except Exception:  # noqa: BLE001 - not a well-formed key: scan every segment
            return None

    def _scan_segment(self, segment: int, start: Optional[bytes], end: Optional[bytes]
                      ) -> Iterator[Tuple[bytes, bytes]]:
        prefix = _SEGMENT.pack(segment)
        lo = prefix + start if start else prefix
        if end is not None:
            for key, value in self.inner.range(lo, prefix + end):
                yield key[_PREFIX:], value
            return
        bound = _SEGMENT.pack(segment + 1)
        for key, value in self.inner.range(lo, bound):
            if key == bound:
                return
            yield key[_PREFIX:], value

    def apply(self, entries: Mapping[bytes, Optional[bytes]], changelog_offset: Optional[int],
              input_positions: Optional[bytes] = None) -> None:
        """Write logical ``entries``, skipping expired puts, then drop expired segments."""
        old_time = self._stream_time
        new_time = old_time
        raw_time = entries.get(STREAM_TIME_KEY)
        if raw_time is not None:
            written = decode_stream_time(raw_time)
            if old_time is None or written > old_time:  # stream time never goes back
                new_time = written
        cutoff = _NO_CUTOFF if new_time is None else new_time - self.retention_ms
        physical: Dict[bytes, Optional[bytes]] = {}
        added: Set[int] = set()
        pack, time_of, interval = _SEGMENT.pack, self._time_of, self.segment_interval_ms
        for key, value in entries.items():
            if key == STREAM_TIME_KEY:
                continue
            time = time_of(key)
            if time < 0:
                raise ValueError(f"segmented store: key {key[:64]!r} has a negative time {time}")
            if value is not None:
                if time < cutoff:
                    continue  # expired: its segment is gone or going
                added.add(time // interval)
            physical[pack(time // interval) + key] = value
        if new_time != old_time:
            physical[_STREAM_TIME_PHYSICAL] = encode_stream_time(new_time)  # type: ignore[arg-type]
        self.inner.apply(physical, changelog_offset, input_positions)
        if new_time != old_time:
            self._set_stream_time(new_time)  # type: ignore[arg-type]
        if not added <= self._segments:
            self._segments |= added
            self._sorted_segments = None
        self._drop_expired()

    def delete_range(self, start: bytes, end: bytes) -> None:
        if start >= end:
            return
        if not start and self._stream_time is not None:
            self.inner.apply({_STREAM_TIME_PHYSICAL: None}, None)
            self._stream_time, self.cutoff = None, _NO_CUTOFF
        for segment in self._ordered_segments():
            prefix = _SEGMENT.pack(segment)
            self.inner.delete_range(prefix + start, prefix + end)

    def changelog_offset(self) -> Optional[int]:
        return self.inner.changelog_offset()

    def input_positions(self) -> Optional[bytes]:
        return self.inner.input_positions()

    def approximate_len(self) -> int:
        return max(0, self.inner.approximate_len() - (self._stream_time is not None))

    def reset(self) -> None:
        self.inner.reset()
        self._segments, self._sorted_segments = set(), None
        self._stream_time, self.cutoff = None, _NO_CUTOFF

    def close(self) -> None:
        self.inner.close()

    def __repr__(self) -> str:
        return (f"<SegmentedBytesStore segments={self.segment_ids()} stream_time={self._stream_time} "
                f"retention_ms={self.retention_ms} segment_interval_ms={self.segment_interval_ms}>")
