"""``ParquetArchive`` as a source: replay an archive written by ``sk.sinks.ParquetArchive``.

Each archived partition becomes a partition of the stream, and records keep their
archived offsets and timestamps, so a replay on the streaming runtime sees the
same records in the same order as the original run. Only complete (rolled) files
are read; records still in ``_staging`` are not.
"""
from __future__ import annotations

import os
from typing import Iterator, List, Optional, Tuple

from ..errors import ConfigError
from ..serdes import compact_json
from ..sinks.file_archive import ArchiveFile, list_archive
from ..sinks.parquet_archive import META_COLUMNS
from ..core.records import RawRecord
from .base import FileSequenceReader, PartitionReader, Source

ArchivedRecord = Tuple[int, int, Optional[bytes], Optional[bytes]]


class ParquetArchive(Source):
    """The records of ``topic`` in the archive at ``path`` (``topic`` may be omitted
    when the archive holds one topic)."""

    def __init__(self, path: str, *, topic: Optional[str] = None) -> None:
        self.path = path
        self._topic = topic

    def files(self) -> List[ArchiveFile]:
        found = list_archive(self.path, "parquet")
        topics = sorted({f.topic for f in found})
        if self._topic is None:
            if len(topics) > 1:
                raise ConfigError(f"ParquetArchive({self.path}) holds topics {', '.join(topics)}: pass topic=")
            if not topics:
                raise ConfigError(f"ParquetArchive({self.path}): no archive files "
                                  f"(<topic>+<partition>+<first>-<last>.parquet) found. {self._how_to_fill()}")
            return found
        chosen = [f for f in found if f.topic == self._topic]
        if not chosen:
            held = f"it holds topics {', '.join(topics)}" if topics else self._how_to_fill()
            raise ConfigError(f"ParquetArchive({self.path}) has no files of topic '{self._topic}': {held}")
        return chosen

    def _how_to_fill(self) -> str:
        """What to run when the archive is empty or missing."""
        where = "does not exist" if not os.path.isdir(self.path) else "holds no rolled file yet"
        return (f"The directory {where}. An archive is written by a worker of an app whose stream ends in "
                f"sk.sinks.ParquetArchive('{self.path}'), e.g. `streamkit worker apps.archive --until-idle 2` "
                "(files appear when they roll, and when the worker stops; files still in _staging are not read)")

    @property
    def topic(self) -> str:
        return self._topic or self.files()[0].topic

    def default_name(self) -> str:
        return f"archive-{self.topic}"

    def partitions(self) -> int:
        return max(f.partition for f in self.files()) + 1

    def open_partition(self, partition: int) -> PartitionReader:
        return ArchiveReader([f for f in self.files() if f.partition == partition])

    def describe(self) -> str:
        return f"ParquetArchive({self.path}, topic={self.topic})"


def read_archive_file(path: str) -> Iterator[ArchivedRecord]:
    """(offset, timestamp, key JSON, value JSON) of each row of an archive file."""
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(path)
    names = parquet.schema_arrow.names
    value_columns = None if "value" in names else [n for n in names if n not in META_COLUMNS]
    for batch in parquet.iter_batches(batch_size=8192):
        columns = batch.to_pydict()
        keys, offsets, timestamps = columns["key"], columns["offset"], columns["timestamp"]
        if value_columns is None:
            values = [None if v is None else v.encode() for v in columns["value"]]
        else:
            values = [compact_json({name: columns[name][i] for name in value_columns})
                      for i in range(len(offsets))]
        for i, offset in enumerate(offsets):
            key = keys[i]
            yield offset, timestamps[i], None if key is None else key.encode(), values[i]


class ArchiveReader(FileSequenceReader):
    """One archived partition: its files in offset order."""

    def __init__(self, files: List[ArchiveFile]) -> None:
        self._files = sorted(files, key=lambda f: (f.first, f.sequence))
        super().__init__(len(self._files))
        self._position = self._files[0].first if self._files else 0

    @property
    def position(self) -> int:
        return self._position

    def seek(self, offset: int) -> None:
        index = 0
        while index < len(self._files) and self._files[index].last < offset:
            index += 1
        self._restart_at(index)
        self._position = offset
        while True:
            item = self._next()
            if item is None or item[0] >= offset:
                self._put_back(item)
                return

    def _open_file(self, index: int) -> Iterator[ArchivedRecord]:
        return read_archive_file(self._files[index].path)

    def read(self, max_records: int) -> List[RawRecord]:
        records: List[RawRecord] = []
        if max_records <= 0:
            return records
        while True:
            item = self._next()
            if item is None:
                break
            if len(records) >= max_records and item[0] != records[-1][0]:
                self._put_back(item)  # the records of one offset stay in one batch
                break
            offset, timestamp, key, value = item
            records.append((offset, timestamp, key, value, None))
        if records:
            self._position = records[-1][0] + 1
        return records
