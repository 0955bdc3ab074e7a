"""Windowed keys: the value type, WindowedSerde's wire format, the window-store key layouts."""
from __future__ import annotations

import dataclasses
import itertools
import random
from typing import Optional

import orjson
import pytest

from streamkit.errors import ConfigError, SerializationError
from streamkit.serdes import Bytes, Dataclass, Float, Int, Json, Serde, String, Void
from streamkit.windowing.windowed_keys import windowed_of_valid
from streamkit.windowing import (Windowed, WindowedSerde, split_window_store_key, split_window_store_time_key,
                                 window_store_key, window_store_time_key)


@dataclasses.dataclass
class UserKey:
    user: str
    region: str


class Upper(Serde[str]):
    """A custom serde: upper-case ASCII on the wire."""

    def serialize(self, obj: Optional[str]) -> Optional[bytes]:
        return None if obj is None else obj.upper().encode()

    def deserialize(self, data: Optional[bytes]) -> Optional[str]:
        return None if data is None else data.decode().lower()


# --- Windowed ---------------------------------------------------------------------------------

def test_windowed_is_a_frozen_hashable_value():
    w = Windowed("alice", 0, 60_000)
    assert (w.key, w.start, w.end, w.window) == ("alice", 0, 60_000, (0, 60_000))
    assert w == Windowed("alice", 0, 60_000) and w != Windowed("alice", 60_000, 120_000)
    assert len({w, Windowed("alice", 0, 60_000), Windowed("bob", 0, 60_000)}) == 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        w.start = 5  # type: ignore[misc]


def test_a_windowed_made_unchecked_by_operators_equals_a_checked_one():
    fast, checked = windowed_of_valid("alice", 0, 60_000), Windowed("alice", 0, 60_000)
    assert fast == checked and hash(fast) == hash(checked) and repr(fast) == repr(checked)
    assert type(fast) is Windowed and fast.window == (0, 60_000)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.start = 1  # type: ignore[misc]


def test_windowed_allows_single_instant_windows():
    assert Windowed("k", 7, 7).window == (7, 7)       # a session with one record


@pytest.mark.parametrize("start, end, message", [
    (10, 5, "0 <= start <= end"),
    (-1, 5, "0 <= start <= end"),
    (1.0, 5, "start must be an int"),
    (0, True, "end must be an int"),
    ("0", 5, "start must be an int"),
])
def test_windowed_rejects_bad_bounds(start, end, message):
    with pytest.raises(ValueError, match=message):
        Windowed("k", start, end)


# --- WindowedSerde: wire format ---------------------------------------------------------------

@pytest.mark.parametrize("inner, key, wire", [
    (String(), "alice", b'{"key":"alice","start":0,"end":60000}'),
    (String(), 'a "quoted" \u00e9', b'{"key":"a \\"quoted\\" \xc3\xa9","start":0,"end":60000}'),
    (String(), "", b'{"key":"","start":0,"end":60000}'),
    (Json(), {"user": "a", "n": 1}, b'{"key":{"user":"a","n":1},"start":0,"end":60000}'),
    (Json(), [1, "x", None], b'{"key":[1,"x",null],"start":0,"end":60000}'),
    (Json(), "alice", b'{"key":"alice","start":0,"end":60000}'),
    (Json(), 12, b'{"key":12,"start":0,"end":60000}'),
    (Dataclass(UserKey), UserKey("a", "eu"), b'{"key":{"user":"a","region":"eu"},"start":0,"end":60000}'),
    (Int(), -42, b'{"key":-42,"start":0,"end":60000}'),
    (Int(), 2**63 - 1, b'{"key":9223372036854775807,"start":0,"end":60000}'),
    (Float(), 2.5, b'{"key":2.5,"start":0,"end":60000}'),
    (Bytes(), b"\x00\xff", b'{"key":"AP8=","start":0,"end":60000}'),
    (Bytes(), b"alice", b'{"key":"YWxpY2U=","start":0,"end":60000}'),   # base64 even when text
    (Bytes(), b"", b'{"key":"","start":0,"end":60000}'),
    (Upper(), "alice", b'{"key":"QUxJQ0U=","start":0,"end":60000}'),     # custom serde: base64
    (Void(), "ignored", b'{"key":null,"start":0,"end":60000}'),
    (String(), None, b'{"key":null,"start":0,"end":60000}'),
])
def test_exact_wire_json(inner, key, wire):
    assert WindowedSerde(inner).serialize(Windowed(key, 0, 60_000)) == wire
    assert orjson.loads(wire).keys() == {"key", "start", "end"}


@pytest.mark.parametrize("inner, key", [
    (String(), "alice"), (String(), "h\u00e9llo \u2713"), (String(), None),
    (Json(), {"user": "a", "tags": ["x", "y"], "n": 1.5}), (Json(), None), (Json(), False),
    (Dataclass(UserKey), UserKey("a", "eu")),
    (Int(), 0), (Int(), -(2**63)), (Float(), -0.25),
    (Bytes(), b"\x00\x01\xfe\xff"), (Bytes(), b""),
    (Upper(), "alice"),
])
@pytest.mark.parametrize("start, end", [(0, 0), (0, 60_000), (1_700_000_000_000, 1_700_000_060_000)])
def test_round_trip(inner, key, start, end):
    serde = WindowedSerde(inner)
    value = Windowed(key, start, end)
    assert serde.deserialize(serde.serialize(value)) == value


def test_void_key_reads_back_as_none():
    serde = WindowedSerde(Void())
    assert serde.deserialize(serde.serialize(Windowed("ignored", 5, 10))) == Windowed(None, 5, 10)


def test_none_passes_through():
    serde = WindowedSerde(String())
    assert serde.serialize(None) is None
    assert serde.deserialize(None) is None


def test_float_key_widens_an_int_on_the_way_back():
    assert WindowedSerde(Float()).deserialize(b'{"key":3,"start":0,"end":1}') == Windowed(3.0, 0, 1)


# --- WindowedSerde: errors --------------------------------------------------------------------

@pytest.mark.parametrize("inner, obj, message", [
    (String(), {"key": "a", "start": 0, "end": 1}, "WindowedSerde expects Windowed, got dict"),
    (String(), ("a", 0, 1), "WindowedSerde expects Windowed, got tuple"),
    (String(), Windowed(7, 0, 1), "String serde expects str, got int"),
    (Int(), Windowed("7", 0, 1), "Int serde expects int"),
    (Float(), Windowed(float("inf"), 0, 1), "no JSON form"),
    (Float(), Windowed(float("nan"), 0, 1), "no JSON form"),
    (Json(), Windowed({1: "a"}, 0, 1), "Json serde cannot serialize"),
])
def test_serialize_errors(inner, obj, message):
    with pytest.raises(SerializationError, match=message):
        WindowedSerde(inner).serialize(obj)


@pytest.mark.parametrize("inner, data, message", [
    (String(), b"not json", "invalid JSON"),
    (String(), b'["a", 0, 1]', 'exactly "key", "start", "end"'),
    (String(), b'{"key": "a", "start": 0}', 'exactly "key", "start", "end"'),
    (String(), b'{"key": "a", "start": 0, "end": 1, "extra": 2}', 'exactly "key", "start", "end"'),
    (String(), b'{"key": "a", "start": 10, "end": 1}', "0 <= start <= end"),
    (String(), b'{"key": "a", "start": -1, "end": 1}', "0 <= start <= end"),
    (String(), b'{"key": "a", "start": "0", "end": 1}', "start must be an int"),
    (String(), b'{"key": "a", "start": 0, "end": 1.5}', "end must be an int"),
    (String(), b'{"key": "a", "start": false, "end": 1}', "start must be an int"),
    (String(), b'{"key": 5, "start": 0, "end": 1}', "key must be a JSON string"),
    (Bytes(), b'{"key": "not base64!", "start": 0, "end": 1}', "not valid base64"),
    (Bytes(), b'{"key": 5, "start": 0, "end": 1}', "key must be a base64 string"),
    (Int(), b'{"key": "5", "start": 0, "end": 1}', "Int serde expects int"),
    (Int(), b'{"key": 1.5, "start": 0, "end": 1}', "Int serde expects int"),
    (Dataclass(UserKey), b'{"key": {"user": "a"}, "start": 0, "end": 1}', "Dataclass serde for UserKey"),
])
def test_deserialize_errors(inner, data, message):
    with pytest.raises(SerializationError, match=message):
        WindowedSerde(inner).deserialize(data)


def test_constructor_errors_say_how_to_fix_them():
    with pytest.raises(ConfigError, match=r"got the class String: write WindowedSerde\(String\(\)\)"):
        WindowedSerde(String)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="needs the key's streamkit Serde, got str"):
        WindowedSerde("string")  # type: ignore[arg-type]


def test_serde_equality_repr_and_hash():
    assert WindowedSerde(String()) == WindowedSerde(String())
    assert WindowedSerde(String()) != WindowedSerde(Json())
    assert WindowedSerde(String()) != String()
    assert hash(WindowedSerde(Json())) == hash(WindowedSerde(Json()))
    assert repr(WindowedSerde(Dataclass(UserKey))) == "WindowedSerde(Dataclass(UserKey))"


# --- window store keys ------------------------------------------------------------------------

KEYS = [b"", b"a", b"a\x00", b"a\x00\x00\x00\x00\x00\x00\x00\x00", b"a\xff", b"ab", b"b", b"\x00", b"\xff" * 3,
        b"\x00\x00\x00\x01a"]
STARTS = [0, 1, 255, 256, 65_535, 65_536, 2**32, 1_700_000_000_000, 2**63 - 1]  # ascending


def test_store_key_layout():
    assert window_store_key(b"ab", 1) == b"\x00\x00\x00\x02" + b"ab" + b"\x00" * 7 + b"\x01"
    assert window_store_key(b"", 0) == b"\x00" * 12
    assert window_store_time_key(1, b"ab") == b"\x00" * 7 + b"\x01" + b"ab"


@pytest.mark.parametrize("key, start", list(itertools.product(KEYS, [0, 1, 2**63 - 1])))
def test_store_keys_round_trip(key, start):
    assert split_window_store_key(window_store_key(key, start)) == (key, start)
    assert split_window_store_time_key(window_store_time_key(start, key)) == (start, key)


def test_store_keys_sort_grouped_by_key_then_start():
    pairs = list(itertools.product(KEYS, STARTS))
    encoded = [window_store_key(k, s) for k, s in pairs]
    random.Random(7).shuffle(encoded)
    decoded = [split_window_store_key(e) for e in sorted(encoded)]
    # each key's windows are one contiguous run, in start order
    runs = [k for k, _ in itertools.groupby(k for k, _ in decoded)]
    assert sorted(runs) == sorted(KEYS) and len(runs) == len(KEYS)
    for key in KEYS:
        assert [s for k, s in decoded if k == key] == STARTS


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("t1, t2", [(0, 2**63 - 1), (1, 65_536), (256, 256), (2**32, 2**63 - 1), (300, 299)])
def test_store_key_range_scan_is_exactly_one_keys_windows(key, t1, t2):
    entries = sorted(window_store_key(k, s) for k, s in itertools.product(KEYS, STARTS))
    low, high = window_store_key(key, t1), window_store_key(key, t2)
    scanned = [split_window_store_key(e) for e in entries if low <= e <= high]
    assert scanned == [(key, s) for s in STARTS if t1 <= s <= t2]


def test_time_keys_sort_by_start_and_expire_as_one_range():
    pairs = list(itertools.product(KEYS, STARTS))
    encoded = [window_store_time_key(s, k) for k, s in pairs]
    random.Random(3).shuffle(encoded)
    decoded = [split_window_store_time_key(e) for e in sorted(encoded)]
    assert [s for s, _ in decoded] == sorted(s for _, s in pairs)
    cutoff = 65_536
    low, high = window_store_time_key(0, b""), window_store_time_key(cutoff, b"")
    expired = {split_window_store_time_key(e) for e in encoded if low <= e < high}
    assert expired == {(s, k) for k, s in pairs if s < cutoff}


@pytest.mark.parametrize("key, start, error, message", [
    (b"k", -1, ValueError, r"\[0, 2\*\*63 - 1\]"),
    (b"k", 2**63, ValueError, r"\[0, 2\*\*63 - 1\]"),
    (b"k", 1.0, ValueError, "must be an int"),
    (b"k", True, ValueError, "must be an int"),
    ("k", 0, TypeError, "key_bytes must be bytes"),
    (bytearray(b"k"), 0, TypeError, "got bytearray"),
])
def test_store_key_argument_errors(key, start, error, message):
    with pytest.raises(error, match=message):
        window_store_key(key, start)
    with pytest.raises(error, match=message):
        window_store_time_key(start, key)


@pytest.mark.parametrize("data, message", [
    (b"", "too short"),
    (b"\x00\x00\x00\x01" + b"\x00" * 7, "too short"),
    (b"\x00\x00\x00\x05ab" + b"\x00" * 8, "does not match its key length 5"),
    (window_store_key(b"ab", 3) + b"x", "does not match its key length 2"),
])
def test_split_store_key_errors(data, message):
    with pytest.raises(SerializationError, match=message):
        split_window_store_key(data)


def test_split_time_key_errors():
    with pytest.raises(SerializationError, match="too short"):
        split_window_store_time_key(b"\x00" * 7)
