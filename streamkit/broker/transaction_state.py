"""The durable state of one transactional id: its record, written alternately into two
slots of a state file (a torn write only damages the slot being replaced), its epoch
file and owner locks; and the producer-id counter. See docs/embedded-transactions.md."""
from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import struct
import uuid
import zlib
from pathlib import Path
from typing import Iterable, Mapping, Optional

from streamkit.core.records import TopicPartition
from streamkit.broker.errors import EmbeddedBrokerError
from streamkit.broker.group_store import TRASH_PREFIX, encode_name, fsync_dir
from streamkit.broker.segment_files import read_int_file, write_int_file
from streamkit.broker.file_lock import Flock

logger = logging.getLogger("streamkit.broker.transactions")

STATE_FILE = "state"
EPOCH_FILE = "epoch"
LOCK_FILE = ".lock"
PRODUCER_IDS_FILE = ".producer-ids"
EPOCH = struct.Struct("<q")
_fdatasync = getattr(os, "fdatasync", os.fsync)


def tp_list(tps: Iterable[TopicPartition]) -> list[list]:
    return sorted([tp[0], tp[1]] for tp in tps)


def offsets_json(offsets: Mapping[str, Mapping[TopicPartition, int]],
                  metadata: Optional[Mapping[str, Mapping[TopicPartition, str]]] = None) -> dict:
    """{group: [[topic, partition, offset] or [topic, partition, offset, metadata], ...]}."""
    metadata = metadata or {}
    out = {}
    for group, offs in offsets.items():
        notes = metadata.get(group, {})
        out[group] = sorted([tp[0], tp[1], off, notes[tp]] if notes.get(tp) else [tp[0], tp[1], off]
                            for tp, off in offs.items())
    return out


def offsets_from_json(data: Mapping[str, list]) -> tuple[dict[str, dict[TopicPartition, int]],
                                                          dict[str, dict[TopicPartition, str]]]:
    """The offsets and metadata of :func:`offsets_json`'s output."""
    offsets: dict[str, dict[TopicPartition, int]] = {}
    metadata: dict[str, dict[TopicPartition, str]] = {}
    for group, entries in data.items():
        offsets[group] = {}
        for entry in entries:
            tp = TopicPartition(entry[0], int(entry[1]))
            offsets[group][tp] = int(entry[2])
            if len(entry) > 3:
                metadata.setdefault(group, {})[tp] = str(entry[3])
    return offsets, metadata


_SLOT_HEADER = struct.Struct("<IQII")  # magic, version, length, crc32 of the JSON
_SLOT_MAGIC = 0x534B5458
SLOT_SPAN = 1 << 20  # the second slot starts here; a record must fit in a slot


class IdDirectory:
    """The files of one transactional id (see the module docstring)."""

    def __init__(self, root: Path, transactional_id: str) -> None:
        self.transactional_id = transactional_id
        self.path = root / encode_name(transactional_id, "transactional id")
        self.state_path = self.path / STATE_FILE
        self.epoch_path = self.path / EPOCH_FILE
        self._fd = -1

    def owner_lock_path(self, epoch: int) -> Path:
        return self.path / f"owner-{epoch}.lock"

    def lock(self) -> "Flock":
        return Flock(self.path / LOCK_FILE)

    def remove(self) -> None:
        """Under .lock: delete the id's files (it has no owner and nothing pending)."""
        self.close()
        trash = self.path.with_name(f"{TRASH_PREFIX}deleted-{uuid.uuid4().hex}")
        os.rename(self.path, trash)
        shutil.rmtree(trash, ignore_errors=True)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def read(self) -> Optional[dict]:
        """The newest valid record, None if there is none yet."""
        if self._fd < 0:
            try:
                self._fd = os.open(self.state_path, os.O_RDWR)
            except FileNotFoundError:
                return None
        version, payload = max(self._slots(), default=(0, None), key=lambda s: s[0])
        if payload is None:
            return None
        try:
            return json.loads(payload)
        except ValueError as exc:  # a valid CRC over bad JSON: written by something else
            raise EmbeddedBrokerError(f"transactional id '{self.transactional_id}': "
                                      f"unreadable record in {self.state_path}: {exc}") from None

    def write(self, record: dict) -> None:
        """Under .lock: replace the record, durably (pwrite into the older slot, fdatasync)."""
        payload = json.dumps(record, sort_keys=True).encode()
        if len(payload) + _SLOT_HEADER.size > SLOT_SPAN:
            raise EmbeddedBrokerError(f"transactional id '{self.transactional_id}': record of "
                                      f"{len(payload)} bytes is too large")
        created = False
        if self._fd < 0:
            try:
                self._fd = os.open(self.state_path, os.O_RDWR)
            except FileNotFoundError:
                self._fd = os.open(self.state_path, os.O_RDWR | os.O_CREAT, 0o644)
                created = True
        version = max((v for v, _ in self._slots()), default=0) + 1
        header = _SLOT_HEADER.pack(_SLOT_MAGIC, version, len(payload), zlib.crc32(payload))
        data = header + payload
        if os.pwrite(self._fd, data, (version % 2) * SLOT_SPAN) != len(data):
            raise EmbeddedBrokerError(f"{self.state_path}: short write")
        _fdatasync(self._fd)
        if created:
            fsync_dir(self.path)

    def _slots(self) -> list[tuple[int, bytes]]:
        """(version, JSON) of each valid slot."""
        out = []
        for start in (0, SLOT_SPAN):
            head = os.pread(self._fd, _SLOT_HEADER.size, start)
            if len(head) < _SLOT_HEADER.size:
                continue
            magic, version, length, crc = _SLOT_HEADER.unpack(head)
            if magic != _SLOT_MAGIC or length > SLOT_SPAN:
                continue
            payload = os.pread(self._fd, length, start + _SLOT_HEADER.size)
            if len(payload) == length and zlib.crc32(payload) == crc:
                out.append((version, payload))
        return out

    def remove_temp_files(self) -> None:
        """Under .lock: leftovers of interrupted writes (none are made today; kept tidy)."""
        for path in self.path.glob(f"{TRASH_PREFIX}*"):
            try:
                path.unlink()
            except FileNotFoundError:
                pass

    def owner_alive(self, epoch: int) -> bool:
        """Whether a process holds the owner lock of `epoch` (it unlocks when it dies)."""
        try:
            fd = os.open(self.owner_lock_path(epoch), os.O_RDONLY)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False


def read_transaction_record(directory: str | os.PathLike, transactional_id: str
                            ) -> Optional[dict]:
    """The current record of a transactional id in a broker directory (for diagnostics)."""
    ids = IdDirectory(Path(directory) / "transactions", transactional_id)
    try:
        return ids.read()
    finally:
        ids.close()


def next_producer_id(root: Path) -> int:
    """A producer id never handed out before in this broker directory."""
    root.mkdir(parents=True, exist_ok=True)
    with Flock(root / LOCK_FILE):
        path = str(root / PRODUCER_IDS_FILE)
        value = (read_int_file(path) or 0) + 1
        write_int_file(path, value)
    return value
