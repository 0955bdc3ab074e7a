"""Walking batch headers forward through a partition to learn transaction outcomes.

A read_committed reader that meets a transactional batch whose outcome it does not
know yet walks ahead (headers only, plus the tiny marker batches) until it finds
that transaction's COMMIT or ABORT marker, noting every marker it passes, and keeps
its place: the next unknown transaction continues from there, so no byte is walked
twice. ``TxnTracker`` does the same from the log start to keep a partition's open
transactions and so its last stable offset.

Segments the walker has open may be deleted (retention) or replaced (compaction)
meanwhile: it keeps reading its open file, which stays consistent, and when that
file ends and no segment is named by the next offset, it re-finds its offset in
the segments that exist now.
"""
from __future__ import annotations

import bisect
import os
import zlib
from typing import Optional

from streamkit.broker.batch_format import (
    CRC_START, FLAG_CONTROL, FLAG_TRANSACTIONAL, HEADER, PEEK_SIZE, batch_span, header_is_valid,
    marker_is_commit)
from streamkit.broker.errors import SegmentGapError
from streamkit.broker.segment_files import READ_CHUNK, list_segments, segment_file_name
from streamkit.broker.segment_scan import PartitionFiles

_unpack_header = HEADER.unpack_from
_crc32 = zlib.crc32

Outcomes = dict[int, tuple[bool, int]]
"""Transaction id -> (committed, offset of its marker)."""


class BatchWalker:
    """A forward cursor over batch headers from a batch start, across segments.

    Owns `fd` (an open segment file positioned by `pos`). Not thread-safe.
    """

    def __init__(self, log: PartitionFiles, segment: int, fd: int, pos: int,
                 offset: int) -> None:
        self._log = log
        self._segment = segment
        self._fd = fd
        self._pos = pos
        self._skip_below = offset  # batches ending at or below it were walked already
        self.offset = offset  # base offset of the batch at _pos
        self._chunk = b""
        self._chunk_pos = 0
        self._size = 0  # the file is at least this long
        self._want = READ_CHUNK

    @classmethod
    def at_start(cls, log: PartitionFiles) -> Optional["BatchWalker"]:
        """A walker at the first batch of the partition; None if it has no segment."""
        for base in list_segments(log.directory):
            try:
                fd = os.open(log.segment_path(base), os.O_RDONLY)
            except FileNotFoundError:
                continue  # deleted by retention meanwhile
            return cls(log, base, fd, 0, base)
        return None

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self._chunk = b""

    def advance(self, outcomes: Optional[Outcomes] = None,
                open_txns: Optional[dict[int, int]] = None, until: Optional[int] = None) -> bool:
        """Walk the complete batches that exist now, recording markers in `outcomes` and
        the first offset of transactions without a marker yet in `open_txns`.

        Returns True as soon as the marker of transaction `until` was walked, False at
        the end of the log (or at a torn or damaged batch, left to readers to judge).
        """
        while self._fd >= 0:
            rel = self._pos - self._chunk_pos
            chunk = self._chunk
            if rel + PEEK_SIZE > len(chunk):
                chunk = self._read(self._want)
                rel = 0
                if len(chunk) < PEEK_SIZE:
                    if chunk or not self._next_segment():
                        return False
                    continue
            length, crc, magic, flags, reserved, base, pid, count = _unpack_header(chunk, rel)
            if base != self.offset or not header_is_valid(magic, flags, reserved, count, length):
                return False
            end = self._pos + 4 + length
            if end > self._size:
                self._size = os.fstat(self._fd).st_size
                if end > self._size:
                    return False  # being written, or torn
            span = batch_span(chunk, rel, flags, count)
            self._want = READ_CHUNK if length < READ_CHUNK // 16 else 4096
            if base + span > self._skip_below and flags & (FLAG_CONTROL | FLAG_TRANSACTIONAL):
                if flags & FLAG_CONTROL:
                    if rel + 4 + length > len(chunk):
                        chunk = self._read(4 + length)
                        rel = 0
                    if _crc32(memoryview(chunk)[rel + CRC_START:rel + 4 + length]) != crc:
                        return False  # a torn marker is no marker
                    commit = marker_is_commit(chunk, rel)
                    if commit is not None:
                        if outcomes is not None:
                            outcomes[pid] = (commit, base)
                        if open_txns is not None:
                            open_txns.pop(pid, None)
                        if pid == until:
                            self._pos, self.offset = end, base + span
                            return True
                elif open_txns is not None and pid not in open_txns:
                    open_txns[pid] = base
            self._pos, self.offset = end, base + span
        return False

    def _read(self, want: int) -> bytes:
        self._chunk = os.pread(self._fd, want, self._pos)
        self._chunk_pos = self._pos
        if self._pos + len(self._chunk) > self._size:
            self._size = self._pos + len(self._chunk)
        return self._chunk

    def _next_segment(self) -> bool:
        """At the clean end of a file: go on to the segment that follows, if any."""
        path = self._log.segment_path(self.offset)
        if self.offset != self._segment:
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                fd = -1
            if fd >= 0:
                self._switch(fd, self.offset)
                return True
        if os.fstat(self._fd).st_nlink:
            self._check_gap()
            return False  # the last segment: wait for more
        # Our file was deleted or replaced: find our offset in the segments of now.
        segments = list_segments(self._log.directory)
        i = bisect.bisect_right(segments, self.offset) - 1
        for base in segments[max(i, 0):]:
            try:
                fd = os.open(self._log.segment_path(base), os.O_RDONLY)
            except FileNotFoundError:
                continue
            self._skip_below = self.offset
            self._switch(fd, base)
            return True
        return False

    def _check_gap(self) -> None:
        """At the clean end of a segment no segment continues: SegmentGapError if a later
        one exists (a transaction's marker behind the gap would never be found)."""
        segments = list_segments(self._log.directory)
        later = [base for base in segments if base > self._segment]
        if not later or self.offset in segments or not os.fstat(self._fd).st_nlink:
            return  # the last segment, or a roll or a retention pass meanwhile
        if os.fstat(self._fd).st_size > self._pos:
            return  # appended to after our last read, then rolled: read on, no gap
        raise SegmentGapError(
            f"{self._log.describe(segment_file_name(self._segment))}: the segment ends at offset "
            f"{self.offset} but no segment file starts there; the next one is "
            f"{segment_file_name(later[0])}: offsets {self.offset} to {later[0] - 1} are missing")

    def _switch(self, fd: int, base: int) -> None:
        os.close(self._fd)
        self._fd, self._segment, self._pos, self.offset = fd, base, 0, base
        self._chunk, self._chunk_pos, self._size = b"", 0, 0


class TxnTracker:
    """The open transactions of one partition, kept up to date incrementally."""

    def __init__(self, log: PartitionFiles) -> None:
        self._log = log
        self._walker: Optional[BatchWalker] = None
        self._open: dict[int, int] = {}  # transaction id -> first offset in this partition

    def last_stable_offset(self) -> int:
        if self._walker is None:
            self._walker = BatchWalker.at_start(self._log)
            if self._walker is None:
                return self._log.start_offset()
        self._walker.advance(open_txns=self._open)
        if not self._open:
            return max(self._walker.offset, self._log.start_offset())
        # A transaction that looks open below the cleaner's checkpoint was resolved: its
        # data was rewritten and its marker dropped while we walked an older file.
        floor = self._log.cleaned_offset()
        for txn, first in list(self._open.items()):
            if first < floor:
                del self._open[txn]
        start = self._log.start_offset()
        return max(min(self._open.values(), default=self._walker.offset), start)

    def close(self) -> None:
        if self._walker is not None:
            self._walker.close()
            self._walker = None
