"""Finding batches in a segment file: the scan that walks batch headers, the sparse
index of batch positions it fills, and :class:`PartitionFiles`, what the readers of a
partition (``reader``, ``batch_walker``) need of its log.

Lower than ``partition_log``, ``reader`` and ``batch_walker``, so the three depend on
it and never on each other in a circle: the log makes readers; readers see the log only
as :class:`PartitionFiles`.
"""
from __future__ import annotations

import bisect
import os
import threading
import zlib
from array import array
from collections import OrderedDict
from typing import NamedTuple, Optional, Protocol

from streamkit.broker.batch_format import CRC_START, HEADER, PEEK_SIZE, batch_span, header_is_valid
from streamkit.broker.segment_files import BAD_CRC, BAD_HEADER, INCOMPLETE, INDEX_INTERVAL, READ_CHUNK

INDEXED_SEGMENTS = 16  # per partition; 16 KiB of index per 64 MiB segment

_unpack_header = HEADER.unpack_from
_crc32 = zlib.crc32

SegmentKey = tuple[int, int]
"""(base offset, inode) of a segment file: a file replaced by the cleaner is another key."""


class ScanResult(NamedTuple):
    pos: int  # end of the last valid batch
    offset: int  # offset after the last valid batch
    size: int  # file size seen
    problem: Optional[str]  # what is wrong at `pos`, if the file does not end there


def scan_segment(fd: int, pos: int, offset: int,
                 index: Optional[tuple["SparseIndex", SegmentKey]] = None) -> ScanResult:
    """Walk batch headers from `pos` (a batch start with base `offset`) to the end.

    Only the batch that ends exactly at the end of the file has its CRC checked: it
    is the only one a crashed writer can have left behind. Batch positions go to
    `index` = (sparse index, segment key) if given.
    """
    size = os.fstat(fd).st_size
    index_due = index[0].next_due(index[1]) if index else size
    chunk, chunk_pos, want = b"", pos, READ_CHUNK
    while pos < size:
        rel = pos - chunk_pos
        if rel + PEEK_SIZE > len(chunk):
            chunk = os.pread(fd, min(want, size - pos), pos)
            chunk_pos, rel = pos, 0
            if len(chunk) < PEEK_SIZE:
                return ScanResult(pos, offset, size, INCOMPLETE)
        length, crc, magic, flags, reserved, base, _pid, count = _unpack_header(chunk, rel)
        if base != offset or not header_is_valid(magic, flags, reserved, count, length):
            return ScanResult(pos, offset, size, BAD_HEADER)
        end = pos + 4 + length
        if end > size:
            return ScanResult(pos, offset, size, INCOMPLETE)
        if pos >= index_due:
            index[0].add(index[1], base, pos)
            index_due = pos + INDEX_INTERVAL
        if end == size:
            if rel + 4 + length <= len(chunk):
                body = memoryview(chunk)[rel + CRC_START:rel + 4 + length]
            else:
                body = os.pread(fd, length - 4, pos + CRC_START)
            if len(body) != length - 4 or _crc32(body) != crc:
                return ScanResult(pos, offset, size, BAD_CRC)
        pos = end
        offset = base + batch_span(chunk, rel, flags, count)
        want = READ_CHUNK if length < READ_CHUNK // 16 else 4096  # big batches: headers only
    return ScanResult(pos, offset, size, None)


class SparseIndex:
    """Per segment file, the (base offset, byte position) of a batch every INDEX_INTERVAL
    bytes, for cheap seeks. Kept for the INDEXED_SEGMENTS most recently used files.

    Keyed by (segment base, inode): a segment the cleaner rewrote is a new file with
    other positions, so its old entries are simply never looked up again.
    """

    def __init__(self) -> None:
        self._segments: OrderedDict[SegmentKey, tuple[array, array]] = OrderedDict()
        self._mutex = threading.Lock()

    def floor(self, key: SegmentKey, offset: int) -> tuple[int, int]:
        """(position, base offset) of the last known batch starting at or before `offset`."""
        with self._mutex:
            entries = self._segments.get(key)
            if entries:
                self._segments.move_to_end(key)
                i = bisect.bisect_right(entries[0], offset) - 1
                if i >= 0:
                    return entries[1][i], entries[0][i]
        return 0, key[0]

    def next_due(self, key: SegmentKey) -> int:
        """Byte position from which the next entry of the segment is wanted."""
        entries = self._segments.get(key)
        return (entries[1][-1] if entries else 0) + INDEX_INTERVAL

    def add(self, key: SegmentKey, offset: int, pos: int) -> None:
        """Record a batch start, if far enough after the last entry of its segment."""
        with self._mutex:
            entries = self._segments.get(key)
            if entries is None:
                if len(self._segments) >= INDEXED_SEGMENTS:
                    self._segments.popitem(last=False)
                entries = self._segments[key] = (array("q"), array("q"))
            offsets, positions = entries
            if pos - (positions[-1] if positions else 0) >= INDEX_INTERVAL and (
                    not offsets or offset > offsets[-1]):
                offsets.append(offset)
                positions.append(pos)


class PartitionFiles(Protocol):
    """A partition's log as its readers see it (``PartitionLog`` is one)."""

    directory: str
    """The partition's directory."""
    lock_path: str
    """The file appenders ``flock``."""
    index: SparseIndex
    """Batch positions, shared by the log and its readers."""

    def describe(self, file: Optional[str] = None, pos: Optional[int] = None) -> str:
        """Topic and partition, plus file and byte position: the where of messages."""

    def segment_path(self, base_offset: int) -> str:
        """The path of the segment starting at ``base_offset``."""

    def start_offset(self) -> int:
        """The first offset still readable."""

    def cleaned_offset(self) -> int:
        """The end of the range the last compaction cleaned."""
