"""Stores keep values they wrote decoded (ints and strings under the built-in serdes) and
read them back without decoding: a read must still see exactly what the bytes below say,
whichever way they changed (discarded interval, another writer, restore, a mutable value)."""
from __future__ import annotations

import pytest

from streamkit.serdes import Int, Json, Serde, String
from streamkit.state.memory import InMemoryBytesStore
from streamkit.state.serialized import round_trip_types
from streamkit.state.timestamped import TimestampedKeyValueStore
from streamkit.state.window_store import WindowStore
from streamkit.state.write_buffer import WriteBuffer


class Doubling(Serde[int]):
    """A serde that does not read back what it was given: nothing may be kept decoded."""

    def serialize(self, obj):  # type: ignore[no-untyped-def]
        return None if obj is None else str(obj).encode()

    def deserialize(self, data):  # type: ignore[no-untyped-def]
        return None if data is None else 2 * int(data)


def _timestamped(value_serde: Serde) -> TimestampedKeyValueStore:
    return TimestampedKeyValueStore("t", WriteBuffer("t", InMemoryBytesStore()), String(), value_serde)


def test_round_trip_types_only_for_known_serdes() -> None:
    assert round_trip_types(Json()) == {int, str}
    assert round_trip_types(Int()) == {int}
    assert round_trip_types(String()) == {str}
    assert round_trip_types(Doubling()) == frozenset()


def test_read_after_write_and_commit_returns_the_written_value() -> None:
    store = _timestamped(Json())
    key = store.serialize_key("a")
    store.put_serialized(key, 41, 5)
    assert store.get_serialized(key) == (41, 5)
    store.inner.persist(0)
    assert store.get_serialized(key) == (41, 5)  # committed: the same bytes, still known
    store.put_serialized(key, "x", 7)
    assert store.get_serialized(key) == ("x", 7)


def test_discarded_write_reads_the_committed_value() -> None:
    store = _timestamped(Json())
    key = store.serialize_key("a")
    store.put_serialized(key, 1, 10)
    store.inner.persist(0)
    store.put_serialized(key, 2, 20)
    store.inner.discard()  # the interval is abandoned (e.g. an aborted transaction)
    assert store.get_serialized(key) == (1, 10)


def test_bytes_written_another_way_are_decoded() -> None:
    store = _timestamped(Json())
    key = store.serialize_key("a")
    store.put_serialized(key, 1, 10)
    store.put_with_timestamp("a", 3, 30)  # same key, through the object API
    assert store.get_serialized(key) == (3, 30)
    store.inner.put(key, store.inner.get(key)[:8] + b"4")  # type: ignore[index]
    assert store.get_serialized(key) == (4, 30)
    store.put_serialized(key, None, 40)
    assert store.get_serialized(key) is None


def test_restored_bytes_are_decoded() -> None:
    store = _timestamped(Json())
    key = store.serialize_key("a")
    store.put_serialized(key, 1, 10)
    store.inner.persist(0)
    other = _timestamped(Json())
    other.put_serialized(key, 9, 90)
    store.inner.persistent.apply({key: other.inner.get(key)}, 1)  # as restore writes below the buffer
    store.inner.forget_cached()
    assert store.get_serialized(key) == (9, 90)


@pytest.mark.parametrize("value", [[1, 2], {"n": 1}, 1.5, True])
def test_mutable_and_lossy_values_are_always_decoded(value: object) -> None:
    store = _timestamped(Json())
    key = store.serialize_key("a")
    store.put_serialized(key, value, 1)
    found = store.get_serialized(key)
    assert found == (value, 1)
    assert found is not None and (found[0] is not value or value is True)
    assert store._decoded == {}


def test_a_serde_that_does_not_round_trip_is_decoded() -> None:
    store = _timestamped(Doubling())
    key = store.serialize_key("a")
    store.put_serialized(key, 21, 1)
    assert store.get_serialized(key) == (42, 1)


def test_open_windows_read_back_what_the_bytes_say() -> None:
    store = WindowStore("w", WriteBuffer("w", InMemoryBytesStore()), String(), Json(), window_size_ms=10)
    window = store.open_window_key(store.serialize_key("a"), 0)
    store.put_open(window, 1, 3)
    assert store.get_open(window) == (1, 3)
    store.inner.persist(0)
    store.put_open(window, 2, 4)
    store.inner.discard()
    assert store.get_open(window) == (1, 3)
    store.put("a", 7, 0, 5)  # the public API writes the same window
    assert store.get_open(window) == (7, 5)
    doubling = WindowStore("d", WriteBuffer("d", InMemoryBytesStore()), String(), Doubling(), window_size_ms=10)
    window = doubling.open_window_key(doubling.serialize_key("a"), 0)
    doubling.put_open(window, 5, 1)
    assert doubling.get_open(window) == (10, 1)
