"""Confluent's wire format, byte for byte against confluent-kafka's own encoder."""
from __future__ import annotations

import io

import pytest
from confluent_kafka.schema_registry.common.serde import SchemaId

from streamkit.errors import SerializationError
from streamkit.schemas.wire_format import (decode_message_indexes, encode_message_indexes, header, read_header,
                                           read_zigzag_varint, zigzag_varint)

INDEXES = [[0], [1], [0, 0], [1, 0], [3, 2, 1], [200], [0, 70000]]


@pytest.mark.parametrize("schema_id", [0, 1, 255, 256, 2**31 - 1, 2**32 - 1])
def test_header_is_magic_byte_and_big_endian_id_as_confluent_writes_it(schema_id: int) -> None:
    theirs = SchemaId("AVRO", schema_id).id_to_bytes()
    assert header(schema_id) == theirs
    assert read_header(theirs + b"payload") == (schema_id, 5)


@pytest.mark.parametrize("indexes", INDEXES)
def test_message_indexes_match_confluent_both_ways(indexes) -> None:
    theirs = SchemaId("PROTOBUF", 7, message_indexes=indexes).id_to_bytes()
    ours = header(7) + encode_message_indexes(indexes)
    assert ours == theirs
    assert decode_message_indexes(theirs + b"rest", 5) == (indexes, len(theirs))
    parsed = SchemaId("PROTOBUF")
    rest = parsed.from_bytes(io.BytesIO(ours + b"rest"))
    assert parsed.message_indexes == indexes and rest.read() == b"rest"


def test_first_message_is_one_zero_byte() -> None:
    assert encode_message_indexes([0]) == b"\x00"
    assert decode_message_indexes(b"\x00\x0a", 0) == ([0], 1)


@pytest.mark.parametrize("value", [0, -1, 1, -64, 63, 64, 2**31, -(2**31), 2**62])
def test_zigzag_varints_round_trip(value: int) -> None:
    encoded = zigzag_varint(value)
    assert read_zigzag_varint(encoded + b"\xff", 0) == (value, len(encoded))


@pytest.mark.parametrize("data, why", [
    (b"", "fewer than the 5-byte header"),
    (b"\x00\x00\x01", "fewer than the 5-byte header"),
    (b"\x01" + bytes(16), "unknown magic byte 1"),
    (b'{"id": 1}', "unknown magic byte 123"),
])
def test_bad_headers_say_what_is_wrong(data: bytes, why: str) -> None:
    with pytest.raises(SerializationError, match=why):
        read_header(data)


def test_truncated_and_malformed_index_lists_fail() -> None:
    with pytest.raises(SerializationError, match="truncated"):
        decode_message_indexes(b"\x04\x02", 0)  # says 2 indexes, holds 1
    with pytest.raises(SerializationError, match="malformed"):
        decode_message_indexes(b"\x01", 0)  # a negative count
    with pytest.raises(SerializationError, match="longer than 10 bytes"):
        read_zigzag_varint(b"\xff" * 11, 0)
