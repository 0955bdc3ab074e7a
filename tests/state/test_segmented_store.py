"""SegmentedBytesStore on real RocksDB (rocksdict) and in memory: physical layout,
merged scans, retention by whole segments, stream time, reopening."""
from __future__ import annotations

import struct
from typing import Iterator, List, Mapping, Optional, Tuple

import pytest

from streamkit.state.bytes_store import BytesStore
from streamkit.state.memory import InMemoryBytesStore
from streamkit.state.rocksdb import RocksDBBytesStore
from streamkit.state.segmented import (STREAM_TIME_KEY, SegmentedBytesStore, decode_stream_time,
                                       encode_stream_time)

BACKENDS = ["memory", "rocksdb"]
_Q = struct.Struct(">Q")


def lk(name: bytes, time: int) -> bytes:
    """A logical key whose time is its last 8 bytes (as in window store keys)."""
    return name + _Q.pack(time)


def time_of(key: bytes) -> int:
    return _Q.unpack_from(key, len(key) - 8)[0]


def seg(segment: int) -> bytes:
    return _Q.pack(segment)


class Recording(BytesStore):
    """Delegates to a real store and records the calls the segmented store makes."""

    def __init__(self, inner: BytesStore) -> None:
        self.inner = inner
        self.calls: List[Tuple[str, tuple]] = []

    def get(self, key: bytes) -> Optional[bytes]:
        return self.inner.get(key)

    def range(self, start: Optional[bytes], end: Optional[bytes]) -> Iterator[Tuple[bytes, bytes]]:
        self.calls.append(("range", (start, end)))
        return self.inner.range(start, end)

    def apply(self, entries: Mapping[bytes, Optional[bytes]], changelog_offset: Optional[int],
              input_positions: Optional[bytes] = None) -> None:
        self.calls.append(("apply", (dict(entries), changelog_offset)))
        self.inner.apply(entries, changelog_offset, input_positions)

    def delete_range(self, start: bytes, end: bytes) -> None:
        self.calls.append(("delete_range", (start, end)))
        self.inner.delete_range(start, end)

    def changelog_offset(self) -> Optional[int]:
        return self.inner.changelog_offset()

    def input_positions(self) -> Optional[bytes]:
        return self.inner.input_positions()

    def approximate_len(self) -> int:
        return self.inner.approximate_len()

    def reset(self) -> None:
        self.inner.reset()

    def close(self) -> None:
        self.inner.close()

    def named(self, name: str) -> list:
        return [args for call, args in self.calls if call == name]


@pytest.fixture(params=BACKENDS)
def inner(request, tmp_path):
    store = InMemoryBytesStore() if request.param == "memory" else RocksDBBytesStore(str(tmp_path / "db"))
    yield store
    store.close()


def open_segmented(inner: BytesStore, retention_ms: int = 30, segment_interval_ms: int = 10) -> SegmentedBytesStore:
    return SegmentedBytesStore(inner, retention_ms=retention_ms, segment_interval_ms=segment_interval_ms,
                               time_of=time_of)


def test_delete_range_of_byte_stores_is_half_open(inner) -> None:
    inner.apply({k: b"v" for k in (b"a", b"b", b"b\x00", b"bz", b"c", b"d")}, 1)
    list(inner.range(None, None))  # the memory store's sorted key list exists and must be invalidated
    inner.delete_range(b"b", b"c")
    inner.delete_range(b"d", b"a")  # inverted: nothing
    assert [k for k, _ in inner.range(None, None)] == [b"a", b"c", b"d"]
    assert inner.get(b"b\x00") is None and inner.changelog_offset() == 1
    inner.apply({b"b": b"again"}, None)
    assert [k for k, _ in inner.range(None, None)] == [b"a", b"b", b"c", b"d"]


def test_physical_layout_is_segment_prefix_then_logical_key(inner) -> None:
    store = open_segmented(inner, retention_ms=1000)
    store.apply({lk(b"a", 5): b"1", lk(b"a", 25): b"2", STREAM_TIME_KEY: encode_stream_time(25)}, 3)
    assert dict(inner.range(None, None)) == {
        seg(0) + lk(b"a", 5): b"1", seg(2) + lk(b"a", 25): b"2", b"\xff" * 8: encode_stream_time(25)}
    assert store.get(lk(b"a", 25)) == b"2" and store.get(lk(b"a", 15)) is None
    assert store.get(STREAM_TIME_KEY) == encode_stream_time(25) and store.stream_time() == 25
    assert store.segment_ids() == [0, 2]
    assert store.changelog_offset() == 3
    assert store.approximate_len() in (2, 3)  # exact in memory; RocksDB estimates


def test_range_merges_segments_in_logical_order_with_inclusive_bounds(inner) -> None:
    store = open_segmented(inner, retention_ms=1000)
    # Logical order differs from segment order: "b" at time 0 sorts after "a" at time 50.
    keys = [lk(b"b", 0), lk(b"a", 50), lk(b"a\x00", 20), lk(b"a", 1), lk(b"c", 35)]
    store.apply({k: k[:2] for k in keys}, None)
    assert [k for k, _ in store.range(None, None)] == sorted(keys)
    assert [k for k, _ in store.range(lk(b"a", 1), lk(b"a", 50))] == [lk(b"a", 1), lk(b"a", 50)]
    # Without a length prefix "a\x00" at 20 sorts between "a" at 1 and "a" at 50: still logical order.
    assert [k for k, _ in store.range(lk(b"a", 2), lk(b"b", 0))] == [lk(b"a", 50), lk(b"b", 0)]
    assert [k for k, _ in store.range(lk(b"a", 0), lk(b"a", 2))] == [lk(b"a\x00", 20), lk(b"a", 1)]
    assert [k for k, _ in store.range(lk(b"b", 0), None)] == [lk(b"b", 0), lk(b"c", 35)]
    assert [k for k, _ in store.range(None, lk(b"a", 1))] == [lk(b"a\x00", 20), lk(b"a", 1)]
    assert list(store.range(lk(b"c", 0), lk(b"a", 0))) == []
    # The stream time is the logical key b"", first in an open scan.
    store.apply({STREAM_TIME_KEY: encode_stream_time(50)}, None)
    assert next(store.range(None, None)) == (STREAM_TIME_KEY, encode_stream_time(50))
    assert next(store.range(b"\x00", None))[0] == sorted(keys)[0]


def test_retention_skips_expired_puts_and_drops_whole_segments(inner) -> None:
    recording = Recording(inner)
    store = open_segmented(recording, retention_ms=30, segment_interval_ms=10)
    store.apply({lk(b"k", t): b"v" for t in range(0, 60, 5)}, 1)
    assert store.segment_ids() == [0, 1, 2, 3, 4, 5]
    recording.calls.clear()
    # Stream time 59 -> cutoff 29: segments 0 and 1 end at or before it, segment 2 (up to 30) lives.
    store.apply({STREAM_TIME_KEY: encode_stream_time(59), lk(b"k", 3): b"late", lk(b"k", 28): b"late",
                 lk(b"k", 29): b"new", lk(b"k", 5): None}, 2)
    assert store.segment_ids() == [2, 3, 4, 5]
    assert recording.named("delete_range") == [(seg(0), seg(2))]  # one range delete, not per key
    (written, offset), = recording.named("apply")
    assert offset == 2
    assert seg(0) + lk(b"k", 3) not in written and seg(2) + lk(b"k", 28) not in written
    assert written[seg(0) + lk(b"k", 5)] is None  # deletes always pass
    assert written[seg(2) + lk(b"k", 29)] == b"new"
    assert [time_of(k) for k, _ in store.range(b"\x00", None)] == [20, 25, 29, 30, 35, 40, 45, 50, 55]
    assert not any(k[:8] in (seg(0), seg(1)) for k, _ in inner.range(None, None))
    # Puts expired by the stream time of an earlier batch are skipped too.
    store.apply({lk(b"k", 28): b"late"}, 3)
    assert store.get(lk(b"k", 28)) is None
    # Without live expired segments no range delete is issued.
    recording.calls.clear()
    store.apply({lk(b"k", 31): b"v"}, 4)
    assert recording.named("delete_range") == []


def test_expired_segments_with_gaps_go_in_one_range_delete(inner) -> None:
    recording = Recording(inner)
    store = open_segmented(recording, retention_ms=0, segment_interval_ms=10)
    store.apply({lk(b"k", 5): b"v", lk(b"k", 45): b"v", lk(b"k", 95): b"v", lk(b"k", 125): b"v"}, None)
    store.apply({STREAM_TIME_KEY: encode_stream_time(100)}, None)
    assert recording.named("delete_range") == [(seg(0), seg(10))]
    assert store.segment_ids() == [12]


def test_stream_time_never_goes_back(inner) -> None:
    store = open_segmented(inner)
    assert store.stream_time() is None and store.get(STREAM_TIME_KEY) is None
    store.apply({STREAM_TIME_KEY: encode_stream_time(100)}, None)
    store.apply({STREAM_TIME_KEY: encode_stream_time(40), lk(b"k", 60): b"expired"}, None)
    assert store.stream_time() == 100 and store.cutoff == 70
    assert decode_stream_time(inner.get(b"\xff" * 8)) == 100
    assert store.get(lk(b"k", 60)) is None


def test_restore_batch_with_stream_time_after_older_puts(inner) -> None:
    store = open_segmented(inner, retention_ms=30, segment_interval_ms=10)
    # A changelog batch keyed by logical keys: old puts first, the stream time they led to last.
    batch = {lk(b"k", 0): b"old", lk(b"k", 15): b"old", lk(b"k", 40): b"live", lk(b"j", 65): b"live",
             STREAM_TIME_KEY: encode_stream_time(70)}
    store.apply(batch, 5)
    assert store.segment_ids() == [4, 6]
    assert list(store.range(None, None)) == [(STREAM_TIME_KEY, encode_stream_time(70)),
                                             (lk(b"j", 65), b"live"), (lk(b"k", 40), b"live")]
    assert store.changelog_offset() == 5


def test_reopen_rediscovers_segments_and_stream_time_by_seeking(tmp_path) -> None:
    path = str(tmp_path / "db")
    store = open_segmented(RocksDBBytesStore(path), retention_ms=100, segment_interval_ms=10)
    store.apply({lk(b"k%d" % i, t): b"v" for i in range(20) for t in (3, 7, 41, 44, 90)}, 9)
    store.apply({STREAM_TIME_KEY: encode_stream_time(105)}, 10)  # cutoff 5: nothing expires
    assert store.segment_ids() == [0, 4, 9]
    store.close()
    recording = Recording(RocksDBBytesStore(path))
    again = open_segmented(recording, retention_ms=100, segment_interval_ms=10)
    assert again.segment_ids() == [0, 4, 9]
    assert again.stream_time() == 105 and again.changelog_offset() == 10
    assert len(recording.named("range")) == 4  # one seek per segment and one past the last
    assert again.get(lk(b"k5", 41)) == b"v"
    assert len(list(again.range(b"\x00", None))) == 100
    again.apply({STREAM_TIME_KEY: encode_stream_time(150)}, 11)  # cutoff 50
    assert again.segment_ids() == [9]
    again.close()


def test_open_drops_segments_a_crash_left_behind(inner) -> None:
    # A batch advanced the stream time, then the process died before the range delete.
    inner.apply({seg(0) + lk(b"k", 1): b"v", seg(5) + lk(b"k", 55): b"v", b"\xff" * 8: encode_stream_time(60)},
                None)
    store = open_segmented(inner, retention_ms=30, segment_interval_ms=10)
    assert store.segment_ids() == [5] and store.stream_time() == 60
    assert [k for k, _ in inner.range(None, None)] == [seg(5) + lk(b"k", 55), b"\xff" * 8]


def test_logical_delete_range_and_reset(inner) -> None:
    store = open_segmented(inner, retention_ms=1000)
    store.apply({lk(b"a", 1): b"v", lk(b"b", 1): b"v", lk(b"b", 50): b"v", lk(b"c", 50): b"v",
                 STREAM_TIME_KEY: encode_stream_time(50)}, 4)
    store.delete_range(lk(b"b", 0), lk(b"c", 0))
    assert [k for k, _ in store.range(b"\x00", None)] == [lk(b"a", 1), lk(b"c", 50)]
    assert store.stream_time() == 50
    store.reset()
    assert list(store.range(None, None)) == [] and store.segment_ids() == []
    assert store.stream_time() is None and store.changelog_offset() is None


def test_rejects_bad_configuration(inner) -> None:
    with pytest.raises(ValueError, match="segment_interval_ms must be an int >= 1"):
        open_segmented(inner, segment_interval_ms=0)
    with pytest.raises(ValueError, match="retention_ms must be an int >= 0"):
        open_segmented(inner, retention_ms=-1)
