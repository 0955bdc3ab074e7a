"""SessionStore over a write buffer and a segmented store, on real RocksDB (rocksdict)
and in memory: layout, find_sessions bounds, the buffer overlay, retention, stream
time, restore, flush listeners."""
from __future__ import annotations

import struct

import pytest

from streamkit.serdes import Json, String
from streamkit.state.memory import InMemoryBytesStore
from streamkit.state.rocksdb import RocksDBBytesStore
from streamkit.state.segmented import STREAM_TIME_KEY, SegmentedBytesStore
from streamkit.state.session_store import (SessionStore, session_store_key, session_time_of,
                                           split_session_store_key)
from streamkit.state.write_buffer import WriteBuffer
from streamkit.windowing.windowed_keys import Windowed

BACKENDS = ["memory", "rocksdb"]
_Q = struct.Struct(">Q")


class Opener:
    """Opens (and reopens) a session store whose bytes live at one place."""

    def __init__(self, backend: str, path: str) -> None:
        self.backend, self.path = backend, path
        self.memory = InMemoryBytesStore()
        self.open_stores: list = []

    def __call__(self, retention_ms: int = 1000, segment_interval_ms: int = 100) -> SessionStore:
        inner = self.memory if self.backend == "memory" else RocksDBBytesStore(self.path)
        segmented = SegmentedBytesStore(inner, retention_ms=retention_ms, segment_interval_ms=segment_interval_ms,
                                        time_of=session_time_of)
        self.open_stores.append(segmented)
        return SessionStore("sessions", WriteBuffer("sessions", segmented), String(), Json())

    def close(self, store: SessionStore) -> None:
        self.open_stores.remove(store.inner.persistent)
        store.inner.persistent.close()


@pytest.fixture(params=BACKENDS)
def open_store(request, tmp_path):
    opener = Opener(request.param, str(tmp_path / "db"))
    yield opener
    for segmented in opener.open_stores:
        segmented.close()


def sessions(found) -> list:
    return [(w.key, w.start, w.end, v) for w, v in found]


def test_key_and_value_layout(open_store) -> None:
    store = open_store()
    store.put(Windowed("ab", 120, 250), {"n": 1})
    store.inner.persist(1)
    key = session_store_key(b"ab", 120, 250)
    assert key == b"\x00\x00\x00\x02ab" + _Q.pack(250) + _Q.pack(120)
    assert session_time_of(key) == 250 and split_session_store_key(key) == (b"ab", 120, 250)
    # Segmented by end; the value carries the session's timestamp (its end for a public put).
    assert dict(store.inner.persistent.inner.range(None, None)) == {_Q.pack(2) + key: _Q.pack(250) + b'{"n":1}'}
    assert store.fetch_session("ab", 120, 250) == {"n": 1}
    assert store.fetch_session("ab", 120, 251) is None


def test_keys_that_prefix_each_other_stay_apart(open_store) -> None:
    store = open_store()
    for key in ("a", "a\x00", "ab", ""):
        store.put(Windowed(key, 0, 5), f"{key}1")
        store.put(Windowed(key, 300, 300), f"{key}2")
    store.inner.persist(1)
    assert sessions(store.fetch("a")) == [("a", 0, 5, "a1"), ("a", 300, 300, "a2")]
    assert sessions(store.fetch("a\x00")) == [("a\x00", 0, 5, "a\x001"), ("a\x00", 300, 300, "a\x002")]
    assert [(w.key, w.start) for w, _ in store.all()] == [
        (k, s) for k in ("", "a", "a\x00", "ab") for s in (0, 300)]


def test_find_sessions_bounds_are_inclusive(open_store) -> None:
    store = open_store()
    for start, end in ((0, 10), (20, 30), (40, 40), (60, 90), (200, 250)):
        store.put(Windowed("k", start, end), end)
        store.put(Windowed("j", start, end), -end)
    store.inner.persist(1)
    assert [(s, e) for _, s, e, _ in sessions(store.find_sessions("k", 10, 60))] == [(0, 10), (20, 30), (40, 40),
                                                                                    (60, 90)]
    assert [(s, e) for _, s, e, _ in sessions(store.find_sessions("k", 11, 59))] == [(20, 30), (40, 40)]
    assert [(s, e) for _, s, e, _ in sessions(store.find_sessions("k", 40, 40))] == [(40, 40)]
    assert list(store.find_sessions("k", 91, 199)) == [] and list(store.find_sessions("k", 50, 30)) == []
    assert list(store.find_sessions("missing", 0, 1000)) == []
    assert list(store.find_serialized(b"k", 250, 2**63)) == [(200, 250, 250, 250)]
    assert len(list(store.fetch("j"))) == 5 and store.approximate_num_entries() in range(8, 11)


def test_merging_sessions_through_the_buffer_overlay(open_store) -> None:
    store = open_store()
    store.put(Windowed("k", 0, 10), 1)
    store.put(Windowed("k", 30, 40), 2)
    store.inner.persist(1)
    # A record at 20 with a gap of 10 merges both into [0, 40]: remove them, put the merge.
    key = store.serialize_key("k")
    found = list(store.find_serialized(key, 20 - 10, 20 + 10))
    assert [(s, e) for s, e, _, _ in found] == [(0, 10), (30, 40)]
    for start, end, _, _ in found:
        store.remove_serialized(key, start, end)
    store.put_serialized(key, 0, 40, 1 + 2 + 1, 20)
    assert sessions(store.fetch("k")) == [("k", 0, 40, 4)]  # pending writes, before persist
    assert store.inner.persistent.get(session_store_key(b"k", 0, 10)) is not None
    store.inner.persist(2)
    assert sessions(store.fetch("k")) == [("k", 0, 40, 4)]
    assert list(store.find_serialized(key, 0, 100)) == [(0, 40, 4, 20)]


def test_put_none_and_remove_delete(open_store) -> None:
    store = open_store()
    store.put(Windowed("k", 0, 10), 1)
    store.put(Windowed("k", 20, 30), 2)
    store.inner.persist(1)
    store.put(Windowed("k", 0, 10), None)
    store.remove(Windowed("k", 20, 30))
    assert list(store.fetch("k")) == []
    store.inner.persist(2)
    assert list(store.all()) == [] and store.fetch_session("k", 0, 10) is None
    with pytest.raises(ValueError, match="session end must be an int"):
        store.fetch_session("k", 0, -1)
    with pytest.raises(ValueError, match="start <= end"):
        store.fetch_session("k", 5, 4)


def test_retention_drops_sessions_by_end(open_store) -> None:
    store = open_store(retention_ms=300, segment_interval_ms=100)
    # A long session that started early lives by its end.
    store.put_serialized(b"k", 0, 350, "long", 350)
    for end in range(0, 600, 100):
        store.put_serialized(b"j", end, end + 10, end, end + 10)
    store.record_stream_time(510)  # cutoff 210: segments 0 and 1 (ends below 200) go
    store.inner.persist(1)
    segmented = store.inner.persistent
    assert segmented.segment_ids() == [2, 3, 4, 5]
    assert [(w.start, w.end) for w, _ in store.fetch("j")] == [(200, 210), (300, 310), (400, 410), (500, 510)]
    assert sessions(store.fetch("k")) == [("k", 0, 350, "long")]
    store.put_serialized(b"j", 205, 209, "late", 209)  # below the cutoff: never persisted
    store.inner.persist(2)
    assert store.fetch_session("j", 205, 209) is None
    assert segmented.get(session_store_key(b"j", 205, 209)) is None
    store.record_stream_time(720)  # cutoff 420
    store.inner.persist(3)
    assert segmented.segment_ids() == [4, 5]
    assert sessions(store.all()) == [("j", 500, 510, 500)]
    assert store.fetch_session("k", 0, 350) is None  # hidden despite the read cache


def test_stream_time_and_segments_survive_reopen(open_store) -> None:
    store = open_store()
    assert store.stream_time() == -1
    store.put(Windowed("k", 120, 480), "v")
    store.record_stream_time(480)
    store.record_stream_time(470)
    assert store.stream_time() == 480
    store.inner.persist(5)
    if open_store.backend != "rocksdb":
        return
    open_store.close(store)
    again = open_store()
    assert again.stream_time() == 480 and again.inner.persistent.segment_ids() == [4]
    assert sessions(again.fetch("k")) == [("k", 120, 480, "v")]


def test_restore_applies_changelog_records_keyed_by_logical_keys(open_store, tmp_path) -> None:
    store = open_store(retention_ms=300, segment_interval_ms=100)
    store.put_serialized(b"k", 0, 50, "old", 50)
    store.put_serialized(b"k", 400, 450, "live", 450)
    store.record_stream_time(450)
    changelog = dict(store.inner.pending)
    replica_bytes = SegmentedBytesStore(RocksDBBytesStore(str(tmp_path / "replica")), retention_ms=300,
                                        segment_interval_ms=100, time_of=session_time_of)
    replica_bytes.apply({k: v for k, v in changelog.items() if k != STREAM_TIME_KEY}
                        | {STREAM_TIME_KEY: changelog[STREAM_TIME_KEY]}, 9)
    replica = SessionStore("sessions", WriteBuffer("sessions", replica_bytes), String(), Json())
    assert sessions(replica.fetch("k")) == [("k", 400, 450, "live")]
    assert replica.stream_time() == 450 and replica_bytes.segment_ids() == [4]
    replica_bytes.close()


def test_on_flush_reports_sessions_written_since_commit(open_store) -> None:
    store = open_store()
    seen = []
    store.on_flush(lambda windowed, new, old, ts: seen.append((windowed, new, old, ts)))
    store.put_serialized(b"k", 0, 10, 1, 10)
    store.record_stream_time(10)
    store.inner.flush()
    assert seen == [(Windowed("k", 0, 10), 1, None, 10)]
    store.inner.persist(1)
    seen.clear()
    store.remove_serialized(b"k", 0, 10)
    store.put_serialized(b"k", 0, 20, 2, 20)
    store.inner.flush()
    assert sorted(seen, key=repr) == [(Windowed("k", 0, 10), None, 1, 10), (Windowed("k", 0, 20), 2, None, 20)]
