"""One partition of the embedded log: segment files, appends, readers and recovery.

A partition is a directory of segment files named by the offset of their first
record (``<base_offset:020d>.log``), each a sequence of record batches
(see ``batch_format``), plus a ``.lock`` file. Appends from any process take an
exclusive ``flock`` on ``.lock``; readers take no lock. Only the last segment grows.

Crash safety rests on three facts: a batch is written with one ``os.write`` under
the lock, so only the last batch of the last segment can be torn (by a writer killed
mid-write); the next writer truncates such a torn tail before it appends; and
readers never return a batch that is incomplete or fails its CRC. An invalid batch is
a torn tail when no valid batch follows it, and corruption (``CorruptLogError``)
when one does.
"""
from __future__ import annotations

import bisect
import fcntl
import logging
import os
import re
import threading
import zlib
from array import array
from collections import OrderedDict
from typing import NamedTuple, Optional, Sequence

from streamkit.transport.base import OutgoingRecord, PartitionOffsets, RawRecord
from streamkit.transport.embedded.batch_format import (
    CRC_START, HEADER, HEADER_SIZE, KNOWN_FLAGS, MAGIC, decode_records, encode_batch,
    header_is_valid, min_length, rebase_batch)
from streamkit.transport.embedded.errors import (
    CorruptLogError, EmbeddedBrokerError, UnknownTopicError)

logger = logging.getLogger(__name__)

SEGMENT_SUFFIX = ".log"
LOCK_FILE_NAME = ".lock"
READ_CHUNK = 1 << 20
MAX_BATCH_BYTES = 4 << 20  # larger appends are split into several batches
INDEX_INTERVAL = 64 << 10  # bytes between sparse index entries
INDEXED_SEGMENTS = 16  # per partition; 16 KiB of index per 64 MiB segment
MAX_UNSYNCED_SEGMENTS = 4  # rolled-away segments kept open until sync()

_INCOMPLETE = "incomplete batch"
_BAD_HEADER = "invalid batch header"
_BAD_CRC = "CRC mismatch"
# magic, flags, reserved of a batch header: where to look for a batch after bad bytes
_HEADER_MARK = re.compile(rb"(?=\x01[\x00-\x1f]\x00\x00)")
_unpack_header = HEADER.unpack_from
_crc32 = zlib.crc32


class LogGoneError(EmbeddedBrokerError):
    """The partition directory was deleted (or replaced) under an open log."""


def segment_file_name(base_offset: int) -> str:
    return f"{base_offset:020d}{SEGMENT_SUFFIX}"


def list_segments(directory: str | os.PathLike) -> list[int]:
    """Base offsets of the segment files in `directory`, ascending ([] if none)."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(int(name[:20]) for name in names
                  if len(name) == 24 and name.endswith(SEGMENT_SUFFIX) and name[:20].isdigit())


class _ScanResult(NamedTuple):
    pos: int  # end of the last valid batch
    offset: int  # offset after the last valid batch
    size: int  # file size seen
    problem: Optional[str]  # what is wrong at `pos`, if the file does not end there


def scan_segment(fd: int, pos: int, offset: int,
                 index: Optional[tuple["_SparseIndex", int]] = None) -> _ScanResult:
    """Walk batch headers from `pos` (a batch start with base `offset`) to the end.

    Only the batch that ends exactly at the end of the file has its CRC checked: it
    is the only one a crashed writer can have left behind. Batch positions go to
    `index` = (sparse index, segment base) if given.
    """
    size = os.fstat(fd).st_size
    index_due = index[0].next_due(index[1]) if index else size
    chunk, chunk_pos, want = b"", pos, READ_CHUNK
    while pos < size:
        rel = pos - chunk_pos
        if rel + HEADER_SIZE > len(chunk):
            chunk = os.pread(fd, min(want, size - pos), pos)
            chunk_pos, rel = pos, 0
            if len(chunk) < HEADER_SIZE:
                return _ScanResult(pos, offset, size, _INCOMPLETE)
        length, crc, magic, flags, reserved, base, _pid, count = _unpack_header(chunk, rel)
        if base != offset or not header_is_valid(magic, flags, reserved, count, length):
            return _ScanResult(pos, offset, size, _BAD_HEADER)
        end = pos + 4 + length
        if end > size:
            return _ScanResult(pos, offset, size, _INCOMPLETE)
        if pos >= index_due:
            index[0].add(index[1], base, pos)
            index_due = pos + INDEX_INTERVAL
        if end == size:
            if rel + 4 + length <= len(chunk):
                body = memoryview(chunk)[rel + CRC_START:rel + 4 + length]
            else:
                body = os.pread(fd, length - 4, pos + CRC_START)
            if len(body) != length - 4 or _crc32(body) != crc:
                return _ScanResult(pos, offset, size, _BAD_CRC)
        pos = end
        offset = base + count
        want = READ_CHUNK if length < READ_CHUNK // 16 else 4096  # big batches: headers only
    return _ScanResult(pos, offset, size, None)


def find_valid_batch(fd: int, start: int, min_offset: int) -> Optional[int]:
    """Byte position of the first CRC-valid batch after `start` with base >= min_offset.

    Tells a torn tail (nothing valid follows) from corruption in the middle of a log.
    Reads the rest of the segment: only called when something is already wrong.
    """
    size = os.fstat(fd).st_size
    data = os.pread(fd, max(0, size - start), start)
    view = memoryview(data)
    for match in _HEADER_MARK.finditer(data, 9):
        pos = match.start() - 8
        if pos + HEADER_SIZE > len(data):
            break
        length, crc, magic, flags, reserved, base, _pid, count = _unpack_header(data, pos)
        if (base >= min_offset and header_is_valid(magic, flags, reserved, count, length)
                and pos + 4 + length <= len(data)
                and _crc32(view[pos + CRC_START:pos + 4 + length]) == crc):
            return start + pos
    return None


class _SparseIndex:
    """Per segment, the (base offset, byte position) of a batch every INDEX_INTERVAL
    bytes, for cheap seeks. Kept for the INDEXED_SEGMENTS most recently used segments."""

    def __init__(self) -> None:
        self._segments: OrderedDict[int, tuple[array, array]] = OrderedDict()
        self._mutex = threading.Lock()

    def floor(self, segment: int, offset: int) -> tuple[int, int]:
        """(position, base offset) of the last known batch starting at or before `offset`."""
        with self._mutex:
            entries = self._segments.get(segment)
            if entries:
                self._segments.move_to_end(segment)
                i = bisect.bisect_right(entries[0], offset) - 1
                if i >= 0:
                    return entries[1][i], entries[0][i]
        return 0, segment

    def next_due(self, segment: int) -> int:
        """Byte position from which the next entry of `segment` is wanted."""
        entries = self._segments.get(segment)
        return (entries[1][-1] if entries else 0) + INDEX_INTERVAL

    def add(self, segment: int, offset: int, pos: int) -> None:
        """Record a batch start, if far enough after the last entry of its segment."""
        with self._mutex:
            entries = self._segments.get(segment)
            if entries is None:
                if len(self._segments) >= INDEXED_SEGMENTS:
                    self._segments.popitem(last=False)
                entries = self._segments[segment] = (array("q"), array("q"))
            offsets, positions = entries
            if pos - (positions[-1] if positions else 0) >= INDEX_INTERVAL and (
                    not offsets or offset > offsets[-1]):
                offsets.append(offset)
                positions.append(pos)


class PartitionLog:
    """Appends to and describes one partition; creates its readers.

    Thread-safe. Appends are serialized across processes by ``flock`` on the
    partition's ``.lock`` file; within a process by a mutex.
    """

    def __init__(self, directory: str | os.PathLike, topic: str, partition: int, *,
                 segment_bytes: int) -> None:
        self.directory = os.fspath(directory)
        self.topic = topic
        self.partition = partition
        self.lock_path = os.path.join(self.directory, LOCK_FILE_NAME)
        self.index = _SparseIndex()
        self._segment_bytes = segment_bytes
        self._mutex = threading.Lock()
        self._lock_fd = -1
        self._fd = -1  # active segment, O_APPEND
        self._base = 0  # its base offset
        self._size = 0  # bytes of valid batches in it
        self._end = 0  # offset the next append gets
        self._fd_dirty = False  # _fd written since the last sync
        self._unsynced: list[int] = []  # rolled-away segments written since the last sync
        self._dir_dirty = False  # segment files created since the last sync
        self._scan_state: Optional[tuple[int, int, int]] = None  # (segment, pos, offset)
        self._index_due = INDEX_INTERVAL  # size of the active segment at which to index

    def describe(self, file: Optional[str] = None, pos: Optional[int] = None) -> str:
        """'topic 't' partition 3' plus file and byte position: the where of messages."""
        where = f"topic '{self.topic}' partition {self.partition}"
        if file is not None:
            where += f", file {os.path.join(self.directory, file)}"
        if pos is not None:
            where += f", byte {pos}"
        return where

    def segment_path(self, base_offset: int) -> str:
        return os.path.join(self.directory, segment_file_name(base_offset))

    # ------------------------------------------------------------------ offsets

    def start_offset(self) -> int:
        """First offset still stored.

        Retention will keep a log-start-offset checkpoint that can be above the first
        segment's base; until then the first segment's base is the start.
        """
        segments = list_segments(self.directory)
        return segments[0] if segments else 0

    def end_offset(self) -> int:
        """Offset after the last complete, valid batch. Takes no lock, truncates nothing."""
        segments = list_segments(self.directory)
        if not segments:
            return 0
        last = segments[-1]
        state = self._scan_state
        pos, offset = (state[1], state[2]) if state and state[0] == last else (0, last)
        try:
            fd = os.open(self.segment_path(last), os.O_RDONLY)
        except FileNotFoundError:
            return offset
        try:
            result = scan_segment(fd, pos, offset, (self.index, last))
        finally:
            os.close(fd)
        self._scan_state = (last, result.pos, result.offset)
        return result.offset

    def offsets(self) -> PartitionOffsets:
        return PartitionOffsets(self.start_offset(), self.end_offset())

    # ------------------------------------------------------------------ appending

    def append(self, records: Sequence[OutgoingRecord]) -> int:
        """Append records (as one batch, or several if huge); return the first offset."""
        if not records:
            return self.end_offset()
        batches = _encode(records, self._end)
        with self._mutex:
            self._lock_exclusive()
            try:
                self._refresh()
                first = self._end
                for batch, count in batches:
                    batch = rebase_batch(batch, self._end)
                    if self._size and self._size + len(batch) > self._segment_bytes:
                        self._roll()
                    if self._size >= self._index_due:
                        self.index.add(self._base, self._end, self._size)
                        self._index_due = self._size + INDEX_INTERVAL
                    self._write(batch)
                    self._end += count
                return first
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def sync(self) -> None:
        """fsync what this object appended since the last sync."""
        with self._mutex:
            for fd in self._unsynced:
                _fdatasync(fd)
                os.close(fd)
            self._unsynced.clear()
            if self._fd_dirty:
                _fdatasync(self._fd)
                self._fd_dirty = False
            if self._dir_dirty:
                _fsync_dir(self.directory)
                self._dir_dirty = False

    def close(self) -> None:
        with self._mutex:
            for fd in (*self._unsynced, self._fd, self._lock_fd):
                if fd >= 0:
                    os.close(fd)
            self._unsynced.clear()
            self._fd = self._lock_fd = -1
            self._fd_dirty = self._dir_dirty = False

    def reader(self) -> "PartitionReader":
        return PartitionReader(self)

    def _lock_exclusive(self) -> None:
        if self._lock_fd < 0:
            try:
                os.mkdir(self.directory)  # only if a crash lost it; never recreates a topic
            except FileExistsError:
                pass
            except FileNotFoundError:
                raise LogGoneError(f"{self.describe()}: the topic directory is gone") from None
            self._lock_fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)

    def _refresh(self) -> None:
        """Under the lock: catch up with other writers and drop a torn tail.

        Raises LogGoneError if the partition was deleted: its files are unlinked then
        (delete_topic renames the topic away, then removes it).
        """
        if self._fd < 0:
            segments = list_segments(self.directory)
            if segments:
                self._open_active(segments[-1])
            else:
                self._open_active(0, create=True)
        while True:
            st = os.fstat(self._fd)
            if st.st_nlink == 0:
                raise LogGoneError(f"{self.describe()}: the partition was deleted")
            size = st.st_size
            if size < self._size:  # valid batches are never truncated: someone edited the file
                logger.warning("%s: segment shrank from %d to %d bytes; rescanning it",
                               self.describe(segment_file_name(self._base)), self._size, size)
                self._size, self._end = 0, self._base
            if size != self._size:
                result = scan_segment(self._fd, self._size, self._end, (self.index, self._base))
                self._size, self._end = result.pos, result.offset
                if result.problem:
                    self._drop_torn_tail(result)
            # another writer may have rolled to a segment named by our end offset
            if self._end == self._base or not os.path.exists(self.segment_path(self._end)):
                return
            self._open_active(self._end)

    def _open_active(self, base: int, create: bool = False) -> None:
        flags = os.O_RDWR | os.O_APPEND | (os.O_CREAT if create else 0)
        fd = os.open(self.segment_path(base), flags, 0o644)
        if create:
            self._dir_dirty = True
        if self._fd >= 0:
            if self._fd_dirty:
                self._unsynced.append(self._fd)
                if len(self._unsynced) > MAX_UNSYNCED_SEGMENTS:  # nobody calls sync(): bound fds
                    old = self._unsynced.pop(0)
                    _fdatasync(old)
                    os.close(old)
            else:
                os.close(self._fd)
        self._fd, self._base, self._size, self._end = fd, base, 0, base
        self._fd_dirty = False
        self._index_due = INDEX_INTERVAL

    def _drop_torn_tail(self, result: _ScanResult) -> None:
        name = segment_file_name(self._base)
        found = find_valid_batch(self._fd, result.pos, result.offset + 1)
        if found is not None:
            raise CorruptLogError(
                f"{self.describe(name, result.pos)}: {result.problem} at offset {result.offset}, "
                f"followed by valid data at byte {found}; refusing to append")
        logger.warning("%s: dropping a torn write (%s, %d bytes) left by a crashed writer",
                       self.describe(name, result.pos), result.problem, result.size - result.pos)
        os.ftruncate(self._fd, result.pos)
        self._fd_dirty = True

    def _roll(self) -> None:
        self._open_active(self._end, create=True)

    def _write(self, batch: bytes) -> None:
        try:
            written = os.write(self._fd, batch)
            while written < len(batch):  # a regular file only writes short on errors
                written += os.write(self._fd, memoryview(batch)[written:])
        except BaseException:
            # leave no partial batch behind (a later writer would drop it anyway)
            try:
                os.ftruncate(self._fd, self._size)
            except OSError:
                pass
            raise
        self._size += len(batch)
        self._fd_dirty = True


def _encode(records: Sequence[OutgoingRecord], base_offset: int) -> list[tuple[bytes, int]]:
    """Encode records as one batch, or several of at most about MAX_BATCH_BYTES."""
    batch = encode_batch(records, base_offset)
    count = len(records)
    if len(batch) <= MAX_BATCH_BYTES or count == 1:
        return [(batch, count)]
    pieces = -(-len(batch) // MAX_BATCH_BYTES)
    step = -(-count // pieces)
    out = []
    for i in range(0, count, step):
        out.extend(_encode(records[i:i + step], base_offset + i))
    return out


_fdatasync = getattr(os, "fdatasync", os.fsync)


def _file_id(path: str) -> Optional[tuple[int, int]]:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class PartitionReader:
    """Reads one partition from `position` on, across segments; never blocks.

    Not thread-safe: one reader per consumer. Sees appends made by any process after
    it was created.
    """

    def __init__(self, log: PartitionLog) -> None:
        self._log = log
        self._directory = log.directory
        self._fd = -1
        self._segment = -1  # base offset of the open segment
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
        self._directory_id = _file_id(self._directory)  # tells a recreated topic apart
        self.position: int = log.start_offset()
        """Offset of the next record read() returns."""

    def seek(self, offset: int) -> None:
        """Read from `offset` next; clamped to the log start, may be beyond the end."""
        if self._closed:
            raise EmbeddedBrokerError(f"{self._log.describe()}: reader is closed")
        segments = self._segments
        offset = int(offset)
        if not segments or offset < segments[0]:  # the start may have moved: look again
            segments = self._list_segments()
        offset = max(offset, segments[0] if segments else 0)
        if offset == self.position and self._located:
            return
        self.position = offset
        self._pending = []
        self._located = False

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
            else:
                self._pending = []
        elif not self._located and not self._locate(self.position):
            return out
        position = self.position
        while len(out) < max_records:
            records = self._next_records()
            if records is None:
                break
            first = records[0][0]
            if first < position:
                records = records[position - first:]
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
        if out:
            self.position = out[-1][0] + 1
        return out

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
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
        if base != self._segment or self._fd < 0:
            if _file_id(self._directory) != self._directory_id:
                raise UnknownTopicError(f"{self._log.describe()}: the topic was deleted "
                                        f"while this reader was open")
            fd = os.open(self._log.segment_path(base), os.O_RDONLY)
            if self._fd >= 0:
                os.close(self._fd)
            self._fd = fd
            self._segment = base
        self._buf, self._buf_pos, self._cur, self._next, self._eof = b"", 0, 0, base, True

    def _locate(self, offset: int) -> bool:
        """Position the cursor at the batch holding `offset` (or the end if beyond)."""
        segments = self._segments
        if not segments or offset < segments[0] or offset >= segments[-1]:
            segments = self._list_segments()  # segments are only added at the end
            if not segments:
                return False
        if offset < segments[0]:
            offset = self.position = segments[0]
        base = segments[bisect.bisect_right(segments, offset) - 1]
        try:
            self._open_segment(base)
        except FileNotFoundError:  # removed meanwhile (topic deleted); try again next read
            self._segments = []
            return False
        index = self._log.index
        pos, expected = index.floor(base, offset)
        due = index.next_due(base)
        fd = self._fd
        size = os.fstat(fd).st_size
        chunk, chunk_pos, want = b"", pos, 2 * INDEX_INTERVAL  # enough from a nearby entry
        while pos + HEADER_SIZE <= size:  # walk batch headers up to the one holding `offset`
            rel = pos - chunk_pos
            if rel + HEADER_SIZE > len(chunk):
                chunk, chunk_pos, rel = os.pread(fd, want, pos), pos, 0
                if len(chunk) < HEADER_SIZE:
                    break
            length, _crc, magic, flags, reserved, first, _pid, count = _unpack_header(chunk, rel)
            end = pos + 4 + length
            if (first != expected or first + count > offset or end > size
                    or not header_is_valid(magic, flags, reserved, count, length)):
                break
            if pos >= due:
                index.add(base, first, pos)
                due = pos + INDEX_INTERVAL
            pos = end
            expected = first + count
            want = READ_CHUNK if length < READ_CHUNK // 16 else 4096  # big batches: headers only
        if chunk_pos <= pos < chunk_pos + len(chunk):
            self._buf, self._buf_pos, self._cur = chunk, chunk_pos, pos - chunk_pos
            self._eof = chunk_pos + len(chunk) >= size
        else:
            self._buf, self._buf_pos, self._cur, self._eof = b"", pos, 0, False
        self._next = expected
        self._located = True
        return True

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
                length, crc, magic, flags, reserved, base, _pid, count = _unpack_header(buf, cur)
                if (base != self._next or magic != MAGIC or reserved or not count
                        or flags & ~KNOWN_FLAGS or length < min_length(count, flags)):
                    problem = _BAD_HEADER
                else:
                    end = cur + 4 + length
                    if end > len(buf):
                        problem = _INCOMPLETE
                        need = end - cur
                    else:
                        self._cur = end
                        self._next = base + count
                        if base + count <= self.position:
                            continue
                        if _crc32(memoryview(buf)[cur + CRC_START:end]) == crc:
                            return decode_records(buf, cur, base, count, flags)
                        self._cur = cur
                        self._next = base
                        problem = _BAD_CRC
            else:
                problem = _INCOMPLETE
            if problem is _INCOMPLETE and not self._eof:
                self._refill(need)  # a batch across the end of the buffer
                continue
            if tries == 0:  # look at the file again: it may have grown or been repaired
                tries = 1
                self._refill(need)
                continue
            if self._next_segment(problem, need):
                tries = 0
                continue
            if problem is _INCOMPLETE or tries == 2:
                return None  # the tail: a writer is mid-write or left a torn write
            tries = 2
            self._check_tail(problem)

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
        if problem is _INCOMPLETE and len(self._buf) == self._cur:
            # Clean end of the segment: a roll names the new segment by our next offset.
            if self._next == self._segment or not os.path.exists(
                    self._log.segment_path(self._next)):
                return False
            self._refill(READ_CHUNK)  # sealed now: anything appended before the roll?
            if len(self._buf) > self._cur:
                return True
            self._open_segment(self._next)
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
            found = find_valid_batch(self._fd, pos, self._next + 1)
            if found is not None:
                raise CorruptLogError(
                    f"{self._log.describe(segment_file_name(self._segment), pos)}: {problem} "
                    f"in the batch at offset {self._next}, followed by valid data at byte {found}")
        finally:
            os.close(lock_fd)  # releases the lock


