"""One partition of the embedded log: segment files, appends and recovery of torn writes.

A partition is a directory of segment files named by the offset of their first
record (``<base_offset:020d>.log``), each a sequence of record batches
(see ``batch_format``), plus:

    .lock              flock'ed (exclusive) by appenders, and by the cleaner for a rename
    .cleaner.lock      flock'ed (non-blocking) by the process running housekeeping on it
    log-start-offset   the first offset still readable, moved up by retention and
                       delete_records (also into the middle of a segment)
    cleaner-checkpoint.json  where the last compaction stopped (no open transaction
                       below that offset) and when tombstones it kept fall due

Appends from any process take an exclusive ``flock`` on ``.lock``; readers take no
lock. Only the last segment grows; housekeeping deletes or replaces (rename over)
older segments, never the last one, so a reader with an old file open keeps reading
consistent data.

Crash safety of appends rests on three facts: a batch is written with one
``os.write`` under the lock, so only the last batch of the last segment can be torn
(by a writer killed mid-write); the next writer truncates such a torn tail before it
appends; and readers never return a batch that is incomplete or fails its CRC.

A torn tail is a batch cut short (the file ends inside it) or bytes that are no
batch header, with no valid batch after them. Everything else that is wrong is
damage to committed data (``CorruptLogError``), never truncated nor skipped: a
complete batch (all its ``length`` bytes present) whose CRC fails, even as the last
batch of the log (a killed writer leaves a short file, not wrong bytes), and invalid
data followed by a valid batch. Readers deliver the records before the damage, then
raise. Opening a partition checks that its segment files form one contiguous log
(``verify_segments``, ``SegmentGapError``): a missing, misnamed or stray segment
file would otherwise make readers stop at the gap or writers append around it.
"""
from __future__ import annotations

import fcntl
import logging
import os
import threading
from contextlib import contextmanager
from typing import Callable, Iterator, Optional, Protocol, Sequence

from streamkit.core.records import OutgoingRecord, PartitionOffsets
from streamkit.errors import StorageError
from streamkit.broker.batch_format import (
    FLAG_TRANSACTIONAL, HEADER, PEEK_SIZE, batch_span, encode_batch, encode_marker, rebase_batch)
from streamkit.broker.batch_walker import TxnTracker
from streamkit.broker.errors import CorruptLogError, EmbeddedBrokerError
from streamkit.broker.reader import PartitionReader
from streamkit.broker.segment_check import verify_segments
from streamkit.broker.segment_files import (
    BAD_CRC, CLEANER_CHECKPOINT_FILE, INDEX_INTERVAL, LOCK_FILE_NAME, START_OFFSET_FILE, find_valid_batch,
    fsync_dir, list_segments, read_cleaner_checkpoint, read_int_file, segment_file_name, write_int_file)
from streamkit.broker.segment_scan import ScanResult, SparseIndex, scan_segment

logger = logging.getLogger(__name__)

MAX_BATCH_BYTES = 4 << 20  # larger appends are split into several batches
MAX_UNSYNCED_SEGMENTS = 4  # rolled-away segments kept open until sync()

_unpack_header = HEADER.unpack_from


class LogGoneError(EmbeddedBrokerError):
    """The partition directory was deleted (or replaced) under an open log."""


Guard = Callable[[], None]
"""Called under the append lock before a write; raises to refuse it (fencing)."""


class LogOpener(Protocol):
    """Opens partition ``partition`` of ``topic`` (re-reading its state from disk when
    ``refresh``); the broker's way of handing its logs to housekeeping and transactions."""

    def __call__(self, topic: str, partition: int, *, refresh: bool = False) -> "PartitionLog":
        ...


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
        self.index = SparseIndex()
        self._segment_bytes = segment_bytes
        self._mutex = threading.Lock()
        self._lock_fd = -1
        self._fd = -1  # active segment, O_APPEND
        self._ino = 0  # its inode
        self._base = 0  # its base offset
        self._size = 0  # bytes of valid batches in it
        self._end = 0  # offset the next append gets
        self._fd_dirty = False  # _fd written since the last sync
        self._unsynced: list[int] = []  # rolled-away segments written since the last sync
        self._dir_dirty = False  # segment files created since the last sync
        self._scan_state: Optional[tuple[int, int, int]] = None  # (segment, pos, offset)
        self._index_due = INDEX_INTERVAL  # size of the active segment at which to index
        self._tracker: Optional["TxnTracker"] = None
        self._tracker_mutex = threading.Lock()

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

    def file_path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    @property
    def segment_bytes(self) -> int:
        return self._segment_bytes

    def verify_segments(self) -> None:
        """Check that the segment files form one contiguous log; SegmentGapError if not
        (see :func:`~streamkit.broker.segment_check.verify_segments`)."""
        verify_segments(self)

    def _storage_error(self, stage: str, file: str, exc: OSError) -> StorageError:
        return StorageError(self.describe(file), stage, exc)

    # ------------------------------------------------------------------ offsets

    def start_offset(self) -> int:
        """First offset still readable: the first segment's base, or the log-start-offset
        retention or delete_records recorded if that is higher (segments wholly below it
        are being deleted; records below it in a segment that stays are not read)."""
        segments = list_segments(self.directory)
        first = segments[0] if segments else 0
        recorded = read_int_file(self.file_path(START_OFFSET_FILE))
        if recorded is not None and recorded > first:
            return recorded
        return first

    def advance_start(self, offset: int) -> int:
        """Move the log start up to ``offset``, durably, never down; return the start.

        Under the append lock, so that two movers (retention, delete_records, in any
        process) never write a lower start over a higher one. ValueError if ``offset``
        is past the end of the log (as Kafka's DeleteRecords: OFFSET_OUT_OF_RANGE).
        """
        with self._mutex:
            self._lock_exclusive()
            try:
                self._refresh()
                if offset > self._end:
                    raise ValueError(f"{self.describe()}: cannot delete records below offset {offset}: "
                                     f"the log ends at {self._end}")
                start = self.start_offset()
                if offset > start:
                    try:
                        write_int_file(self.file_path(START_OFFSET_FILE), offset)
                    except OSError as exc:
                        raise self._storage_error(f"moving the log start to {offset}", START_OFFSET_FILE,
                                                  exc) from exc
                    return offset
                return start
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

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
            result = scan_segment(fd, pos, offset, (self.index, (last, os.fstat(fd).st_ino)))
            pos, offset = result.pos, result.offset
            if result.problem is BAD_CRC:
                # Committed but damaged: its offsets stay in the log (readers stop there
                # with CorruptLogError, appends are refused), so the end does not shrink.
                header = os.pread(fd, PEEK_SIZE, pos)
                length, _crc, _magic, flags, _reserved, _base, _pid, count = _unpack_header(header)
                pos, offset = pos + 4 + length, offset + batch_span(header, 0, flags, count)
        finally:
            os.close(fd)
        self._scan_state = (last, pos, offset)
        return offset

    def offsets(self) -> PartitionOffsets:
        start = self.start_offset()
        return PartitionOffsets(start, max(start, self.end_offset()))

    def last_stable_offset(self) -> int:
        """First offset of the earliest open transaction in this partition, else the end."""
        with self._tracker_mutex:
            if self._tracker is None:
                self._tracker = TxnTracker(self)
            return self._tracker.last_stable_offset()

    def cleaned_offset(self) -> int:
        """End of the range the last compaction cleaned: no open transaction below it."""
        return int(read_cleaner_checkpoint(self.file_path(CLEANER_CHECKPOINT_FILE))
                   .get("offset", 0))

    # ------------------------------------------------------------------ appending

    def append(self, records: Sequence[OutgoingRecord], *, producer_id: int = -1,
               transactional: bool = False, guard: Optional[Guard] = None) -> int:
        """Append records (as one batch, or several if huge); return the first offset.

        Transactional batches carry `producer_id`; `guard` runs under the lock first.
        """
        if not records:
            return self.end_offset()
        flags = FLAG_TRANSACTIONAL if transactional else 0
        return self._append(_encode(records, self._end, producer_id, flags), guard)

    def append_marker(self, producer_id: int, commit: bool) -> int:
        """Append a COMMIT or ABORT marker (control batch) of a transaction."""
        return self._append([(encode_marker(producer_id, commit, self._end), 1)], None)

    def _append(self, batches: list[tuple[bytes, int]], guard: Optional[Guard]) -> int:
        with self._mutex:
            self._lock_exclusive()
            try:
                try:
                    self._refresh()
                except OSError as exc:
                    if isinstance(exc, StorageError):
                        raise
                    raise self._storage_error("produce (catching up with the log's end)",
                                              segment_file_name(self._base), exc) from exc
                if guard is not None:
                    guard()
                first = self._end
                for batch, count in batches:
                    batch = rebase_batch(batch, self._end)
                    if self._size and self._size + len(batch) > self._segment_bytes:
                        try:
                            self._roll()
                        except OSError as exc:
                            raise self._storage_error(f"produce (segment roll at offset {self._end}"
                                                      f"{_landed(first, self._end)})",
                                                      segment_file_name(self._end), exc) from exc
                    if self._size >= self._index_due:
                        self.index.add((self._base, self._ino), self._end, self._size)
                        self._index_due = self._size + INDEX_INTERVAL
                    try:
                        self._write(batch)
                    except OSError as exc:
                        raise self._storage_error(
                            f"produce (append of offsets {self._end} to {self._end + count - 1}, {len(batch)} "
                            f"bytes{_landed(first, self._end)})", segment_file_name(self._base), exc) from exc
                    self._end += count
                return first
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def roll_if_unchanged(self, base: int, size: int) -> bool:
        """Seal the active segment and start an empty one at the end, if the active segment
        still starts at ``base`` and holds exactly ``size`` bytes (nothing was appended since
        housekeeping read it). False, rolling nothing, when it is empty or the log moved on."""
        with self._mutex:
            self._lock_exclusive()
            try:
                self._refresh()
                if self._base != base or self._size != size or not size:
                    return False
                try:
                    self._roll()
                except OSError as exc:
                    raise self._storage_error(f"housekeeping (segment roll at offset {self._end})",
                                              segment_file_name(self._end), exc) from exc
                return True
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    @contextmanager
    def append_lock(self) -> Iterator[None]:
        """Hold the append lock (this process and others): the cleaner's final rename."""
        with self._mutex:
            self._lock_exclusive()
            try:
                yield
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def sync(self) -> None:
        """fsync what this object appended since the last sync (StorageError if the OS
        refuses: what was appended may not be durable)."""
        with self._mutex:
            try:
                while self._unsynced:  # one at a time: after an error, the rest stay due
                    _fdatasync(self._unsynced[0])
                    os.close(self._unsynced.pop(0))
                if self._fd_dirty:
                    _fdatasync(self._fd)
                    self._fd_dirty = False
                if self._dir_dirty:
                    fsync_dir(self.directory)
                    self._dir_dirty = False
            except OSError as exc:
                raise self._storage_error(f"fsync up to offset {self._end}", segment_file_name(self._base),
                                          exc) from exc

    def close(self) -> None:
        with self._mutex:
            for fd in (*self._unsynced, self._fd, self._lock_fd):
                if fd >= 0:
                    os.close(fd)
            self._unsynced.clear()
            self._fd = self._lock_fd = -1
            self._fd_dirty = self._dir_dirty = False
        with self._tracker_mutex:
            if self._tracker is not None:
                self._tracker.close()
                self._tracker = None

    def reader(self, *, read_committed: bool = True) -> "PartitionReader":
        return PartitionReader(self, read_committed=read_committed)

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
                result = scan_segment(self._fd, self._size, self._end,
                                      (self.index, (self._base, self._ino)))
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
        self._ino = os.fstat(fd).st_ino
        self._fd_dirty = False
        self._index_due = INDEX_INTERVAL

    def _drop_torn_tail(self, result: ScanResult) -> None:
        name = segment_file_name(self._base)
        if result.problem is BAD_CRC:
            raise CorruptLogError(
                f"{self.describe(name, result.pos)}: CRC mismatch in the complete batch at offset "
                f"{result.offset} ({result.size - result.pos} bytes, the last of the log): committed "
                f"data is damaged, not a torn write; refusing to truncate it or to append after it")
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


def _landed(first: int, end: int) -> str:
    """What part of a failed append is in the log (a huge one is several batches)."""
    return f"; offsets {first} to {end - 1} of the same append are in the log" if end > first else ""


def _encode(records: Sequence[OutgoingRecord], base_offset: int, producer_id: int,
            flags: int) -> list[tuple[bytes, int]]:
    """Encode records as one batch, or several of at most about MAX_BATCH_BYTES."""
    batch = encode_batch(records, base_offset, producer_id=producer_id, flags=flags)
    count = len(records)
    if len(batch) <= MAX_BATCH_BYTES or count == 1:
        return [(batch, count)]
    pieces = -(-len(batch) // MAX_BATCH_BYTES)
    step = -(-count // pieces)
    out = []
    for i in range(0, count, step):
        out.extend(_encode(records[i:i + step], base_offset + i, producer_id, flags))
    return out


_fdatasync = getattr(os, "fdatasync", os.fsync)
