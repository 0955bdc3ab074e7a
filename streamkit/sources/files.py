"""``Files``: JSON-lines or Parquet files matched by a glob, as one stream partition.

Files are read in sorted path order, rows in file order; a record's offset is its
row's position in that sequence (blank JSON lines do not count). Add files only
with names that sort after the existing ones, or offsets of later rows change.
Each record carries headers ``streamkit.file`` and ``streamkit.row`` naming where
it came from.
"""
from __future__ import annotations

import base64
import glob as globbing
import os
from datetime import datetime
from decimal import Decimal
from typing import Any, Callable, Iterator, List, Optional, Tuple, Union

import orjson

from ..errors import ConfigError, StreamkitError
from ..core.records import RawRecord
from .base import FileSequenceReader, PartitionReader, Source

FieldOrFunction = Union[str, Callable[[Any], Any], None]
FORMATS = ("jsonl", "parquet")


class Files(Source):
    """Rows of files matching ``pattern`` (``**`` recurses), as a stream.

    ``format``: ``"jsonl"`` (one JSON value per line) or ``"parquet"`` (each row as a
    dict; decimals become text, binary base64). ``timestamp``: a field name or a
    function of the value giving epoch ms (int), a datetime or an ISO-8601 string;
    default: the file's modification time.
    ``key``: a field name or a function of the value; default: no key.
    """

    def __init__(self, pattern: str, *, format: str = "jsonl", timestamp: FieldOrFunction = None,
                 key: FieldOrFunction = None) -> None:
        if format not in FORMATS:
            raise ConfigError(f"Files({pattern!r}): format must be one of {', '.join(FORMATS)}, got {format!r}")
        for what, given in (("timestamp", timestamp), ("key", key)):
            if given is not None and not isinstance(given, str) and not callable(given):
                raise ConfigError(f"Files({pattern!r}): {what} must be a field name or a function, got {given!r}")
        self.pattern = os.fspath(pattern)
        self.format = format
        self.timestamp = timestamp
        self.key = key

    def default_name(self) -> str:
        return "files"

    def partitions(self) -> int:
        return 1

    def paths(self) -> List[str]:
        return sorted(path for path in globbing.glob(self.pattern, recursive=True) if os.path.isfile(path))

    def open_partition(self, partition: int) -> PartitionReader:
        return FilesReader(self)

    def describe(self) -> str:
        return f"Files({self.pattern}, format={self.format})"


def _field_getter(spec: FieldOrFunction) -> Optional[Callable[[Any], Any]]:
    if spec is None:
        return None
    if callable(spec):
        return spec
    return lambda value: value.get(spec) if isinstance(value, dict) else None


def _json_default(value: Any) -> Any:
    """Parquet values JSON has no type for: decimals as exact text, binary as base64."""
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    raise TypeError(f"Type is not JSON serializable: {type(value).__name__}")


Row = Tuple[str, int, bytes, Any]
"""(file path, row in the file, the row as JSON bytes, the row decoded or None)."""


def timestamp_millis(value: Any, where: str) -> int:
    """Epoch ms from an int/float (ms), a datetime or an ISO-8601 string."""
    if isinstance(value, bool):
        raise ValueError(f"{where}: timestamp {value!r} is not a time")
    if isinstance(value, (int, float)):
        return int(value)
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError(f"{where}: timestamp {value!r} has no timezone")
        return int(value.timestamp() * 1000)
    raise ValueError(f"{where}: timestamp {value!r} is not epoch ms, a datetime or an ISO-8601 string")


class FilesReader(FileSequenceReader):
    """Walks the files in order; counts rows of skipped files to seek."""

    def __init__(self, source: Files) -> None:
        self.source = source
        self._timestamp = _field_getter(source.timestamp)
        self._key = _field_getter(source.key)
        self._paths = source.paths()
        super().__init__(len(self._paths))
        self._mtimes: dict = {}
        self._offset = 0  # offset of the next row

    @property
    def position(self) -> int:
        return self._offset

    def seek(self, offset: int) -> None:
        self._offset = 0
        index = 0
        while index < len(self._paths):
            count = self._row_count(self._paths[index])
            if self._offset + count > offset:
                break
            self._offset += count
            index += 1
        self._restart_at(index)
        while self._offset < offset and self._next() is not None:
            self._offset += 1

    def _row_count(self, path: str) -> int:
        if self.source.format == "parquet":
            import pyarrow.parquet as pq
            return pq.ParquetFile(path).metadata.num_rows
        with open(path, "rb") as f:
            return sum(1 for line in f if line.strip())

    def _open_file(self, index: int) -> Iterator[Row]:
        path = self._paths[index]
        if self.source.format == "parquet":
            import pyarrow.parquet as pq
            row = 0
            for batch in pq.ParquetFile(path).iter_batches(batch_size=4096):
                for value in batch.to_pylist():
                    try:
                        data = orjson.dumps(value, default=_json_default, option=orjson.OPT_NON_STR_KEYS)
                    except TypeError as exc:
                        raise StreamkitError(f"{self.source.describe()}: {path} row {row}: the row cannot be "
                                             f"read as JSON: {exc}") from None
                    yield path, row, data, value
                    row += 1
            return
        with open(path, "rb") as f:
            row = 0
            for line in f:
                line = line.strip()
                if not line:
                    continue
                yield path, row, line, None
                row += 1

    def read(self, max_records: int) -> List[RawRecord]:
        records: List[RawRecord] = []
        while len(records) < max_records:
            item = self._next()
            if item is None:
                break
            records.append(self._record(*item))
            self._offset += 1
        return records

    def _record(self, path: str, row: int, data: bytes, value: Any) -> RawRecord:
        headers = (("streamkit.file", path.encode()), ("streamkit.row", str(row).encode()))
        if value is None and (self._key is not None or self._timestamp is not None):
            try:
                value = orjson.loads(data)
            except orjson.JSONDecodeError:
                # Passed on as is: the source's JSON deserializer reports it (and the
                # error handler decides), with these headers naming the file and row.
                return (self._offset, 0, None, data, headers)
        try:
            key = None if self._key is None else self._key(value)
            key_bytes = None if key is None else orjson.dumps(key, default=_json_default,
                                                              option=orjson.OPT_NON_STR_KEYS)
            if self._timestamp is not None:
                timestamp = timestamp_millis(self._timestamp(value), "timestamp")
            else:
                timestamp = self._mtimes.get(path)
                if timestamp is None:
                    timestamp = self._mtimes[path] = int(os.stat(path).st_mtime * 1000)
        except Exception as exc:
            raise StreamkitError(f"{self.source.describe()}: {path} row {row} (offset {self._offset}): "
                                 f"{type(exc).__name__}: {exc}") from exc
        return (self._offset, timestamp, key_bytes, data, headers)
