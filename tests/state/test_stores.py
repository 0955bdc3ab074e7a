"""Store layers on real RocksDB (rocksdict) and in memory: byte stores, write buffer,
typed stores, checkpoints, corruption."""
from __future__ import annotations

import os

import pytest

from streamkit.serdes import Json, String
from streamkit.state.memory import InMemoryBytesStore
from streamkit.state.rocksdb import RocksDBBytesStore
from streamkit.state.serialized import SerializedKeyValueStore
from streamkit.state.task_stores import open_task_stores
from streamkit.state.timestamped import TimestampedKeyValueStore
from streamkit.state.write_buffer import WriteBuffer
from streamkit.stores import StoreSpec
from streamkit.transport.base import TopicPartition

BACKENDS = ["memory", "rocksdb"]


@pytest.fixture(params=BACKENDS)
def bytes_store(request, tmp_path):
    if request.param == "memory":
        store = InMemoryBytesStore()
    else:
        store = RocksDBBytesStore(str(tmp_path / "db"))
    yield store
    store.close()


def test_apply_is_a_batch_with_its_checkpoint(bytes_store) -> None:
    assert bytes_store.changelog_offset() is None
    bytes_store.apply({b"b": b"2", b"a": b"1", b"c": b"3"}, 10)
    bytes_store.apply({b"c": None, b"d": b"4"}, 12)
    assert bytes_store.changelog_offset() == 12
    assert [k for k, _ in bytes_store.range(None, None)] == [b"a", b"b", b"d"]
    assert list(bytes_store.range(b"b", b"c")) == [(b"b", b"2")]
    assert bytes_store.get(b"c") is None and bytes_store.get(b"d") == b"4"
    bytes_store.apply({b"e": b"5"}, None)  # no changelog: the checkpoint stays
    assert bytes_store.changelog_offset() == 12
    assert bytes_store.approximate_len() in (4, 5)


def test_rocksdb_keeps_data_and_checkpoint_across_reopen(tmp_path) -> None:
    path = str(tmp_path / "db")
    store = RocksDBBytesStore(path)
    store.apply({b"k": b"v"}, 7)
    store.close()
    again = RocksDBBytesStore(path)
    assert again.get(b"k") == b"v" and again.changelog_offset() == 7
    again.close()


def test_corrupt_rocksdb_is_moved_aside_and_rebuilt(tmp_path, caplog) -> None:
    path = tmp_path / "db"
    store = RocksDBBytesStore(str(path))
    store.apply({b"k": b"v"}, 7)
    store.close()
    for name in os.listdir(path):  # wreck every file RocksDB needs to open
        if name.startswith(("MANIFEST", "CURRENT", "OPTIONS")):
            (path / name).write_bytes(b"garbage")
    rebuilt, why = RocksDBBytesStore.open_or_rebuild(str(path))
    assert why is not None and "moved to" in why
    assert rebuilt.get(b"k") is None and rebuilt.changelog_offset() is None
    assert any(p.name.startswith("db.corrupt-") for p in tmp_path.iterdir())
    assert "rebuilding it from its changelog" in caplog.text
    rebuilt.close()


def test_write_buffer_overlays_reads_and_scans(bytes_store) -> None:
    bytes_store.apply({b"a": b"1", b"c": b"3", b"e": b"5"}, 1)
    buffer = WriteBuffer("s", bytes_store)
    buffer.put(b"b", b"20")
    buffer.put(b"c", b"30")
    buffer.delete(b"e")
    assert buffer.get(b"c") == b"30" and buffer.get(b"e") is None and buffer.get(b"a") == b"1"
    assert list(buffer.range(None, None)) == [(b"a", b"1"), (b"b", b"20"), (b"c", b"30")]
    assert list(buffer.range(b"b", b"d")) == [(b"b", b"20"), (b"c", b"30")]
    assert bytes_store.get(b"c") == b"3"  # nothing reaches the persistent store before persist()
    buffer.persist(5)
    assert bytes_store.get(b"c") == b"30" and bytes_store.get(b"e") is None
    assert bytes_store.changelog_offset() == 5 and buffer.pending == {}


def test_write_buffer_counts_a_hot_key_once(bytes_store) -> None:
    buffer = WriteBuffer("s", bytes_store)
    for i in range(1000):
        buffer.put(b"hot", str(i).encode())
    assert len(buffer.pending) == 1 and buffer.size_bytes < 200


def test_flush_listeners_see_latest_and_last_committed(bytes_store) -> None:
    bytes_store.apply({b"a": b"1"}, None)
    buffer = WriteBuffer("s", bytes_store)
    seen = []
    buffer.flush_listeners.append(lambda k, new, old: seen.append((k, new, old)))
    buffer.put(b"a", b"2")
    buffer.put(b"a", b"3")
    buffer.put(b"b", b"9")
    buffer.put(b"gone", b"x")
    buffer.delete(b"gone")  # created and deleted within one interval: nothing to say
    buffer.flush()
    assert seen == [(b"a", b"3", b"1"), (b"b", b"9", None)]


def test_discard_forgets_the_interval(bytes_store) -> None:
    buffer = WriteBuffer("s", bytes_store)
    buffer.put(b"a", b"1")
    buffer.discard()
    buffer.persist(3)
    assert bytes_store.get(b"a") is None


def test_timestamped_store_hides_timestamps_from_plain_reads(bytes_store) -> None:
    store = TimestampedKeyValueStore("t", WriteBuffer("t", bytes_store), String(), Json())
    store.put_with_timestamp("k", {"n": 1}, 1234)
    assert store.get("k") == {"n": 1}
    assert store.get_with_timestamp("k") == ({"n": 1}, 1234)
    assert list(store.all()) == [("k", {"n": 1})]
    flushed = []
    store.on_flush(lambda key, new, old, ts: flushed.append((key, new, old, ts)))
    store.inner.flush()
    assert flushed == [("k", {"n": 1}, None, 1234)]


def test_task_stores_changelog_one_record_per_key_and_checkpoint(tmp_path) -> None:
    specs = [StoreSpec("counts", key_serde=String(), value_serde=Json()),
             StoreSpec("local", changelog=False)]
    stores = open_task_stores(specs, app_id="app", task_id="0_2", partition=2, backend="rocksdb",
                              state_dir=str(tmp_path))
    counts = stores.by_name["counts"]
    for i in range(5):
        counts.put("a", i)
    counts.put("b", 1)
    stores.by_name["local"].put("x", 1)
    [(topic, partition, records)] = stores.changelog_batches(timestamp=99)
    assert (topic, partition) == ("app-counts-changelog", 2)
    assert [(k, v) for k, v, _, _ in records] == [(b"a", b"4"), (b"b", b"1")]
    stores.persist({TopicPartition("app-counts-changelog", 2): 17})
    stores.close()
    assert (tmp_path / "0_2" / "counts").is_dir()
    reopened = open_task_stores(specs, app_id="app", task_id="0_2", partition=2, backend="rocksdb",
                                state_dir=str(tmp_path))
    counts_store = reopened.open_stores[0]
    assert counts_store.buffer.persistent.changelog_offset() == 17
    assert reopened.by_name["counts"].get("a") == 4 and reopened.by_name["local"].get("x") == 1
    reopened.close()


def test_serialized_store_scans_in_serialized_key_order(bytes_store) -> None:
    store = SerializedKeyValueStore("s", WriteBuffer("s", bytes_store), String(), Json())
    for key in ["pear", "apple", "apricot", "banana"]:
        store.put(key, len(key))
    store.inner.persist(None)
    store.put("avocado", 7)
    assert list(store.prefix_scan(b"ap")) == [("apple", 5), ("apricot", 7)]
    assert [k for k, _ in store.range("apricot", "banana")] == ["apricot", "avocado", "banana"]
    assert store.delete("pear") == 4 and store.get("pear") is None
    assert store.approximate_num_entries() >= 4
