"""Confluent's wire format: how a registry-encoded record's bytes are laid out.

``[magic byte 0][schema id: 4 bytes, big-endian][payload]``; Protobuf records put the
message-index list between the id and the payload: which message of the ``.proto``
file the payload is, as a path of indexes (``[1, 0]``: the first nested message of the
file's second message), written as zigzag varints preceded by their count, the common
case ``[0]`` as one byte ``0``. Java's and confluent-kafka's serializers write exactly
this, so records cross between them and streamkit byte for byte.

>>> header(7)
b'\\x00\\x00\\x00\\x00\\x07'
>>> read_header(b'\\x00\\x00\\x00\\x00\\x07{}')
(7, 5)
>>> encode_message_indexes([0]), encode_message_indexes([1, 0])
(b'\\x00', b'\\x04\\x02\\x00')
>>> decode_message_indexes(b'\\x04\\x02\\x00rest', 0)
([1, 0], 3)
"""
from __future__ import annotations

import struct
from typing import List, Sequence, Tuple

from ..errors import SerializationError

__all__ = ["MAGIC_BYTE", "HEADER_SIZE", "header", "read_header", "encode_message_indexes",
           "decode_message_indexes", "zigzag_varint", "read_zigzag_varint"]

MAGIC_BYTE = 0
HEADER_SIZE = 5
_HEADER = struct.Struct(">bI")
_ID = struct.Struct(">I")


def header(schema_id: int) -> bytes:
    """The 5 bytes every record written with schema ``schema_id`` starts with."""
    return _HEADER.pack(MAGIC_BYTE, schema_id)


def read_header(data: bytes) -> Tuple[int, int]:
    """``(schema id, offset of what follows)``; SerializationError when ``data`` does not
    start with the magic byte 0 and a 4-byte id (not registry-encoded, or the newer
    magic byte 1 with a schema GUID, which streamkit does not read)."""
    if len(data) < HEADER_SIZE:
        raise SerializationError(
            f"not in Confluent's wire format: {len(data)} byte(s), fewer than the 5-byte header "
            f"(magic byte 0 and a schema id): {bytes(data[:16])!r}")
    if data[0] != MAGIC_BYTE:
        raise SerializationError(
            f"not in Confluent's wire format: unknown magic byte {data[0]} (expected 0, then a 4-byte "
            f"schema id): {bytes(data[:16])!r}")
    return _ID.unpack_from(data, 1)[0], HEADER_SIZE


def zigzag_varint(value: int) -> bytes:
    """``value`` zigzag-encoded (0, -1, 1, -2 ... -> 0, 1, 2, 3 ...) as a base-128 varint."""
    n = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def read_zigzag_varint(data: bytes, offset: int) -> Tuple[int, int]:
    """``(value, offset after it)`` of the zigzag varint at ``offset``."""
    shift = n = 0
    while True:
        if offset >= len(data):
            raise SerializationError("truncated Protobuf message-index list (a varint runs past the end)")
        byte = data[offset]
        offset += 1
        n |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (n >> 1) ^ -(n & 1), offset
        shift += 7
        if shift > 63:
            raise SerializationError("malformed Protobuf message-index list (a varint longer than 10 bytes)")


def encode_message_indexes(indexes: Sequence[int]) -> bytes:
    """The message-index list as Confluent writes it: ``[0]`` as the single byte 0, any
    other path as its length then each index, all zigzag varints."""
    if len(indexes) == 1 and indexes[0] == 0:
        return b"\x00"
    return zigzag_varint(len(indexes)) + b"".join(zigzag_varint(i) for i in indexes)


def decode_message_indexes(data: bytes, offset: int) -> Tuple[List[int], int]:
    """``(indexes, offset of the payload)`` read at ``offset``; a count of 0 means ``[0]``."""
    count, offset = read_zigzag_varint(data, offset)
    if count == 0:
        return [0], offset
    if count < 0 or count > 100:
        raise SerializationError(f"malformed Protobuf message-index list (count {count})")
    indexes = []
    for _ in range(count):
        index, offset = read_zigzag_varint(data, offset)
        if index < 0:
            raise SerializationError(f"malformed Protobuf message-index list (negative index {index})")
        indexes.append(index)
    return indexes, offset
