"""WindowStore over a write buffer and a segmented store, on real RocksDB (rocksdict)
and in memory: layout, fetch bounds, the buffer overlay, retention, stream time,
restore, flush listeners."""
from __future__ import annotations

import struct

import pytest

from streamkit.serdes import Json, String
from streamkit.state.memory import InMemoryBytesStore
from streamkit.state.rocksdb import RocksDBBytesStore
from streamkit.state.segmented import STREAM_TIME_KEY, SegmentedBytesStore, encode_stream_time
from streamkit.state.window_store import WindowStore, window_time_of
from streamkit.state.write_buffer import WriteBuffer
from streamkit.windowing.windowed_keys import Windowed, window_store_key

BACKENDS = ["memory", "rocksdb"]
SIZE = 10
_Q = struct.Struct(">q")


class Opener:
    """Opens (and reopens) a window store whose bytes live at one place."""

    def __init__(self, backend: str, path: str) -> None:
        self.backend, self.path = backend, path
        self.memory = InMemoryBytesStore()
        self.open_stores: list = []

    def __call__(self, retention_ms: int = 1000, segment_interval_ms: int = 100,
                 with_first_timestamp: bool = False) -> WindowStore:
        inner = self.memory if self.backend == "memory" else RocksDBBytesStore(self.path)
        segmented = SegmentedBytesStore(inner, retention_ms=retention_ms, segment_interval_ms=segment_interval_ms,
                                        time_of=window_time_of)
        self.open_stores.append(segmented)
        return WindowStore("windows", WriteBuffer("windows", segmented), String(), Json(),
                           window_size_ms=SIZE, with_first_timestamp=with_first_timestamp)

    def close(self, store: WindowStore) -> None:
        self.open_stores.remove(store.inner.persistent)
        store.inner.persistent.close()


@pytest.fixture(params=BACKENDS)
def open_store(request, tmp_path):
    opener = Opener(request.param, str(tmp_path / "db"))
    yield opener
    for segmented in opener.open_stores:
        segmented.close()


def physical(store: WindowStore) -> dict:
    return dict(store.inner.persistent.inner.range(None, None))


def test_key_and_value_layout(open_store) -> None:
    store = open_store()
    store.put("ab", {"n": 1}, 120, timestamp=125)
    store.inner.persist(1)
    key = window_store_key(b"ab", 120)
    assert key == b"\x00\x00\x00\x02ab" + struct.pack(">Q", 120) and window_time_of(key) == 120
    assert physical(store) == {struct.pack(">Q", 1) + key: _Q.pack(125) + b'{"n":1}'}
    assert store.get("ab", 120) == {"n": 1} and store.get("ab", 110) is None
    assert store.get_serialized(b"ab", 120) == ({"n": 1}, 125)
    store.put("ab", 2, 130)  # the timestamp defaults to the window start
    assert store.get_serialized(b"ab", 130) == (2, 130)


def test_the_open_window_path_reads_and_writes_the_same_entries(open_store) -> None:
    store = open_store()
    key = store.open_window_key(b"ab", 120)
    assert key == window_store_key(b"ab", 120) and store.get_open(key) is None
    store.put_open(key, {"n": 1}, 125)
    assert store.get_serialized(b"ab", 120) == ({"n": 1}, 125) == store.get_open(key)
    store.put_serialized(b"ab", 120, 2, 130)
    assert store.get_open(key) == (2, 130)
    store.inner.persist(1)
    assert physical(store) == {struct.pack(">Q", 1) + key: _Q.pack(130) + b"2"}


def test_keys_that_prefix_each_other_stay_apart(open_store) -> None:
    store = open_store()
    for key in ("a", "a\x00", "ab", "b", ""):
        for start in (0, 10, 250):
            store.put(key, f"{key}@{start}", start)
    store.inner.persist(1)
    assert [v for _, v in store.fetch("a", 0, 1000)] == ["a@0", "a@10", "a@250"]
    assert [v for _, v in store.fetch("a\x00", 0, 1000)] == ["a\x00@0", "a\x00@10", "a\x00@250"]
    assert [v for _, v in store.fetch("", 0, 1000)] == ["@0", "@10", "@250"]
    # Store order: by length-prefixed key (shorter keys first), then start.
    assert [(w.key, w.start) for w, _ in store.all()] == [
        (k, s) for k in ("", "a", "b", "a\x00", "ab") for s in (0, 10, 250)]


def test_fetch_and_fetch_all_bounds_are_inclusive(open_store) -> None:
    store = open_store()
    for start in (0, 10, 20, 30, 150):
        store.put("k", start, start)
        store.put("j", -start, start)
    store.inner.persist(1)
    assert list(store.fetch("k", 10, 30)) == [(Windowed("k", s, s + SIZE), s) for s in (10, 20, 30)]
    assert list(store.fetch("k", 11, 29)) == [(Windowed("k", 20, 30), 20)]
    assert list(store.fetch("k", 30, 10)) == [] and list(store.fetch("missing", 0, 1000)) == []
    assert list(store.fetch("k", -100, 5)) == [(Windowed("k", 0, SIZE), 0)]
    assert list(store.fetch_all(20, 150)) == [(Windowed(k, s, s + SIZE), v) for k in ("j", "k")
                                              for s in (20, 30, 150) for v in [s if k == "k" else -s]]
    assert store.approximate_num_entries() in range(8, 11)


def test_pending_writes_overlay_fetches_before_persist(open_store) -> None:
    store = open_store()
    store.put("k", "old", 0)
    store.put("k", "gone", 10)
    store.inner.persist(1)
    store.put("k", "new", 0)
    store.put("k", None, 10)
    store.put("k", "added", 20)
    assert [(w.start, v) for w, v in store.fetch("k", 0, 100)] == [(0, "new"), (20, "added")]
    assert [(w.start, v) for w, v in store.all()] == [(0, "new"), (20, "added")]
    assert store.get("k", 10) is None
    assert store.inner.persistent.get(window_store_key(b"k", 10)) is not None  # not persisted yet
    store.inner.persist(2)
    assert [(w.start, v) for w, v in store.fetch("k", 0, 100)] == [(0, "new"), (20, "added")]


def test_retention_drops_expired_segments(open_store) -> None:
    store = open_store(retention_ms=300, segment_interval_ms=100)
    for start in range(0, 600, 50):
        store.put("k", start, start)
    store.record_stream_time(450)  # cutoff 150: segment 0 ends at 100 and goes
    store.inner.persist(1)
    segmented = store.inner.persistent
    assert segmented.segment_ids() == [1, 2, 3, 4, 5]
    assert [w.start for w, _ in store.fetch("k", 0, 1000)] == [150, 200, 250, 300, 350, 400, 450, 500, 550]
    store.put("k", "late", 120)  # below the cutoff, in a live segment: never persisted
    store.record_stream_time(620)  # cutoff 320: segments 1 and 2 go
    store.inner.persist(2)
    assert segmented.segment_ids() == [3, 4, 5]
    assert segmented.get(window_store_key(b"k", 120)) is None
    assert store.get("k", 120) is None and store.get("k", 150) is None  # hidden despite the read cache
    assert [w.start for w, _ in store.fetch("k", 0, 1000)] == [350, 400, 450, 500, 550]
    assert [w.start for w, _ in store.fetch_all(0, 1000)] == [350, 400, 450, 500, 550]
    assert not any(k[:8] in (struct.pack(">Q", 1), struct.pack(">Q", 2)) for k in physical(store))


def test_stream_time_pending_then_persisted_and_reopened(open_store) -> None:
    store = open_store()
    assert store.stream_time() == -1
    store.record_stream_time(500)
    store.record_stream_time(300)  # never back
    assert store.stream_time() == 500 and store.inner.pending[STREAM_TIME_KEY] == encode_stream_time(500)
    assert store.inner.persistent.stream_time() is None
    store.inner.persist(7)
    assert store.stream_time() == 500 and STREAM_TIME_KEY not in store.inner.pending
    store.record_stream_time(400)
    assert STREAM_TIME_KEY not in store.inner.pending
    store.put("k", "v", 450)
    store.inner.persist(8)
    if open_store.backend != "rocksdb":
        return
    open_store.close(store)
    again = open_store()
    assert again.stream_time() == 500 and again.get("k", 450) == "v"
    assert again.inner.persistent.segment_ids() == [4] and again.inner.persistent.changelog_offset() == 8


def test_restore_applies_changelog_records_keyed_by_logical_keys(open_store, tmp_path) -> None:
    store = open_store(retention_ms=300, segment_interval_ms=100)
    for start in (0, 100, 400, 550):
        store.put("k", start, start)
    store.record_stream_time(560)
    changelog = dict(store.inner.pending)  # what the commit logs: one record per logical key
    assert STREAM_TIME_KEY in changelog and window_store_key(b"k", 0) in changelog
    # A replica replays it below its own buffer, in one batch, stream time arriving last.
    replica_bytes = SegmentedBytesStore(RocksDBBytesStore(str(tmp_path / "replica")), retention_ms=300,
                                        segment_interval_ms=100, time_of=window_time_of)
    replica_bytes.apply({k: v for k, v in changelog.items() if k != STREAM_TIME_KEY}
                        | {STREAM_TIME_KEY: changelog[STREAM_TIME_KEY]}, 42)
    replica = WindowStore("windows", WriteBuffer("windows", replica_bytes), String(), Json(), window_size_ms=SIZE)
    assert [w.start for w, _ in replica.fetch("k", 0, 1000)] == [400, 550]
    assert replica_bytes.segment_ids() == [4, 5] and replica.stream_time() == 560
    assert replica_bytes.changelog_offset() == 42
    replica_bytes.close()


def test_on_flush_reports_windows_written_since_commit(open_store) -> None:
    store = open_store()
    seen = []
    store.on_flush(lambda windowed, new, old, ts: seen.append((windowed, new, old, ts)))
    store.put("k", 1, 0, timestamp=3)
    store.put("j", 5, 10, timestamp=12)
    store.record_stream_time(12)
    store.inner.flush()
    assert sorted(seen, key=repr) == [(Windowed("j", 10, 20), 5, None, 12), (Windowed("k", 0, 10), 1, None, 3)]
    store.inner.persist(1)
    seen.clear()
    store.put("k", 2, 0, timestamp=7)
    store.put("j", None, 10)
    store.inner.flush()
    assert sorted(seen, key=repr) == [(Windowed("j", 10, 20), None, 5, 12), (Windowed("k", 0, 10), 2, 1, 7)]


def test_delete(open_store) -> None:
    store = open_store()
    store.put("k", 1, 0)
    store.inner.persist(1)
    store.put("k", None, 0)
    assert store.get("k", 0) is None
    store.inner.persist(2)
    assert store.get("k", 0) is None and list(store.all()) == []


def test_first_timestamp_round_trip(open_store) -> None:
    store = open_store(with_first_timestamp=True)
    key = store.serialize_key("k")
    store.put_serialized(key, 20, {"sum": 3}, 27, first_timestamp=21)
    store.put_serialized(key, 30, {"sum": 4}, 35)  # first defaults to the timestamp
    store.inner.persist(1)
    assert physical(store)[struct.pack(">Q", 0) + window_store_key(b"k", 20)] == struct.pack(">qq", 27, 21) + \
        b'{"sum":3}'
    assert store.get_serialized_with_first(key, 20) == ({"sum": 3}, 27, 21)
    assert store.get_serialized(key, 20) == ({"sum": 3}, 27)
    assert store.get("k", 30) == {"sum": 4}
    assert list(store.scan_serialized(key, 0, 100)) == [(20, {"sum": 3}, 27, 21), (30, {"sum": 4}, 35, 35)]
    assert list(store.fetch("k", 25, 30)) == [(Windowed("k", 30, 40), {"sum": 4})]
    assert store.get_serialized_with_first(key, 40) is None


def test_scan_serialized_and_key_errors(open_store) -> None:
    store = open_store()
    key = store.serialize_key("k")
    assert store.serialize_key("k") is key  # string keys are cached
    store.put_serialized(key, 10, "a", 12)
    store.put_serialized(key, 20, "b", 25)
    assert list(store.scan_serialized(key, 10, 20)) == [(10, "a", 12, None), (20, "b", 25, None)]
    assert list(store.scan_serialized(key, 11, 19)) == []
    with pytest.raises(ValueError, match="keeps no first timestamps"):
        store.get_serialized_with_first(key, 10)
    with pytest.raises(ValueError, match="serializes to None"):
        store.serialize_key(None)
    with pytest.raises(ValueError, match="window_start must be an int of epoch ms"):
        store.get("k", -1)
    with pytest.raises(ValueError, match="window_size_ms must be an int >= 1"):
        WindowStore("w", WriteBuffer("w", InMemoryBytesStore()), String(), Json(), window_size_ms=0)
