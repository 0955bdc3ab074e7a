"""``SerializedKeyValueStore.seek``: one positioned iterator over the persistent store
and the uncommitted writes, on real RocksDB and in memory; a page costs its own size
in iterator steps, counted through a real RocksDB store that counts what it yields."""
from __future__ import annotations

from itertools import islice
from typing import Iterator, Optional, Tuple

import pytest

from streamkit.serdes import Json, String
from streamkit.state.memory import InMemoryBytesStore
from streamkit.state.rocksdb import RocksDBBytesStore
from streamkit.state.serialized import SerializedKeyValueStore
from streamkit.state.write_buffer import WriteBuffer


class CountingRocksDB(RocksDBBytesStore):
    """A real RocksDB store that counts the entries its range iterators yield."""

    steps = 0

    def range(self, start: Optional[bytes], end: Optional[bytes]) -> Iterator[Tuple[bytes, bytes]]:
        for entry in super().range(start, end):
            self.steps += 1
            yield entry


@pytest.fixture(params=["memory", "rocksdb"])
def store(request, tmp_path) -> Iterator[SerializedKeyValueStore]:
    persistent = InMemoryBytesStore() if request.param == "memory" else RocksDBBytesStore(str(tmp_path / "db"))
    store = SerializedKeyValueStore("s", WriteBuffer("s", persistent), String(), Json())
    for key in ["pear", "apple", "apricot", "banana", "ap"]:
        store.put(key, len(key))
    store.inner.persist(None)
    store.put("avocado", 7)  # uncommitted: seen through the write buffer
    store.put("banana", None)
    yield store
    persistent.close()


def keys(entries) -> list:
    return [key for _raw, key, _value in entries]


def test_seek_starts_at_start_or_after_it(store) -> None:
    assert keys(store.seek()) == ["ap", "apple", "apricot", "avocado", "pear"]
    assert keys(store.seek(b"apricot")) == ["apricot", "avocado", "pear"]
    assert keys(store.seek(b"apricot", exclusive=True)) == ["avocado", "pear"]
    assert keys(store.seek(b"apz", exclusive=True)) == ["avocado", "pear"]  # a key the store lacks
    assert keys(store.seek(b"zzz")) == []
    assert list(store.seek(b"pear"))[0] == (b"pear", "pear", 4)


def test_seek_keeps_to_the_prefix(store) -> None:
    assert keys(store.seek(prefix=b"ap")) == ["ap", "apple", "apricot"]
    assert keys(store.seek(b"ap", exclusive=True, prefix=b"ap")) == ["apple", "apricot"]
    assert keys(store.seek(b"apple", exclusive=True, prefix=b"ap")) == ["apricot"]
    assert keys(store.seek(b"a", prefix=b"ap")) == ["ap", "apple", "apricot"]  # start before the prefix
    assert keys(store.seek(b"b", prefix=b"ap")) == []  # start past the prefix
    assert keys(store.seek(prefix=b"q")) == []


def test_a_page_reads_its_own_size_not_the_store(tmp_path) -> None:
    persistent = CountingRocksDB(str(tmp_path / "db"))
    store = SerializedKeyValueStore("s", WriteBuffer("s", persistent), String(), Json())
    try:
        for n in range(50_000):
            store.put(f"key-{n:06d}", n)
        store.inner.persist(None)
        page = keys(islice(store.seek(b"key-025000", exclusive=True), 20))
        assert page == [f"key-{n:06d}" for n in range(25_001, 25_021)]
        assert persistent.steps <= 21
        persistent.steps = 0
        assert keys(islice(store.seek(prefix=b"key-0499"), 5)) == [f"key-0499{n:02d}" for n in range(5)]
        assert persistent.steps <= 5
        persistent.steps = 0
        assert keys(store.seek(prefix=b"key-04999")) == [f"key-04999{n}" for n in range(10)]
        assert persistent.steps <= 11  # the ten keys, and the one that ends the prefix
    finally:
        persistent.close()
