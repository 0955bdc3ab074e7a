"""``JsonLines``: each input partition's records as JSON-lines files, exactly once."""
from __future__ import annotations

import os
from datetime import timedelta
from typing import Sequence, Union

from .file_archive import ArchivedRow, ArchiveFormat, FileArchiveSink


class JsonLinesFormat(ArchiveFormat):
    """One object per line: ``{"key", "value", "timestamp", "partition", "offset"}``."""

    extension = "jsonl"

    def write(self, path: str, rows: Sequence[ArchivedRow], partition: int) -> None:
        lines = [b'{"key":%s,"value":%s,"timestamp":%d,"partition":%d,"offset":%d}\n'
                 % (key or b"null", value or b"null", ts, partition, offset)
                 for offset, ts, key, value in rows]
        with open(path, "wb") as f:
            f.write(b"".join(lines))
            f.flush()
            os.fsync(f.fileno())


class JsonLines(FileArchiveSink):
    """Archive records to ``<topic>+<partition>+<first>-<last>.jsonl`` files, exactly once
    (same naming, rolling and guarantee as :class:`ParquetArchive`)."""

    def __init__(self, path: str, *, roll_records: int = 100_000,
                 roll_interval: Union[timedelta, float, None] = timedelta(minutes=10),
                 roll_on_close: bool = True) -> None:
        super().__init__(path, JsonLinesFormat(), roll_records=roll_records, roll_interval=roll_interval,
                         roll_on_close=roll_on_close)
