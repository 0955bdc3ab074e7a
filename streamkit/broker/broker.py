"""EmbeddedBroker: streamkit's durable local log in a directory, shared by processes.

Layout::

    <dir>/topics/<topic>/meta.json            {"partitions": N, "config": {...}, "id": ...}
    <dir>/topics/<topic>/<partition>/.lock     flock'ed by appenders
    <dir>/topics/<topic>/<partition>/<base_offset:020d>.log
    <dir>/topics/<topic>/<partition>/...       housekeeping files, see partition_log
    <dir>/groups/...                           see group_store
    <dir>/transactions/...                     see transactions

Every public method may be called from several threads; a PartitionReader belongs
to one consumer.
"""
from __future__ import annotations

import errno
import json
import os
import re
import shutil
import threading
import uuid
import weakref
from pathlib import Path
from typing import Mapping, NamedTuple, Optional, Sequence

from streamkit.core.records import OutgoingRecord, PartitionOffsets, TopicMetadata, TopicPartition, partition_counts
from streamkit.broker.errors import (
    EmbeddedBrokerError, PartitionCountMismatchError, TopicExistsError, UnknownPartitionError,
    UnknownTopicError)
from streamkit.broker.group_members import MemberLock
from streamkit.broker.group_store import (
    TRASH_PREFIX, GroupStore, TaskLock, fsync_dir, validate_offsets, write_json_atomic)
from streamkit.broker.housekeeping import Housekeeper, try_cleaner_lock
from streamkit.broker.partition_log import LogGoneError, PartitionLog
from streamkit.broker.segment_files import LOCK_FILE_NAME, segment_file_name
from streamkit.broker.reader import PartitionReader
from streamkit.broker.retention import drop_segments_below_start
from streamkit.broker.topic_config import TopicConfig, validate_topic_config
from streamkit.broker.transaction_outcomes import TransactionOutcomes
from streamkit.broker.transactions import Transaction, TransactionCoordinator

META_FILE = "meta.json"
DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")


def validate_topic_name(name: object) -> str:
    """Return `name` if it is a valid (Kafka) topic name, else raise ValueError."""
    if not isinstance(name, str) or not _TOPIC_NAME.fullmatch(name) or name in (".", ".."):
        raise ValueError(f"invalid topic name {name!r}: use 1 to 249 characters among "
                         f"a-z A-Z 0-9 . _ - (and not '.' or '..')")
    return name


class _Topic(NamedTuple):
    metadata: TopicMetadata
    topic_id: str  # tells a recreated topic from the one we cached
    logs: dict[int, PartitionLog]
    segment_bytes: int


class EmbeddedBroker:
    """Topics, partition logs and consumer groups stored in one directory."""

    def __init__(self, directory: str | os.PathLike, *,
                 segment_bytes: int = DEFAULT_SEGMENT_BYTES) -> None:
        if not isinstance(segment_bytes, int) or segment_bytes <= 0:
            raise ValueError(f"segment_bytes must be a positive int, got {segment_bytes!r}")
        self.directory = Path(directory)
        self._topics_dir = self.directory / "topics"
        self._topics_dir.mkdir(parents=True, exist_ok=True)
        self._groups = GroupStore(self.directory / "groups")
        self._segment_bytes = segment_bytes
        self._mutex = threading.RLock()
        self._topics: dict[str, _Topic] = {}
        self._logs: dict[tuple[str, int], PartitionLog] = {}  # the append fast path
        self._readers: "weakref.WeakSet[PartitionReader]" = weakref.WeakSet()
        self._task_locks: set[TaskLock] = set()  # strong: a dropped lock is still released
        self._transactions = TransactionCoordinator(TransactionOutcomes(self._log, self._groups),
                                                    self.directory / "transactions")
        self._housekeeper = Housekeeper(self.list_topics, self._log)
        self._closed = False
        self._closing = False

    def __repr__(self) -> str:
        return f"EmbeddedBroker({str(self.directory)!r})"

    def __enter__(self) -> "EmbeddedBroker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ topics

    def create_topic(self, name: str, partitions: int, config: Optional[Mapping[str, str]] = None,
                     *, exist_ok: bool = False) -> TopicMetadata:
        self._check_open()
        validate_topic_name(name)
        if not isinstance(partitions, int) or isinstance(partitions, bool) or partitions < 1:
            raise ValueError(f"topic '{name}': partitions must be an int >= 1, got {partitions!r}")
        try:
            config = validate_topic_config(config)
        except ValueError as exc:
            raise ValueError(f"topic '{name}': {exc}") from None
        existing = self.topic(name)
        if existing is not None:
            return _existing_topic(existing, partitions, exist_ok)
        # Build the whole topic aside, then rename it into place: atomic across processes.
        tmp = self._topics_dir / f"{TRASH_PREFIX}tmp-{uuid.uuid4().hex}"
        tmp.mkdir()
        try:
            for partition in range(partitions):
                directory = tmp / str(partition)
                directory.mkdir()
                for file_name in (LOCK_FILE_NAME, segment_file_name(0)):
                    os.close(os.open(directory / file_name, os.O_WRONLY | os.O_CREAT, 0o644))
            meta = {"partitions": partitions, "config": config, "id": uuid.uuid4().hex}
            write_json_atomic(tmp / META_FILE, meta)
            try:
                os.rename(tmp, self._topics_dir / name)
            except OSError as exc:
                if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
                shutil.rmtree(tmp, ignore_errors=True)
                existing = self.topic(name)  # another process created it first
                if existing is None:
                    raise EmbeddedBrokerError(
                        f"topic '{name}': {self._topics_dir / name} exists without {META_FILE}; "
                        f"remove that directory") from None
                return _existing_topic(existing, partitions, exist_ok)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        fsync_dir(self._topics_dir)
        return TopicMetadata(name, partitions, config)

    def delete_topic(self, name: str) -> None:
        self._check_open()
        validate_topic_name(name)
        path = self._topics_dir / name
        if not path.is_dir():
            raise UnknownTopicError(f"cannot delete topic '{name}': it does not exist")
        trash = self._topics_dir / f"{TRASH_PREFIX}deleted-{uuid.uuid4().hex}"
        try:
            os.rename(path, trash)
        except FileNotFoundError:
            raise UnknownTopicError(f"cannot delete topic '{name}': it does not exist") from None
        with self._mutex:
            self._forget_topic(name)
        shutil.rmtree(trash, ignore_errors=True)
        fsync_dir(self._topics_dir)

    def topic(self, name: str) -> Optional[TopicMetadata]:
        validate_topic_name(name)
        meta = self._read_meta(name)
        return None if meta is None else meta[0]

    def partition_counts(self, topics: Sequence[str]) -> dict[str, Optional[int]]:
        """Each topic's partition count, None for a topic that does not exist."""
        return partition_counts(self.topic, topics)

    def list_topics(self) -> list[TopicMetadata]:
        topics = []
        for name in sorted(os.listdir(self._topics_dir)):
            if name.startswith(TRASH_PREFIX):
                continue
            meta = self._read_meta(name)
            if meta is not None:
                topics.append(meta[0])
        return topics

    def partition_offsets(self, topic: str, partition: int) -> PartitionOffsets:
        return self._log(topic, partition, refresh=True).offsets()

    def delete_records(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Delete every record below ``offsets`` (move the log start), as Kafka's DeleteRecords.

        Idempotent; a start is never moved down (a lower offset changes nothing). The
        start is recorded durably first; segment files wholly below it are unlinked now
        if no cleaner is busy with the partition, else by the next housekeeping pass.
        ValueError for an offset past a partition's end; UnknownTopicError,
        UnknownPartitionError for a partition that does not exist.
        """
        self._check_open()
        for tp, offset in offsets.items():
            if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
                raise ValueError(f"topic '{tp.topic}' partition {tp.partition}: cannot delete records "
                                 f"below {offset!r}: give an offset >= 0")
            log = self._log(tp.topic, tp.partition, refresh=True)
            try:
                log.advance_start(offset)
            except LogGoneError:
                raise UnknownTopicError(f"topic '{tp.topic}' was deleted while deleting records") from None
            with try_cleaner_lock(log) as locked:
                if locked:
                    drop_segments_below_start(log)

    # ------------------------------------------------------------------ records

    def append(self, topic: str, partition: int, records: Sequence[OutgoingRecord]) -> int:
        """Append as one batch (or a few if huge); return the offset of the first record."""
        log = self._logs.get((topic, partition))
        if log is None:
            log = self._log(topic, partition)
        try:
            return log.append(records)
        except LogGoneError:
            pass
        # The topic was deleted (maybe recreated) by another process: look again.
        with self._mutex:
            self._forget_topic(topic)
        try:
            return self._log(topic, partition, refresh=True).append(records)
        except LogGoneError:
            raise UnknownTopicError(f"topic '{topic}' was deleted while appending") from None

    def reader(self, topic: str, partition: int, *, read_committed: bool = True
               ) -> PartitionReader:
        """A reader positioned at the start of the partition (use seek() to move).

        read_committed: return committed transactional records only, and stop at the
        first open transaction; otherwise return every data record. Transaction
        markers are never returned.
        """
        reader = self._log(topic, partition, refresh=True).reader(read_committed=read_committed)
        self._readers.add(reader)
        return reader

    def last_stable_offset(self, topic: str, partition: int) -> int:
        """First offset of the earliest open transaction in the partition, else its end."""
        return self._log(topic, partition, refresh=True).last_stable_offset()

    # ------------------------------------------------------------------ transactions

    def begin_transaction(self, transactional_id: str, timeout_ms: Optional[int] = None) -> Transaction:
        """Open a transaction: appends to any partitions plus group offsets, made visible
        together by commit(), or never.

        The first call for an id in this broker instance takes the id over: it fences
        any other owner (whose commit then raises ProducerFencedError) and resolves the
        transaction a previous owner left pending (rolled forward if it reached its
        commit point, else aborted). One transaction per id is open at a time.

        ``timeout_ms``: a transaction still open that long after it began is aborted at
        its next append or commit, and its producer fenced (ProducerFencedError), as a
        Kafka broker aborts a transaction past ``transaction.timeout.ms``.
        """
        self._check_open()
        return self._transactions.begin(transactional_id, timeout_ms)

    def resolve_abandoned_transactions(self) -> int:
        """Resolve the pending transactions of every transactional id whose owner process
        is dead; returns how many ids were resolved."""
        self._check_open()
        return self._transactions.resolve_abandoned()

    # ------------------------------------------------------------------ housekeeping

    def run_housekeeping(self, now_ms: Optional[int] = None) -> dict[str, dict[str, int]]:
        """One retention and compaction pass over all topics (now_ms: the time to use).

        Returns {topic: {"segments_rolled", "segments_deleted", "records_removed", "segments_compacted"}}.
        """
        self._check_open()
        return self._housekeeper.run(now_ms)

    def start_housekeeping(self, interval: float = 30.0) -> None:
        """Run housekeeping every `interval` seconds in a daemon thread until close()."""
        self._check_open()
        self._housekeeper.start(interval)

    def stop_housekeeping(self) -> None:
        """Stop the background housekeeping thread (and wait for a pass in progress)."""
        self._housekeeper.stop()

    def sync(self) -> None:
        """fsync every partition file this broker appended to since the last sync."""
        with self._mutex:
            logs = list(self._logs.values())
        for log in logs:
            log.sync()

    # ------------------------------------------------------------------ groups

    def list_groups(self) -> list[str]:
        return self._groups.list_groups()

    def committed_offsets(self, group: str) -> dict[TopicPartition, int]:
        return self._groups.committed(group)

    def committed_metadata(self, group: str) -> dict[TopicPartition, str]:
        """The metadata strings committed with the group's offsets."""
        return self._groups.committed_metadata(group)

    def commit_offsets(self, group: str, offsets: Mapping[TopicPartition, int],
                       metadata: Optional[Mapping[TopicPartition, str]] = None) -> None:
        """Merge `offsets` (next offset to read, per partition, with optional metadata
        strings) into the group's, durably."""
        self._check_open()
        self._groups.commit(group, offsets, metadata=metadata)

    def reset_offsets(self, group: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Set the group's offsets of these partitions (others are kept); for the CLI.

        Unlike commit_offsets, checks that every topic and partition exists.
        """
        self._check_open()
        for topic, partition in validate_offsets(offsets):
            metadata = self.topic(topic)
            if metadata is None:
                raise UnknownTopicError(f"cannot reset offsets of group '{group}': "
                                        f"topic '{topic}' does not exist")
            _check_partition(metadata, partition)
        self._groups.commit(group, offsets)

    def delete_group(self, group: str) -> None:
        """Delete the group's offsets and locks. UnknownGroupError if it does not exist,
        GroupNotEmptyError while a live process owns one of its tasks."""
        self._check_open()
        self._groups.delete(group)

    def try_lock_task(self, group: str, task_id: str, endpoint: Optional[str] = None) -> Optional[TaskLock]:
        """Non-blocking exclusive ownership of a task, released by release() or death;
        ``endpoint``: the holder's HTTP address (see task_owner)."""
        self._check_open()
        lock = self._groups.try_lock_task(group, task_id, endpoint)
        if lock is not None:
            with self._mutex:
                self._task_locks.add(lock)
            lock.on_release = self._task_locks.discard
        return lock

    def join_group(self, group: str) -> MemberLock:
        """Become a live member of ``group`` until ``leave()`` or this process ends."""
        self._check_open()
        return self._groups.join(group)

    def group_members(self, group: str) -> list[str]:
        """The ids of ``group``'s live members (workers), sorted."""
        return self._groups.live_members(group)

    def group_member_data(self, group: str) -> dict[str, bytes]:
        """What each live member of ``group`` published with ``MemberLock.publish``, by member id."""
        return self._groups.live_member_data(group)

    def task_owner(self, group: str, task_id: str) -> Optional[dict]:
        """{"pid", "host", "acquired_at"} of the live holder of the task, None if free."""
        return self._groups.task_owner(group, task_id)

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Close files, readers and release the task locks taken through this broker."""
        with self._mutex:
            if self._closed or self._closing:
                return
            self._closing = True
        # outside the mutex: the housekeeping thread and transactions need _log()
        self._housekeeper.stop()
        self._transactions.close()
        with self._mutex:
            self._closed = True
            for reader in list(self._readers):
                reader.close()
            for lock in list(self._task_locks):
                lock.release()
            for name in list(self._topics):
                self._forget_topic(name)

    # ------------------------------------------------------------------ internals

    def _check_open(self) -> None:
        if self._closed:
            raise EmbeddedBrokerError(f"{self!r} is closed")

    def _read_meta(self, name: str) -> Optional[tuple[TopicMetadata, str]]:
        try:
            with open(self._topics_dir / name / META_FILE, "rb") as f:
                meta = json.loads(f.read())
        except (FileNotFoundError, NotADirectoryError):
            return None
        except ValueError as exc:
            path = self._topics_dir / name / META_FILE
            raise EmbeddedBrokerError(f"topic '{name}': unreadable {path}: {exc}") from None
        metadata = TopicMetadata(name, int(meta["partitions"]), dict(meta.get("config", {})))
        return metadata, str(meta.get("id", ""))

    def _log(self, topic: str, partition: int, *, refresh: bool = False) -> PartitionLog:
        self._check_open()
        with self._mutex:
            state = self._topics.get(topic)
            # A partition past the cached count is looked up again: partitions may have been added.
            if state is None or refresh or not _has_partition(state.metadata, partition):
                meta = self._read_meta(validate_topic_name(topic))
                if meta is None:
                    self._forget_topic(topic)
                    raise UnknownTopicError(f"topic '{topic}' does not exist")
                if state is None or state.topic_id != meta[1]:
                    self._forget_topic(topic)
                    segment_bytes = TopicConfig.parse(meta[0].config, topic).segment_bytes
                    state = _Topic(meta[0], meta[1], {}, segment_bytes or self._segment_bytes)
                    self._topics[topic] = state
                elif meta[0].partitions > state.metadata.partitions:
                    state = state._replace(metadata=meta[0])
                    self._topics[topic] = state
            _check_partition(state.metadata, partition)
            log = state.logs.get(partition)
            if log is None:
                log = PartitionLog(self._topics_dir / topic / str(partition), topic, partition,
                                   segment_bytes=state.segment_bytes)
                log.verify_segments()  # refuse a log with gaps before anyone reads or appends
                state.logs[partition] = log
                self._logs[(topic, partition)] = log
            return log

    def _forget_topic(self, topic: str) -> None:
        """Drop cached state of a topic (deleted or recreated elsewhere); under _mutex."""
        state = self._topics.pop(topic, None)
        if state is None:
            return
        for partition, log in state.logs.items():
            self._logs.pop((topic, partition), None)
            try:
                log.sync()
            except OSError:
                pass
            log.close()


def _has_partition(metadata: TopicMetadata, partition: object) -> bool:
    return isinstance(partition, int) and not isinstance(partition, bool) and 0 <= partition < metadata.partitions


def _check_partition(metadata: TopicMetadata, partition: object) -> None:
    if not _has_partition(metadata, partition):
        raise UnknownPartitionError(
            f"topic '{metadata.name}' has {metadata.partitions} partition(s) "
            f"(0 to {metadata.partitions - 1}); partition {partition!r} does not exist")


def _existing_topic(existing: TopicMetadata, partitions: int, exist_ok: bool) -> TopicMetadata:
    if not exist_ok:
        raise TopicExistsError(f"topic '{existing.name}' already exists "
                               f"(with {existing.partitions} partitions)")
    if existing.partitions != partitions:
        raise PartitionCountMismatchError(
            f"topic '{existing.name}' already exists with {existing.partitions} partitions, "
            f"not {partitions}")
    return existing
