"""RocksDB byte store through rocksdict: one instance per (store, task).

Data lives in the default column family; the changelog offset the data reflects
lives in a ``streamkit`` column family and is written in the same WriteBatch as
the data, so after any crash the two agree.
"""
from __future__ import annotations

import logging
import os
import shutil
import struct
import time
from typing import Iterator, Mapping, Optional, Tuple

from rocksdict import Options, Rdict, WriteBatch, WriteOptions

from ..errors import StorageError, errno_in_text
from .bytes_store import BytesStore

log = logging.getLogger(__name__)

_META_CF = "streamkit"
_OFFSET_KEY = b"changelog-offset"
_OFFSET = struct.Struct(">q")
_INPUT_KEY = b"input-positions"
_WITHOUT_WAL = WriteOptions()
_WITHOUT_WAL.disable_wal = True


def _options() -> Options:
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    options.create_missing_column_families(True)
    # As Kafka Streams sizes its per-task stores: writes arrive in batches at commit
    # and reads are mostly served by the write buffer's cache above.
    options.set_write_buffer_size(16 * 1024 * 1024)
    options.set_max_write_buffer_number(3)
    return options


class RocksDBBytesStore(BytesStore):
    """A RocksDB instance at ``path``, written only in batches (at commit).

    Batches go through RocksDB's write-ahead log without an fsync: a killed process
    loses nothing RocksDB acknowledged (the OS has it); a power loss may lose the
    last batches, but data and checkpoint go together, so restore replays the
    changelog from wherever RocksDB ended up.

    Restore writes without the write-ahead log (:meth:`apply_restored`), as Kafka Streams
    restores in bulk: what it replays becomes durable when :meth:`settle_restored` flushes
    the memtables to files, and only then is its checkpoint written (through the log). A
    crash in between leaves the last settled checkpoint, with any data written since on top
    (records of the changelog after it, which the next restore replays again in order)."""

    def __init__(self, path: str) -> None:
        self.path = path
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        self._db = Rdict(path, _options(), column_families={_META_CF: Options(raw_mode=True)})
        self._meta = self._db.get_column_family_handle(_META_CF)
        self._meta_cf = self._db.get_column_family(_META_CF)
        self._restored_to: Optional[int] = None
        """Changelog offset replayed without the write-ahead log and not settled yet."""

    @classmethod
    def open_or_rebuild(cls, path: str) -> Tuple["RocksDBBytesStore", Optional[str]]:
        """Open ``path``; if RocksDB finds it corrupt, move it aside and start empty.

        Returns the store and, if it was rebuilt, what was found (for the log).
        """
        try:
            return cls(path), None
        except Exception as exc:  # rocksdict raises plain Exception on corruption
            aside = f"{path}.corrupt-{int(time.time())}"
            shutil.move(path, aside)
            log.warning("state store %s could not be opened (%s); moved it to %s and rebuilding it "
                        "from its changelog", path, exc, aside)
            return cls(path), f"{exc} (moved to {aside})"

    def get(self, key: bytes) -> Optional[bytes]:
        return self._db.get(key)

    def range(self, start: Optional[bytes], end: Optional[bytes]) -> Iterator[Tuple[bytes, bytes]]:
        it = self._db.iter()
        if start is None:
            it.seek_to_first()
        else:
            it.seek(start)
        while it.valid():
            key = it.key()
            if end is not None and key > end:
                return
            yield key, it.value()
            it.next()

    def apply(self, entries: Mapping[bytes, Optional[bytes]], changelog_offset: Optional[int],
              input_positions: Optional[bytes] = None) -> None:
        batch = WriteBatch(raw_mode=True)
        for key, value in entries.items():
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        if changelog_offset is not None:
            batch.put(_OFFSET_KEY, _OFFSET.pack(changelog_offset), self._meta)
        if input_positions is not None:
            batch.put(_INPUT_KEY, input_positions, self._meta)
        try:
            self._db.write(batch)
        except Exception as exc:  # rocksdict raises plain Exception
            raise self._storage_error(f"write of {len(entries)} key(s)", exc) from exc

    def apply_restored(self, entries: Mapping[bytes, Optional[bytes]], changelog_offset: int) -> None:
        """Write replayed ``entries`` without the write-ahead log and without the checkpoint
        (see the class docstring); :meth:`settle_restored` makes them durable."""
        batch = WriteBatch(raw_mode=True)
        put, delete = batch.put, batch.delete
        for key, value in entries.items():
            if value is None:
                delete(key)
            else:
                put(key, value)
        try:
            self._db.write(batch, _WITHOUT_WAL)
        except Exception as exc:  # rocksdict raises plain Exception
            raise self._storage_error(f"write of {len(entries)} restored key(s)", exc) from exc
        self._restored_to = changelog_offset

    def settle_restored(self) -> None:
        """Flush what restore wrote to files, then checkpoint the offset it reached."""
        if self._restored_to is None:
            return
        try:
            self._db.flush(True)  # only the data's column family: the checkpoint's goes through the log
        except Exception as exc:
            raise self._storage_error("flush of restored data", exc) from exc
        offset, self._restored_to = self._restored_to, None
        self.apply({}, offset)

    def input_positions(self) -> Optional[bytes]:
        return self._meta_cf.get(_INPUT_KEY)

    def delete_range(self, start: bytes, end: bytes) -> None:
        if start < end:  # RocksDB rejects an inverted range
            try:
                self._db.delete_range(start, end)
            except Exception as exc:
                raise self._storage_error("range delete", exc) from exc

    def changelog_offset(self) -> Optional[int]:
        raw = self._meta_cf.get(_OFFSET_KEY)
        if raw is None:
            return None
        if len(raw) != _OFFSET.size:
            log.warning("state store %s: its changelog checkpoint is malformed (%r); restoring from the start",
                        self.path, raw)
            return None
        return _OFFSET.unpack(raw)[0]

    def approximate_len(self) -> int:
        return self._db.property_int_value("rocksdb.estimate-num-keys") or 0

    def reset(self) -> None:
        self._restored_to = None
        self.close()
        Rdict.destroy(self.path)
        self.__init__(self.path)  # type: ignore[misc]

    def _storage_error(self, stage: str, exc: Exception) -> Exception:
        """A StorageError naming this store for an OS-level failure (RocksDB's "IO error: ...",
        an OSError); `exc` itself for anything else."""
        if isinstance(exc, OSError) or str(exc).startswith("IO error") or errno_in_text(str(exc)) is not None:
            return StorageError(f"RocksDB store {self.path}", stage, exc)
        return exc

    def close(self) -> None:
        del self._meta_cf
        del self._meta
        try:
            self._db.close()
        except Exception as exc:
            # After a failed write RocksDB repeats that error here; what it acknowledged is in its
            # log with the checkpoint, and restore replays the changelog from there.
            log.warning("state store %s: closing it failed: %s", self.path, exc)
