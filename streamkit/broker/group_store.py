"""Consumer groups of the embedded broker: committed offsets and task ownership locks.

Layout under ``<dir>/groups/<group>/`` (the group name percent-encoded)::

    .lock              flock'ed while offsets.json is rewritten
    offsets.json       {"offsets": {"<topic>": {"<partition>": next_offset}},
                        "transactions": [["<transactional id>", last applied txn id],
                                         ...]}   (oldest first, at most 256)
    tasks/<task>.lock  flock'ed by the process that owns the task
    tasks/<task>.owner {"pid", "host", "acquired_at", "proc_start"} of that process

Task ownership is an ``flock``, so the kernel releases it when the owner dies, even
by kill -9. The owner file only tells who holds it.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Mapping, Optional
from urllib.parse import quote, unquote

from streamkit.core.records import TopicPartition
from streamkit.errors import StorageError
from streamkit.broker.group_members import MemberLock, join as join_group_dir, live_members, member_data
from streamkit.broker.errors import GroupNotEmptyError, UnknownGroupError

OFFSETS_FILE = "offsets.json"
LOCK_FILE = ".lock"
TASKS_DIR = "tasks"
TRASH_PREFIX = "+"  # never produced by quote(): names of temp and deleted dirs
MAX_APPLIED_TRANSACTIONS = 256  # per group: (transactional id, sequence) entries kept


def encode_name(name: str, what: str) -> str:
    """A group name or task id as a file name (reversible, no '/', no leading '.')."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"{what} must be a non-empty string, got {name!r}")
    encoded = quote(name, safe="")
    if encoded.startswith("."):
        encoded = "%2E" + encoded[1:]
    if len(encoded.encode()) > 200:
        raise ValueError(f"{what} {name!r} is too long (at most about 200 characters)")
    return encoded


def write_json_atomic(path: Path, data: object, *, durable: bool = True) -> None:
    """Replace `path` with `data` as JSON: temp file, fsync, rename, fsync directory."""
    tmp = path.with_name(f"{TRASH_PREFIX}{path.name}.{uuid.uuid4().hex}.tmp")
    payload = json.dumps(data, sort_keys=True, indent=1).encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        written = 0
        while written < len(payload):  # a short write (disk full) is retried, to get its error
            written += os.write(fd, memoryview(payload)[written:])
        if durable:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    os.close(fd)
    os.replace(tmp, path)
    if durable:
        fsync_dir(path.parent)


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


def _process_start(pid: int) -> Optional[int]:
    """Start time of a process in clock ticks since boot (Linux), None if unknown.

    Together with the pid it identifies a process even after its pid is reused.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] in (b"Z", b"X"):  # zombie: dead, not yet reaped
        return None
    return int(fields[19])


def _process_alive(pid: int, proc_start: Optional[int]) -> bool:
    if os.path.isdir("/proc/self"):
        started = _process_start(pid)
        return started is not None and (proc_start is None or started == proc_start)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


class TaskLock:
    """Exclusive ownership of a task by this process, until release() or death."""

    def __init__(self, group: str, task_id: str, fd: int, owner_path: Path) -> None:
        self.group = group
        self.task_id = task_id
        self._fd = fd
        self._owner_path = owner_path
        self._mutex = threading.Lock()
        self.on_release: Optional[Callable[["TaskLock"], None]] = None

    @property
    def held(self) -> bool:
        return self._fd >= 0

    def release(self) -> None:
        """Give the task up (idempotent)."""
        with self._mutex:
            if self._fd < 0:
                return
            try:
                os.unlink(self._owner_path)
            except FileNotFoundError:
                pass
            os.close(self._fd)  # releases the flock
            self._fd = -1
        if self.on_release is not None:
            self.on_release(self)

    def __enter__(self) -> "TaskLock":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "held" if self.held else "released"
        return f"TaskLock(group={self.group!r}, task_id={self.task_id!r}, {state})"


class GroupStore:
    """Committed offsets and task locks of the consumer groups under one directory."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self._root = Path(directory)
        self._root.mkdir(parents=True, exist_ok=True)

    def _group_dir(self, group: str) -> Path:
        return self._root / encode_name(group, "group name")

    # ------------------------------------------------------------------ offsets

    def list_groups(self) -> list[str]:
        return sorted(unquote(name) for name in os.listdir(self._root)
                      if not name.startswith(TRASH_PREFIX) and (self._root / name).is_dir())

    def committed(self, group: str) -> dict[TopicPartition, int]:
        return _read_offsets(self._group_dir(group) / OFFSETS_FILE)

    def offsets_path(self, group: str) -> Path:
        return self._group_dir(group) / OFFSETS_FILE

    def committed_metadata(self, group: str) -> dict[TopicPartition, str]:
        """The metadata strings committed with the group's offsets (absent where none)."""
        data = _read_json(self._group_dir(group) / OFFSETS_FILE)
        return {TopicPartition(topic, int(partition)): text
                for topic, partitions in data.get("metadata", {}).items()
                for partition, text in partitions.items()}

    def commit(self, group: str, offsets: Mapping[TopicPartition, int], *,
               txn: Optional[tuple[str, int]] = None, durable: bool = True,
               metadata: Optional[Mapping[TopicPartition, str]] = None) -> bool:
        """Merge `offsets` into the group's committed offsets, atomically (and durably).
        Each committed partition's metadata becomes its entry in `metadata` (none if absent),
        as a Kafka offset commit replaces it.

        With `txn` = (transactional id, transaction id) the merge happens once: it is
        skipped if that transaction (or a later one of the same transactional id) was
        applied already, which makes rolling a transaction forward idempotent. Returns
        whether it merged.
        """
        entries = validate_offsets(offsets)
        with self._locked(group, create=True) as directory:
            path = directory / OFFSETS_FILE
            data = _read_json(path)
            applied = {tid: seq for tid, seq in data.get("transactions", [])}
            if txn is not None:
                if applied.get(txn[0], -1) >= txn[1]:
                    return False
                applied.pop(txn[0], None)
                applied[txn[0]] = txn[1]  # most recent last
                while len(applied) > MAX_APPLIED_TRANSACTIONS:
                    del applied[next(iter(applied))]
            merged = _offsets_of(data)
            merged.update(entries)
            nested: dict[str, dict[str, int]] = {}
            for (topic, partition), offset in sorted(merged.items()):
                nested.setdefault(topic, {})[str(partition)] = offset
            out: dict = {"offsets": nested}
            notes = {topic: dict(partitions) for topic, partitions in data.get("metadata", {}).items()}
            for topic, partition in entries:
                text = (metadata or {}).get(TopicPartition(topic, partition))
                if text:
                    notes.setdefault(topic, {})[str(partition)] = text
                else:
                    notes.get(topic, {}).pop(str(partition), None)
            notes = {topic: partitions for topic, partitions in notes.items() if partitions}
            if notes:
                out["metadata"] = notes
            if applied:
                out["transactions"] = [[tid, seq] for tid, seq in applied.items()]
            try:
                write_json_atomic(path, out, durable=durable)
            except OSError as exc:
                committed = ", ".join(f"{tp.topic}-{tp.partition}: {offset}" for tp, offset in sorted(entries.items()))
                raise StorageError(f"group '{group}', file {path} (offsets {committed} not committed)",
                                   "offset commit", exc) from exc
            return True

    def delete(self, group: str) -> None:
        """Delete a group; refused while a live process owns one of its tasks."""
        with self._locked(group, create=False) as directory:
            held: list[int] = []
            try:
                busy = []
                tasks = directory / TASKS_DIR
                names = sorted(os.listdir(tasks)) if tasks.is_dir() else []
                for name in names:
                    if not name.endswith(".lock"):
                        continue
                    fd = os.open(tasks / name, os.O_RDWR)
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        os.close(fd)
                        busy.append(unquote(name[:-5]))
                        continue
                    held.append(fd)
                if busy:
                    raise GroupNotEmptyError(
                        f"group '{group}' still has live members owning tasks {busy}; "
                        f"stop them before deleting the group")
                trash = self._root / f"{TRASH_PREFIX}deleted-{uuid.uuid4().hex}"
                os.rename(directory, trash)
            finally:
                for fd in held:
                    os.close(fd)
        shutil.rmtree(trash, ignore_errors=True)

    @contextmanager
    def _locked(self, group: str, *, create: bool) -> Iterator[Path]:
        """Hold the group's .lock (exclusive) and yield the group directory."""
        directory = self._group_dir(group)
        lock_path = directory / LOCK_FILE
        while True:
            if create:
                directory.mkdir(exist_ok=True)
            try:
                fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            except FileNotFoundError:
                if not create:
                    raise UnknownGroupError(f"group '{group}' does not exist") from None
                continue  # deleted between mkdir and open
            fcntl.flock(fd, fcntl.LOCK_EX)
            if _same_file(fd, lock_path):
                break
            os.close(fd)  # the group was deleted while we waited: start over
            if not create:
                raise UnknownGroupError(f"group '{group}' does not exist")
        try:
            yield directory
        finally:
            os.close(fd)

    # ------------------------------------------------------------------ task locks

    def join(self, group: str) -> MemberLock:
        """Become a live member of ``group`` (see group_members)."""
        return join_group_dir(self._group_dir(group))

    def live_members(self, group: str) -> list[str]:
        """The ids of ``group``'s live members, sorted."""
        return live_members(self._group_dir(group))

    def live_member_data(self, group: str) -> dict[str, bytes]:
        """What each live member of ``group`` published (see MemberLock.publish), by member id."""
        directory = self._group_dir(group)
        return member_data(directory, live_members(directory))

    def try_lock_task(self, group: str, task_id: str, endpoint: Optional[str] = None) -> Optional[TaskLock]:
        """Take the task's lock without blocking; None if another holder has it.
        ``endpoint``: the holder's HTTP address, kept in the owner file for interactive queries.

        A lock belongs to one TaskLock object: a second attempt, even from the same
        process, returns None until it is released.
        """
        tasks = self._group_dir(group) / TASKS_DIR
        name = encode_name(task_id, "task id")
        lock_path = tasks / f"{name}.lock"
        while True:
            tasks.mkdir(parents=True, exist_ok=True)
            try:
                fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            except FileNotFoundError:
                continue  # the group was deleted meanwhile
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return None
            if _same_file(fd, lock_path):
                break
            os.close(fd)
        owner_path = tasks / f"{name}.owner"
        pid = os.getpid()
        owner = {"pid": pid, "host": socket.gethostname(), "acquired_at": time.time(),
                 "proc_start": _process_start(pid), "endpoint": endpoint}
        try:
            write_json_atomic(owner_path, owner, durable=False)
        except BaseException:
            os.close(fd)
            raise
        return TaskLock(group, task_id, fd, owner_path)

    def task_owner(self, group: str, task_id: str) -> Optional[dict]:
        """{"pid", "host", "acquired_at", "endpoint"} of the live holder of a task, None if free.

        Reads the owner file; checks that the process lives (same host) and, only then,
        that the lock is really held, so it never races with try_lock_task on a free task.
        """
        tasks = self._group_dir(group) / TASKS_DIR
        name = encode_name(task_id, "task id")
        try:
            with open(tasks / f"{name}.owner", "rb") as f:
                owner = json.loads(f.read())
        except (FileNotFoundError, ValueError):
            return None
        pid = owner.get("pid")
        if not isinstance(pid, int):
            return None
        if owner.get("host") == socket.gethostname() and not _process_alive(
                pid, owner.get("proc_start")):
            return None
        try:
            fd = os.open(tasks / f"{name}.lock", os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return {"pid": pid, "host": owner.get("host"), "acquired_at": owner.get("acquired_at"),
                    "endpoint": owner.get("endpoint")}
        finally:
            os.close(fd)
        return None  # a stale owner file: nobody holds the lock


def _read_json(path: Path) -> dict:
    try:
        with open(path, "rb") as f:
            return json.loads(f.read())
    except FileNotFoundError:
        return {}


def _read_offsets(path: Path) -> dict[TopicPartition, int]:
    return _offsets_of(_read_json(path))


def _offsets_of(data: dict) -> dict[TopicPartition, int]:
    if not data:
        return {}
    return {TopicPartition(topic, int(partition)): int(offset)
            for topic, partitions in data["offsets"].items()
            for partition, offset in partitions.items()}


def validate_offsets(offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
    """`offsets` as {TopicPartition: int >= 0}; TypeError/ValueError naming a bad entry."""
    out = {}
    for key, offset in offsets.items():
        try:
            topic, partition = key
        except (TypeError, ValueError):
            raise TypeError(f"offset keys must be TopicPartition(topic, partition), got {key!r}") \
                from None
        if not isinstance(topic, str) or not isinstance(partition, int) or partition < 0:
            raise TypeError(f"offset keys must be TopicPartition(topic, partition), got {key!r}")
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise ValueError(f"offset for {topic}[{partition}] must be an int >= 0, got {offset!r}")
        out[TopicPartition(topic, partition)] = offset
    return out
