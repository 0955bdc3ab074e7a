"""Every serde: round trips, None passthrough, and clear SerializationErrors."""
from __future__ import annotations

import dataclasses
import math
import struct
from typing import List, Optional

import pytest

import streamkit as sk
from streamkit.errors import SerializationError
from streamkit.serdes import Bytes, Dataclass, Float, Int, Json, Serde, String, Void


@dataclasses.dataclass
class View:
    page: str
    ts: int
    tags: List[str] = dataclasses.field(default_factory=list)
    referrer: Optional[str] = None


ROUND_TRIPS = [
    (Json(), {"page": "home", "n": 3, "nested": [1, 2.5, None, True, {"x": "y"}]}),
    (Json(), [1, "two", 3.0]),
    (Json(), "plain string"),
    (Json(), 0),
    (Json(), False),
    (String(), "héllo wörld ✓"),
    (String(), ""),
    (Bytes(), b"\x00\xff raw"),
    (Bytes(), b""),
    (Int(), 0),
    (Int(), -7),
    (Int(), 2**63 - 1),
    (Int(), -(2**63)),
    (Float(), 3.25),
    (Float(), -0.0),
    (Float(), float("inf")),
    (Dataclass(View), View("home", 5, ["a", "b"], "google")),
    (Dataclass(View), View("about", 0)),
]


@pytest.mark.parametrize("serde, value", ROUND_TRIPS, ids=lambda x: repr(x)[:30])
def test_round_trip(serde: Serde, value: object) -> None:
    data = serde.serialize(value)
    assert isinstance(data, bytes)
    assert serde.deserialize(data) == value


ALL_SERDES = [Json(), String(), Bytes(), Int(), Float(), Dataclass(View), Void()]


@pytest.mark.parametrize("serde", ALL_SERDES, ids=repr)
def test_none_passes_through_both_ways(serde: Serde) -> None:
    assert serde.serialize(None) is None
    assert serde.deserialize(None) is None


def test_wire_formats_match_kafka_and_json() -> None:
    assert Json().serialize({"page": "home"}) == b'{"page":"home"}'
    assert String().serialize("home") == b"home"
    assert Int().serialize(1) == b"\x00\x00\x00\x00\x00\x00\x00\x01"  # Kafka LongSerializer
    assert Int().serialize(-1) == b"\xff" * 8
    assert Float().serialize(1.0) == struct.pack(">d", 1.0)  # Kafka DoubleSerializer
    assert Float().deserialize(Float().serialize(2)) == 2.0  # ints are accepted as floats
    assert Dataclass(View).serialize(View("home", 5)) == b'{"page":"home","ts":5,"tags":[],"referrer":null}'


def test_float_nan_round_trips() -> None:
    assert math.isnan(Float().deserialize(Float().serialize(float("nan"))))


def test_bytes_accepts_bytearray_and_memoryview() -> None:
    assert Bytes().serialize(bytearray(b"ab")) == b"ab"
    assert Bytes().serialize(memoryview(b"cd")) == b"cd"


@pytest.mark.parametrize("serde, bad, message", [
    (String(), 42, r"String serde expects str, got int \(42\)"),
    (String(), b"bytes", "String serde expects str, got bytes"),
    (Int(), "7", "Int serde expects int, got str"),
    (Int(), 7.5, "Int serde expects int, got float"),
    (Int(), True, "Int serde expects int, got bool"),
    (Float(), "1.5", "Float serde expects float, got str"),
    (Float(), False, "Float serde expects float, got bool"),
    (Bytes(), "text", "Bytes serde expects bytes, got str"),
    (Json(), {1, 2}, "Json serde cannot serialize set"),
    (Json(), object(), "Json serde cannot serialize object"),
    (Dataclass(View), {"page": "home", "ts": 1}, "Dataclass serde for View got dict"),
], ids=lambda x: "object()" if type(x) is object else repr(x)[:25])  # ids equal in every process (xdist)
def test_serialize_wrong_type_is_a_clear_error(serde: Serde, bad: object, message: str) -> None:
    with pytest.raises(SerializationError, match=message):
        serde.serialize(bad)


def test_string_error_says_how_to_fix() -> None:
    with pytest.raises(SerializationError, match=r"pass key_serde=/value_serde=sk\.serdes\.Json\(\)"):
        String().serialize(1)


@pytest.mark.parametrize("serde, value, message", [
    (Int(), 2**63, "Int serde: 9223372036854775808 does not fit in a signed 64-bit integer"),
    (Int(), -2**63 - 1, "Int serde: -9223372036854775809 does not fit"),
    (Float(), 10**400, "Float serde: .* does not fit in a 64-bit double"),
], ids=["int-too-big", "int-too-small", "float-too-big"])
def test_out_of_range_number_is_a_serialization_error(serde: Serde, value: int, message: str) -> None:
    with pytest.raises(SerializationError, match=message):
        serde.serialize(value)


@pytest.mark.parametrize("serde, garbage, message", [
    (Int(), b"\x00" * 7, "Int serde expects 8 bytes, got 7"),
    (Int(), b"\x00" * 9, "Int serde expects 8 bytes, got 9"),
    (Int(), b"", "Int serde expects 8 bytes, got 0"),
    (Float(), b"\x01\x02\x03", "Float serde expects 8 bytes, got 3"),
    (Json(), b"{not json", "Json serde: invalid JSON"),
    (Json(), b"", "Json serde: invalid JSON"),
    (String(), b"\xff\xfe", "String serde: not UTF-8"),
    (Dataclass(View), b"{oops", "Dataclass serde for View: invalid JSON"),
    (Dataclass(View), b"[1, 2]", "Dataclass serde for View: expected a JSON object"),
    (Dataclass(View), b'{"page": "home", "ts": 1, "color": "red"}',
     r"Dataclass serde for View: unknown field\(s\) \['color'\]"),
    (Dataclass(View), b'{"page": "home"}', "Dataclass serde for View: .*ts"),
], ids=lambda x: repr(x)[:25])
def test_deserialize_garbage_is_a_clear_error(serde: Serde, garbage: bytes, message: str) -> None:
    with pytest.raises(SerializationError, match=message):
        serde.deserialize(garbage)


def test_garbage_preview_shows_the_bytes() -> None:
    with pytest.raises(SerializationError) as excinfo:
        Json().deserialize(b"{not json")
    assert "b'{not json'" in str(excinfo.value)
    with pytest.raises(SerializationError) as excinfo:
        Json().deserialize(b"x" * 100)
    assert str(excinfo.value).endswith("...")  # long payloads are cut


def test_serialization_error_is_a_streamkit_error() -> None:
    assert issubclass(SerializationError, sk.StreamkitError)


def test_void_drops_everything() -> None:
    assert Void().serialize("anything") is None
    assert Void().serialize(123) is None
    assert Void().deserialize(b"bytes") is None


def test_dataclass_serde_needs_a_dataclass_type() -> None:
    with pytest.raises(TypeError, match="Dataclass serde needs a dataclass type"):
        Dataclass(dict)
    with pytest.raises(TypeError, match="Dataclass serde needs a dataclass type"):
        Dataclass(View("home", 1))  # an instance, not the type


def test_serde_equality_and_hash() -> None:
    assert Json() == Json() and hash(Json()) == hash(Json())
    assert String() != Json()
    assert Dataclass(View) == Dataclass(View)
    assert hash(Dataclass(View)) == hash(Dataclass(View))
    assert repr(Dataclass(View)) == "Dataclass(View)"
    assert repr(Int()) == "Int()"


def test_public_serdes_module() -> None:
    assert set(sk.serdes.__all__) >= {"Json", "String", "Bytes", "Int", "Float", "Dataclass", "Void"}
