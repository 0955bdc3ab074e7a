"""Reading a sealed segment (not the last one) whole: for retention and compaction.

A sealed segment never changes; it may only be deleted or replaced as a whole. Its
batches must all be complete and valid, so anything else is corruption.
"""
from __future__ import annotations

import os
import zlib
from typing import Iterator, NamedTuple, Optional

from streamkit.broker.batch_format import (
    CRC_START, FLAG_CONTROL, HEADER, PEEK_SIZE, batch_span, header_is_valid, timestamp_range)
from streamkit.broker.errors import CorruptLogError

_unpack_header = HEADER.unpack_from
READ_SIZE = 4 << 20


class Batch(NamedTuple):
    buf: bytes  # holds the batch at `pos`
    pos: int
    base: int
    span: int
    flags: int
    producer_id: int
    count: int
    length: int  # bytes after the length field

    @property
    def raw(self) -> bytes:
        return self.buf[self.pos:self.pos + 4 + self.length]


def iter_batches(fd: int, base: int, where: str, *, start: tuple[int, int] = (0, -1),
                 size: Optional[int] = None) -> Iterator[Batch]:
    """The CRC-checked batches of a segment file, in order, from byte ``start[0]`` (the
    batch holding offset ``start[1]``; the file's start by default) up to byte ``size``
    (the file's size by default).

    `where` names the file in errors. Raises CorruptLogError on anything invalid.
    """
    size = os.fstat(fd).st_size if size is None else size
    file_pos, offset = start if start[1] >= 0 else (0, base)
    buf, buf_pos = b"", 0
    while file_pos < size:
        rel = file_pos - buf_pos
        if rel + PEEK_SIZE > len(buf):
            buf, buf_pos, rel = os.pread(fd, READ_SIZE, file_pos), file_pos, 0
            if len(buf) < PEEK_SIZE:
                raise CorruptLogError(f"{where}: truncated batch at byte {file_pos}")
        length, crc, magic, flags, reserved, first, pid, count = _unpack_header(buf, rel)
        if first != offset or not header_is_valid(magic, flags, reserved, count, length):
            raise CorruptLogError(f"{where}: invalid batch header at byte {file_pos} "
                                  f"(offset {offset})")
        if rel + 4 + length > len(buf):
            buf, buf_pos, rel = os.pread(fd, max(READ_SIZE, 4 + length), file_pos), file_pos, 0
            if 4 + length > len(buf):
                raise CorruptLogError(f"{where}: truncated batch at byte {file_pos}")
        if zlib.crc32(memoryview(buf)[rel + CRC_START:rel + 4 + length]) != crc:
            raise CorruptLogError(f"{where}: CRC mismatch at byte {file_pos} (offset {offset})")
        span = batch_span(buf, rel, flags, count)
        yield Batch(buf, rel, first, span, flags, pid, count, length)
        file_pos += 4 + length
        offset = first + span


class SegmentStats(NamedTuple):
    size: int
    max_timestamp: Optional[int]  # None if it holds no data record
    records: int  # data records (markers not counted)
    min_timestamp: Optional[int] = None  # None if it holds no data record


def segment_stats(fd: int, base: int, where: str, since: Optional[tuple[SegmentStats, int]] = None
                  ) -> tuple[SegmentStats, int]:
    """Size, timestamp range and record count of a segment, and the offset after its last
    batch. ``size`` is the file's size before the scan: on the active segment, a size that
    has not changed since means the scan saw every byte (CorruptLogError if an append was
    caught half-written). ``since``: the stats and end offset of an earlier scan of the same
    (growing) file: only the bytes after it are read."""
    size = os.fstat(fd).st_size
    earlier, offset = since if since is not None else (SegmentStats(0, None, 0, None), base)
    newest, oldest, records = earlier.max_timestamp, earlier.min_timestamp, earlier.records
    for batch in iter_batches(fd, base, where, start=(earlier.size, offset), size=size):
        offset = batch.base + batch.span
        if batch.flags & FLAG_CONTROL or not batch.count:
            continue
        records += batch.count
        span = timestamp_range(batch.buf, batch.pos, batch.flags, batch.count)
        if span is not None:
            oldest = span[0] if oldest is None else min(oldest, span[0])
            newest = span[1] if newest is None else max(newest, span[1])
    return SegmentStats(size, newest, records, oldest), offset
