import struct
import zlib

import pytest

from streamkit.broker.batch_format import (
    FLAG_HAS_HEADERS, FLAG_NULL_KEYS, FLAG_NULL_VALUES, HEADER, HEADER_SIZE, MAGIC, decode_records,
    encode_batch, rebase_batch)


def decode(batch: bytes, pos: int = 0):
    length, crc, magic, flags, reserved, base, producer_id, count = HEADER.unpack_from(batch, pos)
    assert magic == MAGIC and reserved == 0 and producer_id == -1
    assert len(batch) - pos >= 4 + length
    assert zlib.crc32(memoryview(batch)[pos + 8:pos + 4 + length]) == crc
    return decode_records(batch, pos, base, count, flags), flags


def expected(records, base):
    return [(base + i, ts, k, v, h) for i, (k, v, ts, h) in enumerate(records)]


def test_header_layout_is_the_documented_one():
    batch = encode_batch([(b"k", b"v", 7, None)], 42)
    length, crc, magic, flags, reserved, base, producer_id, count = HEADER.unpack_from(batch)
    assert HEADER_SIZE == 32
    assert (magic, reserved, base, producer_id, count) == (MAGIC, 0, 42, -1, 1)
    assert length == len(batch) - 4
    # payload: 1 timestamp, 1 key length, 1 value length, then key and value bytes
    assert struct.unpack_from("<qii", batch, HEADER_SIZE) == (7, 1, 1)
    assert batch[HEADER_SIZE + 16:] == b"kv"


def test_round_trip_plain_records():
    records = [(b"key-%d" % i, b"value-%d" % i, 1_700_000_000_000 + i, None) for i in range(500)]
    decoded, flags = decode(encode_batch(records, 1000))
    assert decoded == expected(records, 1000)
    assert flags == 0
    assert all(type(r[2]) is bytes and type(r[3]) is bytes for r in decoded)


@pytest.mark.parametrize("records", [
    [(None, b"v", 1, None), (b"k", None, 2, None), (None, None, 3, None)],
    [(None, b"a", 1, None), (None, b"b", 2, None)],
    [(b"", b"", 0, None), (b"k", b"", -5, None)],
    [(b"x" * 100_000, b"y" * 300_000, 9, None), (b"", None, 10, None)],
])
def test_round_trip_none_empty_and_large(records):
    decoded, _ = decode(encode_batch(records, 3))
    assert decoded == expected(records, 3)


def test_flags_say_which_parts_are_present():
    _, flags = decode(encode_batch([(None, b"v", 1, None)], 0))
    assert flags == FLAG_NULL_KEYS
    _, flags = decode(encode_batch([(b"k", None, 1, (("a", b"1"),))], 0))
    assert flags == FLAG_NULL_VALUES | FLAG_HAS_HEADERS


def test_round_trip_headers():
    records = [
        (b"k1", b"v1", 1,
         (("trace", b"abc"), ("empty", b""), ("null", None), ("ünï", b"\x00\xff"))),
        (b"k2", b"v2", 2, None),
        (b"k3", b"v3", 3, ()),
        (None, None, 4, (("dup", b"1"), ("dup", b"2"))),
    ]
    decoded, _ = decode(encode_batch(records, 0))
    assert decoded == expected(records, 0)
    assert decoded[2][4] == () and decoded[1][4] is None


def test_none_timestamp_means_now_and_floats_are_truncated():
    decoded, _ = decode(encode_batch([(b"k", b"v", None, None), (b"k", b"v", 5.9, None)], 0))
    assert decoded[0][1] > 1_600_000_000_000
    assert decoded[1][1] == 5


def test_rebase_changes_offsets_and_keeps_the_crc_valid():
    records = [(b"k", b"v", i, None) for i in range(3)]
    batch = rebase_batch(encode_batch(records, 0), 77)
    decoded, _ = decode(batch)
    assert [r[0] for r in decoded] == [77, 78, 79]


@pytest.mark.parametrize("records, message", [
    ([("str key", b"v", 1, None)], "key must be bytes or None"),
    ([(b"k", 12, 1, None)], "value must be bytes or None"),
    ([(b"k", b"v", "noon", None)], "timestamp must be an int"),
    ([(b"k", b"v", 1, (("h", "not bytes"),))], "headers must be a tuple of (str, bytes) pairs"),
    ([(b"k", b"v")], "records must be (key, value, timestamp_ms, headers) tuples"),
])
def test_bad_records_are_rejected_with_a_clear_message(records, message):
    with pytest.raises(TypeError) as info:
        encode_batch(records, 0)
    assert message in str(info.value)


def test_empty_batch_is_rejected():
    with pytest.raises(ValueError):
        encode_batch([], 0)


# ---------------------------------------------------------------- compacted batches, markers

def test_a_compacted_batch_keeps_offsets_with_gaps_and_covers_its_span():
    from streamkit.broker.batch_format import (
        FLAG_COMPACTED, batch_span, delete_horizon, header_is_valid)
    records = [(b"a", b"1", 5, None), (b"b", None, 6, (("h", b"x"),)), (None, b"3", 7, None)]
    batch = encode_batch(records, 100, offsets=[100, 104, 109], span=20, horizon=12345)
    length, _crc, magic, flags, reserved, base, _pid, count = HEADER.unpack_from(batch)
    assert flags & FLAG_COMPACTED and header_is_valid(magic, flags, reserved, count, length)
    assert batch_span(batch, 0, flags, count) == 20 and delete_horizon(batch, 0, flags) == 12345
    decoded, _ = decode(batch)
    assert decoded == [(100, 5, b"a", b"1", None), (104, 6, b"b", None, (("h", b"x"),)),
                       (109, 7, None, b"3", None)]
    empty = encode_batch([], 100, offsets=[], span=7)  # covers offsets, holds no record
    length, _crc, magic, flags, reserved, base, _pid, count = HEADER.unpack_from(empty)
    assert count == 0 and header_is_valid(magic, flags, reserved, count, length)
    assert batch_span(empty, 0, flags, count) == 7 and decode(empty)[0] == []
    assert not header_is_valid(MAGIC, 0, 0, 0, length)  # count 0 only when compacted
    with pytest.raises(ValueError):
        encode_batch(records, 100, offsets=[100, 100, 101], span=5)
    with pytest.raises(ValueError):
        encode_batch(records[:1], 100, offsets=[120], span=20)


def test_markers_are_control_batches_of_their_transaction():
    from streamkit.broker.batch_format import (
        FLAG_CONTROL, FLAG_TRANSACTIONAL, encode_marker, marker_is_commit)
    for commit in (True, False):
        marker = encode_marker(1 << 33 | 7, commit, 42, 99)
        _len, _crc, _m, flags, _r, base, pid, count = HEADER.unpack_from(marker)
        assert flags & FLAG_CONTROL and flags & FLAG_TRANSACTIONAL
        assert (base, pid, count) == (42, 1 << 33 | 7, 1)
        assert marker_is_commit(marker, 0) is commit
        assert zlib.crc32(memoryview(marker)[8:]) == _crc
    assert marker_is_commit(encode_batch([(b"k", b"v", 1, None)], 0), 0) is None
