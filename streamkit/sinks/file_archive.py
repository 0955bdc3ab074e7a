"""Files named by input partition and offset range, written exactly once without transactions.

Layout of an archive directory::

    <topic>+<partition>+<first-offset>-<last-offset>.<ext>   complete files (rolled; ``+<n>``
                                                              before the extension if taken)
    _staging/<topic>+<partition>.jsonl                        committed, not rolled yet

At each commit a writer appends its new records to the partition's staging file,
ending the block with a marker line holding the task's next input offset, and
fsyncs it before the task commits its offsets. A roll writes the staged records to
temporary files and fsyncs them, rewrites the staging file without those records
(its marker naming the planned files), then renames the temporary files; recovery
finishes an interrupted rename. On start the writer also cuts a torn staging block
and resumes after the last marker (after the last archived offset if the staging
file is gone): records from earlier offsets, produced again by reprocessing, are
skipped. So a record is in exactly one complete file, or staged, whatever moment
the process dies at. Records sent between input records (punctuations, cache
flushes) are filed under the last input offset; a punctuation's records may be
delivered again after a crash (at least once).
Files whose names start with ``_`` or ``.`` are hidden from Spark and pyarrow readers.
"""
from __future__ import annotations

import abc
import logging
import os
import re
import time
from datetime import timedelta
from typing import Dict, List, Optional, Sequence, Tuple, Union

import orjson

from ..errors import ConfigError, SerializationError, SinkError
from ..serdes import compact_json
from ..core.records import TopicPartition
from .base import Positions, Sink, SinkRecord, SinkTask, SinkWriter

log = logging.getLogger(__name__)

STAGING_DIR = "_staging"
ArchivedRow = Tuple[int, int, Optional[bytes], Optional[bytes]]
"""(origin offset, timestamp ms, key as JSON or None, value as JSON or None)."""

_FILE_NAME = re.compile(r"^(?P<topic>[A-Za-z0-9._-]+)\+(?P<partition>\d+)\+(?P<first>\d+)-(?P<last>\d+)"
                        r"(?:\+(?P<sequence>\d+))?\.(?P<ext>\w+)$")


class ArchiveFile:
    """A complete archive file, as its name describes it."""

    __slots__ = ("path", "topic", "partition", "first", "last", "sequence")

    def __init__(self, path: str, topic: str, partition: int, first: int, last: int, sequence: int = 0) -> None:
        self.path, self.topic, self.partition, self.first, self.last = path, topic, partition, first, last
        self.sequence = sequence

    def __repr__(self) -> str:
        return f"ArchiveFile({self.path!r})"


def archive_file_name(topic: str, partition: int, first: int, last: int, extension: str, sequence: int = 0) -> str:
    suffix = f"+{sequence}" if sequence else ""
    return f"{topic}+{partition}+{first}-{last}{suffix}.{extension}"


def list_archive(path: str, extension: str) -> List[ArchiveFile]:
    """The complete files of an archive directory, ordered by topic, partition, first offset."""
    found = []
    try:
        names = os.listdir(path)
    except FileNotFoundError:
        return []
    for name in names:
        match = _FILE_NAME.match(name)
        if match and match["ext"] == extension:
            found.append(ArchiveFile(os.path.join(path, name), match["topic"], int(match["partition"]),
                                     int(match["first"]), int(match["last"]), int(match["sequence"] or 0)))
    found.sort(key=lambda f: (f.topic, f.partition, f.first, f.sequence))
    return found


def fsync_directory(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _staging_lines(rows: Sequence[ArchivedRow]) -> List[bytes]:
    """One ``[offset, timestamp, key, value]`` JSON line per row (key and value are JSON already)."""
    return [b"[%d,%d,%s,%s]\n" % (offset, ts, key or b"null", value or b"null") for offset, ts, key, value in rows]


class ArchiveFormat(abc.ABC):
    """How rolled files are encoded."""

    extension: str = ""

    def check_value(self, value: object, record: SinkRecord) -> None:
        """Raise if ``value`` cannot be archived in this format (before it is buffered)."""

    @abc.abstractmethod
    def write(self, path: str, rows: Sequence[ArchivedRow], partition: int) -> None:
        """Write ``rows`` to ``path`` (a temporary name) and fsync it."""


def _to_seconds(value: Union[timedelta, float, int, None], what: str) -> Optional[float]:
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if seconds <= 0:
        raise ConfigError(f"{what} must be positive, got {value!r}")
    return seconds


class FileArchiveSink(Sink):
    """Base of the file sinks: one directory, files rolled by record count or age."""

    def __init__(self, path: str, fmt: ArchiveFormat, *, roll_records: int = 100_000,
                 roll_interval: Union[timedelta, float, None] = timedelta(minutes=10),
                 roll_on_close: bool = True) -> None:
        if not isinstance(path, (str, os.PathLike)) or not str(path):
            raise ConfigError(f"{type(self).__name__}: path must be a directory path, got {path!r}")
        if not isinstance(roll_records, int) or roll_records < 1:
            raise ConfigError(f"{type(self).__name__}: roll_records must be a positive int, got {roll_records!r}")
        self.path = os.path.abspath(os.fspath(path))
        self.format = fmt
        self.roll_records = roll_records
        self.roll_interval_s = _to_seconds(roll_interval, f"{type(self).__name__}: roll_interval")
        self.roll_on_close = roll_on_close

    def open(self, task: SinkTask) -> SinkWriter:
        return FileArchiveWriter(self, task)

    def exclusive_target(self) -> Optional[str]:
        return self.path  # two writers of one staging file would corrupt it

    def describe(self) -> str:
        return f"{type(self).__name__}({self.path})"


class _Staging:
    """The staging file of one input partition and the rows it holds."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.rows: List[ArchivedRow] = []
        self.size = 0
        """Bytes up to the last complete block (a failed append is cut back to this)."""
        self.since = time.monotonic()
        self.next_offset = 0


class FileArchiveWriter(SinkWriter):
    """One task's writer: a staging file per input partition, rolled into archive files."""

    sink: FileArchiveSink

    def __init__(self, sink: FileArchiveSink, task: SinkTask) -> None:
        super().__init__(sink, task)
        self._encoded: Dict[TopicPartition, List[ArchivedRow]] = {}
        self._staging: Dict[TopicPartition, _Staging] = {}
        self._discarded = False

    # -- start -----------------------------------------------------------------------
    def resume(self) -> Dict[TopicPartition, int]:
        root = self.sink.path
        os.makedirs(os.path.join(root, STAGING_DIR), exist_ok=True)
        if not os.access(root, os.W_OK):
            raise PermissionError(f"directory {root} is not writable")
        archived: Dict[TopicPartition, int] = {}
        for file in list_archive(root, self.sink.format.extension):
            tp = TopicPartition(file.topic, file.partition)
            archived[tp] = max(archived.get(tp, -1), file.last)
        resumed = {}
        for tp in self.task.inputs:
            staging = self._recover(tp, archived.get(tp, -1))
            self._staging[tp] = staging
            if staging.next_offset > 0:
                resumed[tp] = staging.next_offset
        return resumed

    def _recover(self, tp: TopicPartition, archived_last: int) -> _Staging:
        """Load the partition's staging file: committed blocks only, and finish a roll that
        a crash interrupted. Without a staging file, resume after the archived files."""
        staging = _Staging(os.path.join(self.sink.path, STAGING_DIR, f"{tp.topic}+{tp.partition}.jsonl"))
        try:
            with open(staging.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            staging.next_offset = archived_last + 1
            self._remove_orphans(tp, set())
            return staging
        block: List[ArchivedRow] = []
        rolling: List[str] = []
        good = 0
        position = 0
        for line in data.splitlines(keepends=True):
            position += len(line)
            if not line.endswith(b"\n"):
                break  # torn write
            try:
                item = orjson.loads(line)
            except orjson.JSONDecodeError:
                break
            if isinstance(item, dict):  # block marker: the block is committed
                staging.rows.extend(block)
                block = []
                staging.next_offset = max(staging.next_offset, int(item["next"]))
                rolling.extend(item.get("rolling", ()))
                good = position
            else:
                offset, timestamp, key, value = item
                block.append((offset, timestamp, None if key is None else compact_json(key),
                              None if value is None else compact_json(value)))
        self._finish_roll(rolling)
        self._remove_orphans(tp, set(rolling))
        if good < len(data):
            log.info("%s: recovered %s: kept %d staged record(s), cut %d uncommitted byte(s)", self.where(),
                     staging.path, len(staging.rows), len(data) - good)
            self._rewrite_staging(staging)
        else:
            staging.size = good
        return staging

    def _finish_roll(self, names: Sequence[str]) -> None:
        """Rename the files a roll had planned (its staging rewrite already dropped their rows)."""
        root = self.sink.path
        for name in names:
            final, temporary = os.path.join(root, name), os.path.join(root, f".{name}.tmp")
            if os.path.exists(final):
                continue
            if not os.path.exists(temporary):
                raise SinkError(f"{self.where()}: archive file {name} was being rolled but neither it nor its "
                                f"temporary file .{name}.tmp exists: were files removed by hand?")
            os.replace(temporary, final)
            log.info("%s: finished rolling %s after a crash", self.where(), name)
        if names:
            fsync_directory(root)

    def _remove_orphans(self, tp: TopicPartition, keep: set) -> None:
        """Temporary files of a roll that crashed before its staging rewrite: their rows are
        still staged and will be rolled again."""
        prefix = f".{tp.topic}+{tp.partition}+"
        for name in os.listdir(self.sink.path):
            if name.startswith(prefix) and name.endswith(".tmp") and name[1:-4] not in keep:
                os.remove(os.path.join(self.sink.path, name))

    # -- writing ---------------------------------------------------------------------
    def accept(self, record: SinkRecord) -> None:
        tp = TopicPartition(record.topic, record.partition) if record.topic is not None else self.task.inputs[0]
        offset = record.offset
        if offset is None:  # not caused by an input record: file it after the last delivered one
            staging = self._staging.get(tp)
            offset = max((staging.next_offset if staging else 0) - 1, 0)
        try:
            # Right-sized copies: these stay in memory until the file rolls.
            key = None if record.key is None else compact_json(record.key)
            value = None if record.value is None else compact_json(record.value)
        except TypeError as exc:
            raise SerializationError(f"{self.where()}: the record cannot be written as JSON: {exc}") from exc
        self.sink.format.check_value(record.value, record)
        self._encoded.setdefault(tp, []).append((offset, record.timestamp, key, value))

    def discard(self) -> int:
        self._encoded.clear()
        self._discarded = True
        return super().discard()

    def keeps_positions_without_records(self) -> bool:
        return True  # every commit checks the roll interval

    def deliver(self, records: Sequence[SinkRecord], positions: Positions) -> None:
        for tp in list(self._encoded):
            rows = self._encoded[tp]
            staging = self._staging[tp]
            # From the task's positions only: a row sent by a punctuation carries no input
            # offset of its own and must not move the resume point.
            next_offset = max(staging.next_offset, positions.get(tp, staging.next_offset))
            self._append(staging, rows, next_offset)
            staging.rows.extend(rows)
            staging.next_offset = next_offset
            del self._encoded[tp]
        now = time.monotonic()
        interval = self.sink.roll_interval_s
        for tp, staging in self._staging.items():
            if staging.rows and interval is not None and now - staging.since >= interval:
                self._roll(tp, staging, everything=True)
            elif len(staging.rows) >= self.sink.roll_records:
                self._roll(tp, staging, everything=False)  # full files only; the rest stays staged

    def _append(self, staging: _Staging, rows: Sequence[ArchivedRow], next_offset: int) -> None:
        lines = _staging_lines(rows)
        lines.append(b'{"next":%d}\n' % next_offset)
        if not staging.rows:
            staging.since = time.monotonic()
        with open(staging.path, "ab") as f:
            if f.tell() != staging.size:
                f.truncate(staging.size)  # a failed earlier attempt left a partial block
                f.seek(staging.size)
            f.write(b"".join(lines))
            f.flush()
            os.fsync(f.fileno())
            staging.size = f.tell()

    def _roll(self, tp: TopicPartition, staging: _Staging, *, everything: bool) -> None:
        """Write staged rows to files of ``roll_records`` rows (the last one shorter only
        with ``everything``). Order, so that a crash anywhere leaves each row in exactly one
        place: write and fsync temporary files; rewrite the staging file without their rows,
        naming the planned files; rename the temporary files (recovery finishes this step)."""
        rows = staging.rows
        limit = self.sink.roll_records
        fmt = self.sink.format
        planned: List[str] = []
        start = 0
        while start < len(rows) and (everything or len(rows) - start >= limit):
            end = min(start + limit, len(rows))
            while end < len(rows) and rows[end][0] == rows[end - 1][0]:
                end += 1  # the records of one input offset stay in one file
            chunk = rows[start:end]
            name = self._free_name(tp, chunk[0][0], chunk[-1][0], planned)
            fmt.write(os.path.join(self.sink.path, f".{name}.tmp"), chunk, tp.partition)
            planned.append(name)
            start = end
        if not planned:
            return
        staging.rows = rows[start:]
        self._rewrite_staging(staging, rolling=planned)
        self._finish_roll(planned)
        log.debug("%s: rolled %s", self.where(), ", ".join(planned))

    def _free_name(self, tp: TopicPartition, first: int, last: int, planned: Sequence[str]) -> str:
        """``<topic>+<partition>+<first>-<last>.<ext>``, with ``+<n>`` before the extension
        if that name is taken (rows sent between input records share their offset)."""
        ext = self.sink.format.extension
        name = archive_file_name(tp.topic, tp.partition, first, last, ext)
        n = 1
        while name in planned or os.path.exists(os.path.join(self.sink.path, name)):
            name = archive_file_name(tp.topic, tp.partition, first, last, ext, sequence=n)
            n += 1
        return name

    def _rewrite_staging(self, staging: _Staging, rolling: Sequence[str] = ()) -> None:
        """Replace the staging file by its kept rows and marker, atomically."""
        lines = _staging_lines(staging.rows)
        lines.append(orjson.dumps({"next": staging.next_offset, "rolling": list(rolling)}) + b"\n"
                     if rolling else b'{"next":%d}\n' % staging.next_offset)
        temporary = staging.path + ".tmp"
        with open(temporary, "wb") as f:
            f.write(b"".join(lines))
            f.flush()
            os.fsync(f.fileno())
            staging.size = f.tell()
        os.replace(temporary, staging.path)
        fsync_directory(os.path.dirname(staging.path))
        staging.since = time.monotonic()

    def is_transient(self, exc: BaseException) -> bool:
        # Interrupted or temporarily unavailable I/O; a full disk may be freed by retention.
        import errno
        return isinstance(exc, OSError) and exc.errno in (errno.EINTR, errno.EAGAIN, errno.ENOSPC, errno.EIO)

    def close(self) -> None:
        """Roll what is staged (only after a clean commit: nothing pending)."""
        if not self.sink.roll_on_close or self._discarded or self.pending or self._encoded:
            return
        for tp, staging in self._staging.items():
            if staging.rows:
                self.sink.retry.run(lambda: self._roll(tp, staging, everything=True), transient=self.is_transient,
                                    describe=lambda: f"{self.where()}: rolling {staging.path} on close")
