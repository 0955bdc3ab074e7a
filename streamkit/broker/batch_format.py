"""On-disk record batch format of the embedded log.

A batch is a fixed 32-byte header followed by a payload laid out for fast decoding
(all integers little-endian)::

    length:u32         bytes after this field
    crc:u32            zlib.crc32 of everything after this field
    magic:u8 = 1
    flags:u8           FLAG_* below
    reserved:u16 = 0
    base_offset:u64    offset of the first record (of the offsets the batch covers)
    producer_id:i64    -1, or the transaction id of a transactional/control batch
    count:u32          number of records, >= 1 (0 allowed only in a compacted batch)
    ---- payload ----
    [span:u32          only if FLAG_COMPACTED: the batch covers [base, base + span);
     delete_horizon:i64  time (ms) after which its tombstones may be dropped, -1 = unset;
     count x u32       offset deltas (record offset - base), strictly increasing]
    count x i64        timestamps (ms)
    count x i32        key lengths   (-1 = None)
    count x i32        value lengths (-1 = None)
    [count x i32       header-block lengths (-1 = None), only if FLAG_HAS_HEADERS]
    all key bytes back to back, then all value bytes back to back
    header blocks back to back

A header block is ``n:u16`` then per header ``name_len:u16, name (utf-8),
value_len:i32 (-1 = None), value``. An empty block (n = 0) is an empty tuple.

FLAG_NULL_KEYS / FLAG_NULL_VALUES say that some key / value is None, so that the
decoder takes its fast path (one struct unpack for all keys and values) whenever
neither is set.

Batches written by producers cover ``count`` consecutive offsets. The cleaner
(compaction) writes FLAG_COMPACTED batches instead: the records it keeps carry
their original offsets as deltas, and a batch's span also covers the offsets it
dropped, so that consecutive batches of a segment always cover contiguous offsets
(the next batch's base is ``base + span``) and readers can tell a gap from damage.

A control batch (FLAG_CONTROL, always also FLAG_TRANSACTIONAL) is a transaction
marker: one record whose key is ``version:i16 = 0, type:i16`` (big-endian, as in
Kafka; type 0 = ABORT, 1 = COMMIT) and whose value is None, written with the
transaction's id as producer_id. Readers never return control batches.
"""
from __future__ import annotations

import struct
import time
import zlib
from itertools import repeat
from operator import itemgetter
from typing import Optional, Sequence

from streamkit.core.records import Headers, OutgoingRecord, RawRecord

MAGIC = 1
FLAG_TRANSACTIONAL = 0x01
FLAG_CONTROL = 0x02
FLAG_HAS_HEADERS = 0x04
FLAG_NULL_KEYS = 0x08
FLAG_NULL_VALUES = 0x10
FLAG_COMPACTED = 0x20
KNOWN_FLAGS = 0x3F
SPECIAL_FLAGS = FLAG_TRANSACTIONAL | FLAG_CONTROL | FLAG_COMPACTED  # off the plain fast path

HEADER = struct.Struct("<IIBBHQqI")
HEADER_SIZE = HEADER.size  # 32
COMPACTED_EXT = struct.Struct("<Iq")  # span, delete_horizon: right after the header
PEEK_SIZE = HEADER_SIZE + 4  # bytes that give a batch's extent (header and span)
_SPAN = struct.Struct("<I")
LENGTH_FIELD_SIZE = 4
CRC_START = 8  # the CRC covers bytes [CRC_START, 4 + length) of a batch
_BASE_OFFSET_POS = 12
_PAYLOAD_START = HEADER_SIZE - LENGTH_FIELD_SIZE  # header bytes counted by `length`

_LENGTH_CRC = struct.Struct("<II")
_ONE = struct.Struct("<qii")
_U16 = struct.Struct("<H")
_I32 = struct.Struct("<i")
_MARKER_KEY = struct.Struct(">hh")
MARKER_ABORT = 0
MARKER_COMMIT = 1
_MARKER_KEYS = {False: _MARKER_KEY.pack(0, MARKER_ABORT), True: _MARKER_KEY.pack(0, MARKER_COMMIT)}
_first, _second, _third, _fourth = (itemgetter(i) for i in range(4))
_MAX_LAYOUT_CACHE = 512
_layouts: dict[tuple[int, bool], struct.Struct] = {}

# "<n>s" struct codes for small lengths, joined into one format per batch so that one
# unpack_from creates all key and value bytes objects in C (twice as fast as slicing).
_S_CODES = tuple(f"{i}s" for i in range(8192))


def min_length(count: int, flags: int) -> int:
    """Smallest valid `length` field for a batch of `count` records with `flags`."""
    per_record = 20 if flags & FLAG_HAS_HEADERS else 16
    if flags & FLAG_COMPACTED:
        return _PAYLOAD_START + COMPACTED_EXT.size + (per_record + 4) * count
    return _PAYLOAD_START + per_record * count


def header_is_valid(magic: int, flags: int, reserved: int, count: int, length: int) -> bool:
    """Whether the header fields (other than base offset and CRC) are plausible."""
    return (magic == MAGIC and reserved == 0 and (count > 0 or flags & FLAG_COMPACTED != 0)
            and not flags & ~KNOWN_FLAGS and length >= min_length(count, flags))


def batch_span(buf: bytes, pos: int, flags: int, count: int) -> int:
    """Number of offsets the batch at buf[pos] covers (needs PEEK_SIZE bytes there)."""
    if flags & FLAG_COMPACTED:
        return _SPAN.unpack_from(buf, pos + HEADER_SIZE)[0]
    return count


def marker_is_commit(buf: bytes, pos: int) -> Optional[bool]:
    """True/False for the COMMIT/ABORT marker batch at buf[pos]; None if it is not one."""
    length, _crc, _magic, flags, _r, _base, _pid, count = HEADER.unpack_from(buf, pos)
    if not flags & FLAG_CONTROL or count != 1 or flags & (FLAG_COMPACTED | FLAG_HAS_HEADERS):
        return None
    _ts, key_len, _value_len = _ONE.unpack_from(buf, pos + HEADER_SIZE)
    if key_len != 4 or length < _PAYLOAD_START + 20:
        return None
    _version, kind = _MARKER_KEY.unpack_from(buf, pos + HEADER_SIZE + 16)
    return kind == MARKER_COMMIT


_MARKER_BODY = struct.Struct("<BBHQqIqii4s")  # header after the crc, then the payload


def encode_marker(producer_id: int, commit: bool, base_offset: int,
                  timestamp_ms: Optional[int] = None) -> bytes:
    """A control batch that commits or aborts transaction `producer_id` in a partition.

    The same bytes as encode_batch of one (key = version/type, value = None) record,
    packed directly: markers are written on every commit.
    """
    ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    body = _MARKER_BODY.pack(MAGIC, FLAG_TRANSACTIONAL | FLAG_CONTROL | FLAG_NULL_VALUES, 0,
                             base_offset, producer_id, 1, ts, 4, -1, _MARKER_KEYS[commit])
    return _LENGTH_CRC.pack(4 + len(body), zlib.crc32(body)) + body


def payload_start(buf: bytes, pos: int, flags: int, count: int) -> int:
    """Where the timestamps of the batch at buf[pos] start."""
    if flags & FLAG_COMPACTED:
        return pos + HEADER_SIZE + COMPACTED_EXT.size + 4 * count
    return pos + HEADER_SIZE


def max_timestamp(buf: bytes, pos: int, flags: int, count: int) -> Optional[int]:
    """Largest record timestamp of the batch at buf[pos] (None for an empty batch)."""
    if not count:
        return None
    return max(struct.unpack_from(f"<{count}q", buf, payload_start(buf, pos, flags, count)))


def timestamp_range(buf: bytes, pos: int, flags: int, count: int) -> Optional[tuple[int, int]]:
    """(smallest, largest) record timestamp of the batch at buf[pos] (None for an empty batch)."""
    if not count:
        return None
    stamps = struct.unpack_from(f"<{count}q", buf, payload_start(buf, pos, flags, count))
    return min(stamps), max(stamps)


def delete_horizon(buf: bytes, pos: int, flags: int) -> int:
    """The delete horizon (ms) stored in a compacted batch, -1 if none."""
    if not flags & FLAG_COMPACTED:
        return -1
    return COMPACTED_EXT.unpack_from(buf, pos + HEADER_SIZE)[1]


def _layout(count: int, has_headers: bool) -> struct.Struct:
    """The Struct of the fixed-size payload part (timestamps and lengths), cached."""
    key = (count, has_headers)
    layout = _layouts.get(key)
    if layout is None:
        if len(_layouts) >= _MAX_LAYOUT_CACHE:
            _layouts.clear()
        layout = struct.Struct(f"<{count}q{count * (3 if has_headers else 2)}i")
        _layouts[key] = layout
    return layout


# ---------------------------------------------------------------------------- encode

def encode_batch(records: Sequence[OutgoingRecord], base_offset: int, *,
                 producer_id: int = -1, flags: int = 0,
                 offsets: Optional[Sequence[int]] = None, span: int = 0,
                 horizon: int = -1) -> bytes:
    """Encode `records` (key, value, timestamp_ms, headers) as one batch.

    Keys and values must be bytes (or bytearray) or None; a None timestamp means now.
    `flags` may carry FLAG_TRANSACTIONAL / FLAG_CONTROL; the other bits are computed.
    With `offsets` (one per record, increasing, in [base_offset, base_offset + span))
    the batch is a compacted one covering `span` offsets, possibly with no record.
    """
    count = len(records)
    if offsets is not None:
        return _encode_compacted(records, base_offset, offsets, span, horizon)
    if count == 0:
        raise ValueError("cannot encode an empty batch")
    # Four plain lists (not zip(*records), whose per-record iterators trigger the GC).
    try:
        keys = list(map(_first, records))
        values = list(map(_second, records))
        timestamps = list(map(_third, records))
        headers = list(map(_fourth, records))
    except (TypeError, IndexError, KeyError):
        raise TypeError("records must be (key, value, timestamp_ms, headers) tuples") from None

    return _assemble(count, keys, values, timestamps, headers, base_offset, producer_id,
                     flags & (FLAG_TRANSACTIONAL | FLAG_CONTROL), b"")


def _encode_compacted(records: Sequence[OutgoingRecord], base_offset: int,
                      offsets: Sequence[int], span: int, horizon: int) -> bytes:
    count = len(records)
    if len(offsets) != count:
        raise ValueError(f"{count} records but {len(offsets)} offsets")
    deltas = [o - base_offset for o in offsets]
    if (span <= 0 or span > 0xFFFFFFFF or (deltas and (deltas[0] < 0 or deltas[-1] >= span))
            or any(b <= a for a, b in zip(deltas, deltas[1:]))):
        raise ValueError(f"offsets must increase within [{base_offset}, {base_offset + span})")
    ext = COMPACTED_EXT.pack(span, horizon) + struct.pack(f"<{count}I", *deltas)
    if count == 0:
        body = HEADER.pack(0, 0, MAGIC, FLAG_COMPACTED, 0, base_offset, -1, 0)[CRC_START:] + ext
        return _LENGTH_CRC.pack(4 + len(body), zlib.crc32(body)) + body
    return _assemble(count, list(map(_first, records)), list(map(_second, records)),
                     list(map(_third, records)), list(map(_fourth, records)), base_offset, -1,
                     FLAG_COMPACTED, ext)


def _assemble(count: int, keys: list, values: list, timestamps: list, headers: list,
              base_offset: int, producer_id: int, flags: int, ext: bytes) -> bytes:
    key_lens, key_data, null_keys = _encode_bytes(keys, "key")
    value_lens, value_data, null_values = _encode_bytes(values, "value")
    if null_keys:
        flags |= FLAG_NULL_KEYS
    if null_values:
        flags |= FLAG_NULL_VALUES

    if headers.count(None) == count:
        layout = _pack_layout(count, False, timestamps, key_lens, value_lens, ())
        blocks: list[bytes] = []
    else:
        flags |= FLAG_HAS_HEADERS
        encoded = [None if h is None else _encode_headers(h, i) for i, h in enumerate(headers)]
        header_lens = [-1 if b is None else len(b) for b in encoded]
        layout = _pack_layout(count, True, timestamps, key_lens, value_lens, header_lens)
        blocks = [b for b in encoded if b is not None]

    # everything after the crc field: the rest of the header, then the payload
    body = [HEADER.pack(0, 0, MAGIC, flags, 0, base_offset, producer_id, count)[CRC_START:],
            ext, layout, key_data, value_data, *blocks]
    length = 4 + sum(map(len, body))
    if length > 0xFFFFFFFF:
        raise ValueError(f"a batch of {count} records is {length} bytes, over the 4 GiB limit")
    crc = 0
    for part in body:
        crc = zlib.crc32(part, crc)
    return b"".join([_LENGTH_CRC.pack(length, crc), *body])


def rebase_batch(batch: bytes, base_offset: int) -> bytes:
    """Return `batch` with another base offset (and the CRC recomputed)."""
    if HEADER.unpack_from(batch)[5] == base_offset:
        return batch
    out = bytearray(batch)
    struct.pack_into("<Q", out, _BASE_OFFSET_POS, base_offset)
    struct.pack_into("<I", out, 4, zlib.crc32(memoryview(out)[CRC_START:]))
    return bytes(out)


def _encode_bytes(items: list, what: str) -> tuple[list[int], bytes, bool]:
    """Lengths (-1 for None), the concatenated bytes and whether any item is None."""
    try:
        return list(map(len, items)), b"".join(items), False
    except TypeError:
        pass  # a None, a str or another wrong type: take the careful path
    lens = []
    for i, item in enumerate(items):
        if item is None:
            lens.append(-1)
        elif isinstance(item, (bytes, bytearray)):
            lens.append(len(item))
        elif isinstance(item, memoryview):
            lens.append(item.nbytes)
        else:
            raise TypeError(f"record {i}: {what} must be bytes or None, not {type(item).__name__}")
    return lens, b"".join([item for item in items if item is not None]), -1 in lens


def _pack_layout(count: int, has_headers: bool, timestamps: list, key_lens: list,
                 value_lens: list, header_lens: Sequence[int]) -> bytes:
    layout = _layout(count, has_headers)
    try:
        return layout.pack(*timestamps, *key_lens, *value_lens, *header_lens)
    except struct.error:
        pass  # a None or float timestamp
    now = int(time.time() * 1000)
    fixed = []
    for i, ts in enumerate(timestamps):
        if ts is None:
            fixed.append(now)
        elif isinstance(ts, (int, float)):
            fixed.append(int(ts))
        else:
            raise TypeError(f"record {i}: timestamp must be an int (ms) or None, "
                            f"not {type(ts).__name__}")
    try:
        return layout.pack(*fixed, *key_lens, *value_lens, *header_lens)
    except struct.error as exc:
        raise ValueError(f"a timestamp beyond 64 bits or a key/value of 2 GiB or more: {exc}") \
            from None


_NAME_BLOCKS: dict = {}
"""Header name -> its encoded length and bytes (names repeat: most records carry the same few)."""
_NAME_BLOCKS_MAX = 4096
_ONE_HEADER = _U16.pack(1)


def _name_block(name: str) -> bytes:
    block = _NAME_BLOCKS.get(name)
    if block is None:
        name_bytes = name.encode("utf-8")
        block = _U16.pack(len(name_bytes)) + name_bytes
        if len(_NAME_BLOCKS) < _NAME_BLOCKS_MAX:
            _NAME_BLOCKS[name] = block
    return block


def _encode_headers(headers: Headers, index: int) -> bytes:
    if len(headers) == 1:  # the common case (e.g. a repartition record's writer stamp), inlined
        name, value = headers[0]
        if value.__class__ is bytes and name.__class__ is str:
            return b"".join((_ONE_HEADER, _name_block(name), _I32.pack(len(value)), value))
    try:
        parts = [_U16.pack(len(headers))]
        for name, value in headers:
            parts.append(_name_block(name))
            if value is None:
                parts.append(_I32.pack(-1))
            elif not isinstance(value, (bytes, bytearray)):
                raise TypeError(f"header {name!r} has a {type(value).__name__} value")
            else:
                parts.append(_I32.pack(len(value)))
                parts.append(value)
    except (TypeError, ValueError, AttributeError, struct.error) as exc:
        raise TypeError(f"record {index}: headers must be a tuple of (str, bytes) pairs, "
                        f"got {headers!r}: {exc}") from None
    return b"".join(parts)


# ---------------------------------------------------------------------------- decode

def decode_records(buf: bytes, pos: int, base_offset: int, count: int,
                   flags: int) -> list[RawRecord]:
    """Decode the records of the (already validated) batch that starts at buf[pos]."""
    if flags & FLAG_COMPACTED:
        return _decode_compacted(buf, pos, base_offset, count, flags)
    return _decode(buf, pos + HEADER_SIZE, base_offset, count, flags, None)


def _decode_compacted(buf: bytes, pos: int, base_offset: int, count: int,
                      flags: int) -> list[RawRecord]:
    if not count:
        return []
    start = pos + HEADER_SIZE + COMPACTED_EXT.size
    offsets = [base_offset + d for d in struct.unpack_from(f"<{count}I", buf, start)]
    return _decode(buf, start + 4 * count, base_offset, count, flags, offsets)


def _decode(buf: bytes, payload: int, base_offset: int, count: int, flags: int,
            offsets: Optional[list[int]]) -> list[RawRecord]:
    if count == 1 and not flags & FLAG_HAS_HEADERS:  # common with small producers
        timestamp, key_len, value_len = _ONE.unpack_from(buf, payload)
        data = payload + 16
        key = None if key_len < 0 else buf[data:data + key_len]
        data += max(key_len, 0)
        value = None if value_len < 0 else buf[data:data + value_len]
        return [(base_offset if offsets is None else offsets[0], timestamp, key, value, None)]
    has_headers = bool(flags & FLAG_HAS_HEADERS)
    layout = _layout(count, has_headers)
    fixed = layout.unpack_from(buf, payload)
    data = payload + layout.size
    timestamps = fixed[:count]
    lens = fixed[count:3 * count]  # key lengths then value lengths: the data order
    if flags & (FLAG_NULL_KEYS | FLAG_NULL_VALUES):
        keys, values, data_len = _decode_nullable(buf, data, lens, count)
    else:
        items = _bytes_struct(lens).unpack_from(buf, data)
        keys = items[:count]
        values = items[count:]
        data_len = sum(lens) if has_headers else 0
    if has_headers:
        headers = _decode_header_blocks(buf, data + data_len, fixed[3 * count:])
    else:
        headers = repeat(None)
    if offsets is None:
        offsets = range(base_offset, base_offset + count)
    return list(zip(offsets, timestamps, keys, values, headers))


def _decode_nullable(buf: bytes, data: int, lens: tuple, count: int
                     ) -> tuple[list[Optional[bytes]], list[Optional[bytes]], int]:
    """Keys and values when some are None (length -1)."""
    present = [n for n in lens if n >= 0]
    items = iter(_bytes_struct(present).unpack_from(buf, data) if present else ())
    decoded = [None if n < 0 else next(items) for n in lens]
    return decoded[:count], decoded[count:], sum(present)


def _bytes_struct(lens: Sequence[int]) -> struct.Struct:
    """A Struct that unpacks byte strings of these lengths (len(lens) >= 1), back to back.

    Built per batch and not cached: one-off formats would only churn the struct
    module's own cache.
    """
    if len(lens) == 1:
        return struct.Struct(f"<{lens[0]}s")
    try:
        codes = itemgetter(*lens)(_S_CODES)
    except IndexError:  # a key or value of 8 KiB or more
        codes = [f"{n}s" for n in lens]
    return struct.Struct("<" + "".join(codes))


def _decode_header_blocks(buf: bytes, pos: int, block_lens: tuple) -> list[Headers]:
    out: list[Headers] = []
    for block_len in block_lens:
        if block_len < 0:
            out.append(None)
            continue
        out.append(_decode_headers(buf, pos))
        pos += block_len
    return out


_NAMES: dict = {}
"""Encoded header name -> str (names repeat: most records carry the same few)."""


def _decode_headers(buf: bytes, pos: int) -> Headers:
    (n,) = _U16.unpack_from(buf, pos)
    pos += 2
    names = _NAMES
    if n == 1:  # the common case, inlined
        (name_len,) = _U16.unpack_from(buf, pos)
        raw = buf[pos + 2:pos + 2 + name_len]
        name = names.get(raw)
        if name is not None:
            pos += 2 + name_len
            (value_len,) = _I32.unpack_from(buf, pos)
            return ((name, None if value_len < 0 else buf[pos + 4:pos + 4 + value_len]),)
    headers = []
    for _ in range(n):
        (name_len,) = _U16.unpack_from(buf, pos)
        pos += 2
        raw = buf[pos:pos + name_len]
        name = names.get(raw)
        if name is None:
            name = str(raw, "utf-8")
            if len(names) < _NAME_BLOCKS_MAX:
                names[raw] = name
        pos += name_len
        (value_len,) = _I32.unpack_from(buf, pos)
        pos += 4
        if value_len < 0:
            value = None
        else:
            value = buf[pos:pos + value_len]
            pos += value_len
        headers.append((name, value))
    return tuple(headers)
