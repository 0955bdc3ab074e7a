"""Reading one partition: PartitionReader, in read_committed or read_uncommitted mode.

(Over 500 lines on purpose: it is one class, the read loop, whose methods share the
reader's cursor (open file, buffer, position, known transaction outcomes); split into
modules they would pass that state back and forth on the hottest path of the broker.
What needs no cursor is elsewhere: ``batch_walker``, ``segment_scan``, ``segment_files``.)

Plain batches (no transaction, not compacted) take the fast path: header check,
CRC, one decode. Control batches (transaction markers) are never returned; a
read_committed reader learns outcomes from them. At a transactional batch whose
outcome it does not know, it walks ahead (``BatchWalker``) to that transaction's
marker; if there is none yet the transaction is open and the reader stops there,
at the partition's last stable offset, until the marker arrives. Offsets of records
that are skipped (aborted, markers, removed by compaction) are gaps: the position
moves past them.

Housekeeping may delete (retention) or replace (compaction) a segment the reader
has open: it keeps reading its open file, whose contents stay consistent, and
re-finds its offset among the files of now when that file ends without a
successor, or when it waits at a transaction whose marker the cleaner removed
after rewriting its data.

Damaged data (``CorruptLogError``: a complete batch failing its CRC, invalid bytes
followed by valid data, a gap between segment files) is never skipped: read()
returns the records before it, and the next read() raises, naming topic,
partition, offset, file and byte position, as every read() at that place will.

Whenever the reader looks for its offset (a seek, a re-find) and finds it below the
log start, it goes on from the start and records the skipped range as lost
(``take_lost``), unless it was told to read from the start. Records still in a file
it has open are read, even below a start that moved meanwhile: they are not lost.
"""
from __future__ import annotations

import bisect
import fcntl
import os
import struct
import zlib
from typing import Optional, Union

from streamkit.core.records import RawRecord
from streamkit.broker.batch_format import (
    CRC_START, FLAG_COMPACTED, FLAG_CONTROL, FLAG_TRANSACTIONAL, HEADER, HEADER_SIZE,
    KNOWN_FLAGS, MAGIC, PEEK_SIZE, SPECIAL_FLAGS, batch_span, decode_records, header_is_valid,
    marker_is_commit, min_length)
from streamkit.broker.batch_walker import BatchWalker, Outcomes
from streamkit.broker.errors import (
    CorruptLogError, EmbeddedBrokerError, SegmentGapError, UnknownTopicError)
from streamkit.broker.segment_files import (
    BAD_CRC, BAD_HEADER, INCOMPLETE, INDEX_INTERVAL, READ_CHUNK, file_id, find_valid_batch,
    list_segments, segment_file_name)
from streamkit.broker.segment_scan import PartitionFiles

_unpack_header = HEADER.unpack_from
_unpack_span = struct.Struct("<I").unpack_from
_crc32 = zlib.crc32
_MAX_OUTCOMES = 4096  # learned outcomes kept before pruning those behind the reader


def _base_offset_at(fd: int, pos: int) -> Optional[int]:
    """The base offset field of the batch header at byte `pos`, None past the end."""
    head = os.pread(fd, HEADER_SIZE, pos)
    return _unpack_header(head)[5] if len(head) == HEADER_SIZE else None


class _Blocked:
    """_special's answer at a transaction that is still open."""


_BLOCKED = _Blocked()


class PartitionReader:
    """Reads one partition from `position` on, across segments; never blocks.

    Not thread-safe: one reader per consumer. Sees appends made by any process after
    it was created. With `read_committed` (the default) it returns committed
    transactional records and stops at the first open transaction; otherwise it
    returns every data record.
    """

    def __init__(self, log: PartitionFiles, *, read_committed: bool = True) -> None:
        self._log = log
        self._directory = log.directory
        self.read_committed = read_committed
        self._fd = -1
        self._segment = -1  # base offset of the open segment
        self._ino = 0  # its inode
        self._buf = b""  # bytes of the segment from _buf_pos on
        self._buf_pos = 0
        self._cur = 0  # index in _buf of the next batch to decode
        self._next = 0  # base offset the batch at _cur must have
        self._eof = True  # _buf reached the end of the file when it was read
        self._pending: list[RawRecord] = []  # decoded, not returned yet (from _pending_at)
        self._pending_at = 0
        self._located = False
        self._closed = False
        self._segments: list[int] = []  # base offsets, refreshed when they may be stale
        self._gap_checked_at: Optional[int] = None  # directory mtime of the last gap check that found none
        self._directory_id = file_id(self._directory)  # tells a recreated topic apart
        self._outcomes: Outcomes = {}  # transaction outcomes learned from markers
        self._walker: Optional[BatchWalker] = None  # look-ahead for unknown outcomes
        self._lost: list[tuple[int, int]] = []  # [first, end) deleted before they were read
        self._earliest = True  # reading from the log start, wherever it moves until located
        self.position: int = log.start_offset()
        """Offset of the next record read() returns."""

    def seek(self, offset: int) -> None:
        """Read from `offset` next; may be beyond the end. An offset below the log start
        reads from the start, and the range in between is lost (see take_lost)."""
        if self._closed:
            raise EmbeddedBrokerError(f"{self._log.describe()}: reader is closed")
        offset = int(offset)
        start = self._log.start_offset()
        self._earliest = False
        if offset < start:
            self._lose(offset, start)
            offset = start
        if offset == self.position and self._located:
            return
        self.position = offset
        self._pending = []
        self._located = False

    def seek_to_start(self) -> None:
        """Read from the log start next, wherever it is when the reader gets there."""
        if self._closed:
            raise EmbeddedBrokerError(f"{self._log.describe()}: reader is closed")
        self._earliest = True
        self.position = self._log.start_offset()
        self._pending = []
        self._located = False

    def take_lost(self) -> list[tuple[int, int]]:
        """Ranges [first, end) the reader was to read but were deleted first (retention,
        delete_records: the log start passed them), since the last call."""
        lost, self._lost = self._lost, []
        return lost

    def _lose(self, first: int, end: int) -> None:
        if end <= first:
            return
        if self._lost and self._lost[-1][1] == first:
            first = self._lost.pop()[0]
        self._lost.append((first, end))

    def read(self, max_records: int = 10_000) -> list[RawRecord]:
        """Up to `max_records` records from `position` on, possibly []; never blocks."""
        if self._closed:
            raise EmbeddedBrokerError(f"{self._log.describe()}: reader is closed")
        if max_records <= 0:
            return []
        out: list[RawRecord] = []
        if self._pending:
            at = self._pending_at
            out = self._pending[at:at + max_records]
            if at + max_records < len(self._pending):
                self._pending_at = at + max_records
                self.position = out[-1][0] + 1
                return out
            self._pending = []
        elif not self._located and not self._locate(self.position):
            return out
        position = self.position
        while len(out) < max_records:
            try:
                records = self._next_records()
            except CorruptLogError:
                if not out:
                    raise
                break  # deliver the records before the damage; the next read raises there
            if records is None:
                break
            first = records[0][0]
            if first < position or first < self.position:  # (a relocation may move it up)
                position = max(position, self.position)
                if records[-1][0] - first == len(records) - 1:
                    records = records[position - first:]
                else:  # a compacted batch: offsets with gaps
                    records = [r for r in records if r[0] >= position]
                    if not records:
                        continue
            room = max_records - len(out)
            if len(records) > room:
                self._pending = records
                self._pending_at = room
                records = records[:room]
            if out:
                out.extend(records)
            else:
                out = records
            position = out[-1][0] + 1
        if self._pending:
            self.position = out[-1][0] + 1
        else:  # also past skipped batches (markers, aborted, compacted away)
            self.position = max(position, self._next)
        if len(self._outcomes) > _MAX_OUTCOMES:
            self._prune_outcomes()
        return out

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self._drop_walker()
        self._buf = b""
        self._pending = []
        self._closed = True

    def __enter__(self) -> "PartitionReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ internals

    def _list_segments(self) -> list[int]:
        self._segments = list_segments(self._directory)
        return self._segments

    def _open_segment(self, base: int) -> None:
        if base != self._segment or self._fd < 0 or self._file_replaced():
            if file_id(self._directory) != self._directory_id:
                raise UnknownTopicError(f"{self._log.describe()}: the topic was deleted "
                                        f"while this reader was open")
            fd = os.open(self._log.segment_path(base), os.O_RDONLY)
            if self._fd >= 0:
                os.close(self._fd)
            self._fd = fd
            self._segment = base
            self._ino = os.fstat(fd).st_ino
        self._buf, self._buf_pos, self._cur, self._next, self._eof = b"", 0, 0, base, True

    def _file_replaced(self) -> bool:
        """Whether the open segment file was deleted or replaced by housekeeping."""
        return os.fstat(self._fd).st_nlink == 0

    def _locate(self, offset: int) -> bool:
        """Position the cursor at the batch holding `offset` (or the end if beyond)."""
        self._drop_walker()
        segments = self._segments
        if not segments or offset < segments[0] or offset >= segments[-1]:
            segments = self._list_segments()  # segments are only added at the end
            if not segments:
                return False
        start = max(segments[0], self._log.start_offset())
        if offset < start:  # deleted meanwhile (retention, delete_records)
            if not self._earliest:
                self._lose(offset, start)
            offset = self.position = start
        base = segments[bisect.bisect_right(segments, offset) - 1]
        try:
            self._open_segment(base)
        except FileNotFoundError:  # removed meanwhile (retention, topic deleted): try again
            self._segments = []
            return False
        index = self._log.index
        key = (base, self._ino)
        pos, expected = index.floor(key, offset)
        due = index.next_due(key)
        fd = self._fd
        if pos and _base_offset_at(fd, pos) != expected:
            pos, expected = 0, base  # the file was changed in place: the index entry is stale
        size = os.fstat(fd).st_size
        chunk, chunk_pos, want = b"", pos, 2 * INDEX_INTERVAL  # enough from a nearby entry
        while pos + PEEK_SIZE <= size:  # walk batch headers up to the one holding `offset`
            rel = pos - chunk_pos
            if rel + PEEK_SIZE > len(chunk):
                chunk, chunk_pos, rel = os.pread(fd, want, pos), pos, 0
                if len(chunk) < PEEK_SIZE:
                    break
            length, _crc, magic, flags, reserved, first, _pid, count = _unpack_header(chunk, rel)
            end = pos + 4 + length
            if (first != expected or end > size
                    or not header_is_valid(magic, flags, reserved, count, length)):
                break
            span = batch_span(chunk, rel, flags, count)
            if first + span > offset:
                break
            if pos >= due:
                index.add(key, first, pos)
                due = pos + INDEX_INTERVAL
            pos = end
            expected = first + span
            want = READ_CHUNK if length < READ_CHUNK // 16 else 4096  # big batches: headers only
        if chunk_pos <= pos < chunk_pos + len(chunk):
            self._buf, self._buf_pos, self._cur = chunk, chunk_pos, pos - chunk_pos
            self._eof = chunk_pos + len(chunk) >= size
        else:
            self._buf, self._buf_pos, self._cur, self._eof = b"", pos, 0, False
        self._next = expected
        self._located = True
        self._earliest = False  # from here on, what goes before it is read is lost
        return True

    def _relocate(self, offset: int) -> bool:
        """Find `offset` again among the segment files of now (ours was replaced)."""
        self._segments = []
        return self._locate(offset)

    def _refill(self, need: int) -> None:
        """Re-read the segment from the cursor: at least `need` bytes if they exist."""
        pos = self._buf_pos + self._cur
        size = os.fstat(self._fd).st_size
        if size <= pos:
            self._buf, self._buf_pos, self._cur, self._eof = b"", pos, 0, True
            return
        data = os.pread(self._fd, min(size - pos, max(READ_CHUNK, need)), pos)
        self._buf, self._buf_pos, self._cur = data, pos, 0
        self._eof = pos + len(data) >= size

    def _next_records(self) -> Optional[list[RawRecord]]:
        """Records of the next valid batch that reaches `position`; None if none yet."""
        tries = 0
        while True:
            buf = self._buf
            cur = self._cur
            need = HEADER_SIZE
            if len(buf) - cur >= HEADER_SIZE:
                length, crc, magic, flags, reserved, base, pid, count = _unpack_header(buf, cur)
                if (base != self._next or magic != MAGIC or reserved or flags & ~KNOWN_FLAGS
                        or length < min_length(count, flags)
                        or not (count or flags & FLAG_COMPACTED)):
                    problem = BAD_HEADER
                else:
                    end = cur + 4 + length
                    if end > len(buf):
                        problem = INCOMPLETE
                        need = end - cur
                    else:
                        span = _unpack_span(buf, cur + HEADER_SIZE)[0] \
                            if flags & FLAG_COMPACTED else count
                        self._cur = end
                        self._next = base + span
                        if base + span <= self.position:
                            continue
                        if _crc32(memoryview(buf)[cur + CRC_START:end]) == crc:
                            if not flags & SPECIAL_FLAGS:
                                return decode_records(buf, cur, base, count, flags)
                            try:
                                records = self._special(buf, cur, base, count, flags, pid)
                            except CorruptLogError:
                                self._cur, self._next = cur, base  # stay: raise here again
                                raise
                            if records is None:
                                continue
                            if records is not _BLOCKED:
                                return records  # type: ignore[return-value]
                            self._cur, self._next = cur, base  # wait at the open transaction
                            if self._file_replaced() and self._relocate(max(base, self.position)):
                                continue  # the cleaner rewrote it (and dropped its marker)
                            return None
                        self._cur = cur
                        self._next = base
                        problem = BAD_CRC
            else:
                problem = INCOMPLETE
            if problem is INCOMPLETE and not self._eof:
                self._refill(need)  # a batch across the end of the buffer
                continue
            if tries == 0:  # look at the file again: it may have grown or been repaired
                tries = 1
                self._refill(need)
                continue
            if self._next_segment(problem, need):
                tries = 0
                continue
            if problem is INCOMPLETE or tries == 2:
                return None  # the tail: a writer is mid-write or left a torn write
            tries = 2
            self._check_tail(problem)

    def _special(self, buf: bytes, cur: int, base: int, count: int, flags: int,
                 pid: int) -> Union[list[RawRecord], None, _Blocked]:
        """A control, transactional or compacted batch: its records, None to skip it, or
        _BLOCKED at a transaction whose outcome is not known yet."""
        if flags & FLAG_CONTROL:
            if self.read_committed:
                commit = marker_is_commit(buf, cur)
                if commit is not None:
                    self._outcomes[pid] = (commit, base)
            return None
        if flags & FLAG_TRANSACTIONAL and self.read_committed:
            outcome = self._outcomes.get(pid)
            if outcome is None:
                outcome = self._look_ahead(pid, cur, base)
                if outcome is None:
                    return _BLOCKED
            if not outcome[0]:
                return None  # aborted
        if not count:
            return None
        return decode_records(buf, cur, base, count, flags)

    def _look_ahead(self, pid: int, cur: int, base: int) -> Optional[tuple[bool, int]]:
        """Walk ahead from the batch at `cur` (or where the last walk stopped) to the
        marker of transaction `pid`; its outcome, or None if it has none yet."""
        walker = self._walker
        if walker is None or walker.offset < base:
            self._drop_walker()
            walker = self._walker = BatchWalker(self._log, self._segment, os.dup(self._fd),
                                                self._buf_pos + cur, base)
        walker.advance(self._outcomes, until=pid)
        return self._outcomes.get(pid)

    def _drop_walker(self) -> None:
        if self._walker is not None:
            self._walker.close()
            self._walker = None

    def _prune_outcomes(self) -> None:
        """Forget outcomes of transactions whose marker is behind the reader."""
        behind = self._next
        self._outcomes = {pid: o for pid, o in self._outcomes.items() if o[1] >= behind}

    def _batch_at_cursor_is_valid(self) -> bool:
        buf, cur = self._buf, self._cur
        if len(buf) - cur < HEADER_SIZE:
            return False
        length, crc, magic, flags, reserved, base, _pid, count = _unpack_header(buf, cur)
        end = cur + 4 + length
        return (base == self._next and header_is_valid(magic, flags, reserved, count, length)
                and end <= len(buf) and _crc32(memoryview(buf)[cur + CRC_START:end]) == crc)

    def _next_segment(self, problem: str, need: int) -> bool:
        """Move on if this segment is sealed (a later one exists); False if it is the last."""
        if problem is INCOMPLETE and len(self._buf) == self._cur:
            # Clean end of the segment: a roll names the new segment by our next offset.
            if self._next == self._segment:
                return False
            if not os.path.exists(self._log.segment_path(self._next)):
                if self._file_replaced():  # deleted by retention: find our offset again
                    return self._relocate(max(self._next, self.position))
                self._check_gap()
                return False
            self._refill(READ_CHUNK)  # sealed now: anything appended before the roll?
            if len(self._buf) > self._cur:
                return True
            try:
                self._open_segment(self._next)
            except FileNotFoundError:  # deleted between the look and the open
                return self._relocate(max(self._next, self.position))
            return True
        if not any(base > self._segment for base in self._list_segments()):
            return False
        # Writers drop torn tails before they roll, so a sealed segment ends cleanly.
        self._refill(max(need, READ_CHUNK))
        if self._batch_at_cursor_is_valid():
            return True
        pos = self._buf_pos + self._cur
        raise CorruptLogError(
            f"{self._log.describe(segment_file_name(self._segment), pos)}: {problem} at offset "
            f"{self._next} in a segment that is followed by a later segment")

    def _check_gap(self) -> None:
        """At the clean end of a segment that no segment continues: raise SegmentGapError if
        a later segment exists (records between are missing), else this is the last one.
        A tailing reader comes here at every read: the directory is listed again only once
        its files changed (a roll is found by name before this, so this is the gap check alone)."""
        changed = os.stat(self._directory).st_mtime_ns
        if changed == self._gap_checked_at:
            return
        segments = self._list_segments()
        later = [base for base in segments if base > self._segment]
        if not later:
            self._gap_checked_at = changed
            return  # the last segment
        if self._next in segments or self._file_replaced():
            return  # a roll or a retention pass meanwhile: look again
        if os.fstat(self._fd).st_size > self._buf_pos + len(self._buf):
            # The writer appended to this segment after our last read, then rolled: the later
            # segment was listed after those appends, so the file's size now shows them.
            return
        raise SegmentGapError(
            f"{self._log.describe(segment_file_name(self._segment))}: the segment ends at offset "
            f"{self._next} but no segment file starts there; the next one is "
            f"{segment_file_name(later[0])}: offsets {self._next} to {later[0] - 1} are missing "
            f"(a segment file was deleted, or {segment_file_name(later[0])} does not belong here)")

    def _complete_batch_fails_crc(self) -> Optional[int]:
        """Size of the batch at the cursor if all its bytes are in the file and its CRC
        fails (damaged committed data, never a torn write), else None."""
        pos = self._buf_pos + self._cur
        head = os.pread(self._fd, HEADER_SIZE, pos)
        if len(head) < HEADER_SIZE:
            return None
        length, crc, magic, flags, reserved, base, _pid, count = _unpack_header(head)
        if base != self._next or not header_is_valid(magic, flags, reserved, count, length):
            return None
        body = os.pread(self._fd, length - 4, pos + CRC_START)
        if len(body) != length - 4 or _crc32(body) == crc:
            return None
        return 4 + length

    def _check_tail(self, problem: str) -> None:
        """Bad bytes at the end of the last segment: raise unless they are a torn tail.

        Looks under a shared lock, so that no writer is truncating or appending meanwhile.
        """
        try:
            lock_fd = os.open(self._log.lock_path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            try:
                fcntl.flock(lock_fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return  # a writer is at work: look again at the next read
            self._refill(READ_CHUNK)
            if self._batch_at_cursor_is_valid():
                return
            pos = self._buf_pos + self._cur
            size = self._complete_batch_fails_crc()
            if size is not None:
                raise CorruptLogError(
                    f"{self._log.describe(segment_file_name(self._segment), pos)}: {BAD_CRC} in the "
                    f"complete batch at offset {self._next} ({size} bytes): committed data is "
                    f"damaged (not a torn write)")
            found = find_valid_batch(self._fd, pos, self._next + 1)
            if found is not None:
                raise CorruptLogError(
                    f"{self._log.describe(segment_file_name(self._segment), pos)}: {problem} "
                    f"in the batch at offset {self._next}, followed by valid data at byte {found}")
        finally:
            os.close(lock_fd)  # releases the lock
