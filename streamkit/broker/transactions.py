"""Transactions of the embedded broker: appends to any partitions plus consumer-group
offsets, made visible together by a commit, or never; fencing of zombie owners of a
transactional id; a transaction open past its timeout is aborted and fenced.

The design (files, the commit point, fencing, recovery of what a dead owner left,
and why each crash point is safe) is in docs/embedded-transactions.md.
"""
from __future__ import annotations

import fcntl
import logging
import os
import socket
import threading
import time
from pathlib import Path
from typing import Mapping, Optional, Sequence
from urllib.parse import unquote

from streamkit.core.records import OutgoingRecord, TopicPartition
from streamkit.errors import StorageError
from streamkit.broker.errors import (
    EmbeddedBrokerError, ProducerFencedError, TransactionStateError, UnknownTopicError)
from streamkit.broker.group_store import TRASH_PREFIX, encode_name, validate_offsets
from streamkit.broker.partition_log import LogGoneError, PartitionLog
from streamkit.broker.file_sync import sync_all
from streamkit.broker.transaction_outcomes import MAX_SEQUENCE, TransactionOutcomes, is_pending, transaction_id
from streamkit.broker.transaction_state import EPOCH, IdDirectory, next_producer_id, offsets_json, tp_list

logger = logging.getLogger(__name__)


def _me() -> dict:
    return {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}


# ---------------------------------------------------------------------------- coordinator

class TransactionCoordinator:
    """The transactional ids of one EmbeddedBroker instance, and recovery of abandoned ones
    (``outcomes`` writes their markers and offsets)."""

    def __init__(self, outcomes: TransactionOutcomes, root: Path) -> None:
        self.outcomes = outcomes
        self._root = root  # created on first use
        self._producers: dict[str, _Producer] = {}
        self._mutex = threading.Lock()

    def begin(self, transactional_id: str, timeout_ms: Optional[int] = None) -> "Transaction":
        with self._mutex:
            producer = self._producers.get(transactional_id)
            if producer is None or producer.fenced or producer.closed:
                if producer is not None:
                    producer.release()
                producer = _Producer.take_over(self, IdDirectory(self._root, transactional_id))
                self._producers[transactional_id] = producer
        try:
            return producer.begin(timeout_ms)
        except ProducerFencedError:
            with self._mutex:
                if self._producers.get(transactional_id) is producer:
                    del self._producers[transactional_id]
                producer.release()
            raise

    def resolve_abandoned(self) -> int:
        """Resolve the pending transactions of every id whose owner is dead; remove the
        files of ids that have no owner and nothing pending."""
        resolved = 0
        try:
            names = sorted(os.listdir(self._root))
        except FileNotFoundError:
            return 0
        for name in names:
            if name.startswith((".", TRASH_PREFIX)) or not (self._root / name).is_dir():
                continue
            ids = IdDirectory(self._root, unquote(name))
            try:
                with ids.lock():
                    record = ids.read()
                    if record is None:
                        continue
                    if is_pending(record):
                        if ids.owner_alive(int(record["epoch"])):
                            continue
                        logger.info("transactional id '%s': owner %s is gone; resolving its "
                                    "transactions", ids.transactional_id, record.get("owner"))
                        self.outcomes.recover(ids, record)
                        resolved += 1
                    if ids.transactional_id in self._producers:
                        continue  # ours (no mutex: begin() takes it before the id's lock)
                    ids.remove()
            finally:
                ids.close()
        return resolved

    def close(self) -> None:
        with self._mutex:
            producers = list(self._producers.values())
            self._producers.clear()
        for producer in producers:
            try:
                producer.close()
            except Exception:  # close must not fail: recovery will finish the job
                logger.exception("transactional id '%s': could not close cleanly",
                                 producer.transactional_id)


class _Producer:
    """This broker instance's ownership of a transactional id, at one epoch."""

    def __init__(self, coordinator: TransactionCoordinator, ids: IdDirectory, record: dict,
                 owner_fd: int, epoch_fd: int) -> None:
        self.coordinator = coordinator
        self.ids = ids
        self.transactional_id = ids.transactional_id
        self.producer_id = int(record["producer_id"])
        self.epoch = int(record["epoch"])
        self.sequence = int(record["sequence"])  # of the last transaction that finished
        self.registered: set[TopicPartition] = set()
        self.fenced = False
        self.closed = False
        self.current: Optional[Transaction] = None
        self._record = record
        self._owner_fd = owner_fd
        self._epoch_fd = epoch_fd
        self._epoch_bytes = EPOCH.pack(self.epoch)
        self._unsynced_logs: set[PartitionLog] = set()  # markers of the last commit
        self._unsynced_files: set[Path] = set()  # offset files of the last commit
        self._needs_recovery = False
        self._mutex = threading.RLock()

    @classmethod
    def take_over(cls, coordinator: TransactionCoordinator, ids: IdDirectory) -> "_Producer":
        """Become the owner of the id: bump its epoch (fencing any other owner) and
        resolve what a previous owner left pending."""
        with ids.lock():
            record = ids.read()
            if record is None:
                record = {"transactional_id": ids.transactional_id,
                          "producer_id": next_producer_id(coordinator._root), "epoch": -1,
                          "sequence": 0, "state": "complete", "active": False}
            epoch = int(record["epoch"]) + 1
            owner_fd = os.open(ids.owner_lock_path(epoch), os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(owner_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                epoch_fd = os.open(ids.epoch_path, os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    os.pwrite(epoch_fd, EPOCH.pack(epoch), 0)  # fences the old owner
                    os.fsync(epoch_fd)
                    ids.remove_temp_files()
                    if is_pending(record):
                        if record.get("active") and ids.owner_alive(int(record["epoch"])):
                            logger.warning("transactional id '%s': fencing its live owner %s",
                                           ids.transactional_id, record.get("owner"))
                        record = coordinator.outcomes.recover(ids, record)
                    record = {**record, "epoch": epoch, "active": True, "owner": _me(),
                              "state": "complete", "partitions": [], "offsets": {},
                              "registered": []}
                    ids.write(record)
                except BaseException:
                    os.close(epoch_fd)
                    raise
            except BaseException:
                os.close(owner_fd)
                ids.close()
                raise
        for stale in ids.path.glob("owner-*.lock"):
            if stale.name != ids.owner_lock_path(epoch).name:
                try:
                    stale.unlink()
                except FileNotFoundError:
                    pass
        logger.debug("transactional id '%s': owner at epoch %d", ids.transactional_id, epoch)
        return cls(coordinator, ids, record, owner_fd, epoch_fd)

    # ------------------------------------------------------------------ fencing

    def check_fence(self) -> None:
        """Raise ProducerFencedError if another owner took the id (cheap: one pread)."""
        if self.closed:
            raise TransactionStateError(f"transactional id '{self.transactional_id}': "
                                        f"its broker was closed")
        if self.fenced or os.pread(self._epoch_fd, 8, 0) != self._epoch_bytes:
            self.fenced = True
            raise ProducerFencedError(
                f"transactional id '{self.transactional_id}': this owner (epoch {self.epoch}) "
                f"was fenced by a newer one; its open transaction is aborted")

    # ------------------------------------------------------------------ transactions

    def begin(self, timeout_ms: Optional[int] = None) -> "Transaction":
        with self._mutex:
            self.check_fence()
            if self.current is not None:
                raise TransactionStateError(
                    f"transactional id '{self.transactional_id}': transaction "
                    f"{self.current.sequence} is still open; commit or abort it first")
            if self._needs_recovery:
                self._recover_own()
            if self.sequence + 1 > MAX_SEQUENCE:
                raise EmbeddedBrokerError(f"transactional id '{self.transactional_id}': "
                                          f"out of transaction numbers")
            self.current = Transaction(self, self.sequence + 1, timeout_ms)
            return self.current

    def register(self, tp: TopicPartition) -> None:
        """Record, durably, that the owner may append to `tp` (before it does)."""
        with self._mutex, self.ids.lock():
            self.check_fence()
            self.registered.add(tp)
            self._write_record(registered=tp_list(self.registered))

    def commit(self, txn: "Transaction") -> None:
        with self._mutex:
            self._finish_check(txn)
            if not txn.touched and not txn.offsets:
                self._done(txn, "committed")
                return
            try:
                self.check_fence()
                sync_all(set(txn.touched.values()) | self._unsynced_logs, self._unsynced_files)
                self._unsynced_logs, self._unsynced_files = set(), set()
                with self.ids.lock():
                    self.check_fence()
                    self._write_record(sequence=txn.sequence, state="committing",
                                       partitions=tp_list(txn.touched),
                                       offsets=offsets_json(txn.offsets, txn.metadata))
            except ProducerFencedError:
                self._done(txn, "fenced")
                raise
            except BaseException as exc:
                if not self._commit_point_reached(txn):
                    self._abort_quietly(txn)
                    if isinstance(exc, OSError):
                        raise self._storage_error(txn, "transaction commit (aborted: nothing of it is "
                                                       "visible)", exc) from exc
                    raise
                logger.exception("transactional id '%s': error after the commit point of "
                                 "transaction %d; completing it", self.transactional_id,
                                 txn.sequence)
            # The commit point is passed: the transaction is committed, whatever follows.
            self.sequence = txn.sequence
            self._done(txn, "committed")
            try:
                self._complete(txn)
            except BaseException as exc:
                self._needs_recovery = True
                if isinstance(exc, OSError):
                    raise self._storage_error(txn, "completing the committed transaction (the next "
                                                   "begin_transaction or recovery finishes it)", exc) from exc
                raise EmbeddedBrokerError(
                    f"transactional id '{self.transactional_id}': transaction {txn.sequence} "
                    f"is committed but completing it failed ({exc!r}); the next "
                    f"begin_transaction or recovery finishes it") from exc

    def _storage_error(self, txn: "Transaction", stage: str, exc: OSError) -> StorageError:
        """`exc` with the transaction and its partitions named (inside: the file that failed)."""
        where = (f"transactional id '{self.transactional_id}' transaction {txn.sequence} "
                 f"(partitions {', '.join(f'{tp.topic}-{tp.partition}' for tp in sorted(txn.touched))})")
        if isinstance(exc, StorageError):
            return exc.within(where, stage)
        return StorageError(where, stage, exc)

    def _commit_point_reached(self, txn: "Transaction") -> bool:
        """Whether the record on disk says `txn` is committing (an error came after the
        rename of the commit point): then it is committed and must not be aborted."""
        try:
            record = self.ids.read()
        except Exception:
            return False
        return bool(record and record.get("state") == "committing"
                    and int(record.get("sequence", -1)) == txn.sequence
                    and int(record.get("epoch", -1)) == self.epoch)

    def _complete(self, txn: "Transaction") -> None:
        """After the commit point: markers, then offsets. Made durable by the next commit."""
        for log in txn.touched.values():
            log.append_marker(txn.id, True)
        self._unsynced_logs = set(txn.touched.values())
        self._unsynced_files = set(self.coordinator.outcomes.apply_offsets(
            self.transactional_id, txn.id, txn.offsets, txn.metadata))

    def abort(self, txn: "Transaction") -> None:
        with self._mutex:
            self._finish_check(txn)
            if not txn.touched:
                self._done(txn, "aborted")
                return
            try:
                self.check_fence()
            except ProducerFencedError:
                self._done(txn, "fenced")  # the new owner aborted it
                return
            try:
                self._write_abort(txn)
            finally:
                self._done(txn, "aborted")

    def _write_abort(self, txn: "Transaction") -> None:
        for log in txn.touched.values():
            log.append_marker(txn.id, False)
        sync_all(set(txn.touched.values()) | self._unsynced_logs, self._unsynced_files)
        self._unsynced_logs, self._unsynced_files = set(), set()
        with self.ids.lock():
            if os.pread(self._epoch_fd, 8, 0) != self._epoch_bytes:
                self.fenced = True
                return  # the new owner recorded it
            self._write_record(sequence=txn.sequence, state="complete", partitions=[],
                               offsets={})
        self.sequence = txn.sequence

    def _abort_quietly(self, txn: "Transaction") -> None:
        try:
            self._write_abort(txn)
        except Exception:
            logger.exception("transactional id '%s': could not abort transaction %d; "
                             "recovery will", self.transactional_id, txn.sequence)
            self._needs_recovery = True
        self._done(txn, "aborted")

    def _recover_own(self) -> None:
        with self.ids.lock():
            self.check_fence()
            record = self.coordinator.outcomes.recover(self.ids, self.ids.read() or self._record)
            self.registered.clear()
            self._record = {**record, "active": True}
            self.ids.write(self._record)
            self.sequence = int(record["sequence"])
        self._unsynced_logs, self._unsynced_files = set(), set()
        self._needs_recovery = False

    def _finish_check(self, txn: "Transaction") -> None:
        if txn.state != "open":
            raise TransactionStateError(f"transaction {txn.sequence} of '{self.transactional_id}'"
                                        f" is already {txn.state}")

    def _done(self, txn: "Transaction", state: str) -> None:
        txn.state = state
        if self.current is txn:
            self.current = None

    def _write_record(self, **changes: object) -> None:
        """Under the id's .lock: rewrite the record, durably."""
        self._record = {**self._record, **changes}
        self.ids.write(self._record)

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Abort an open transaction, make the last commit durable, give the id up."""
        with self._mutex:
            try:
                if self.current is not None and not self.fenced:
                    self.abort(self.current)
                if not self.fenced and not self._needs_recovery:
                    sync_all(self._unsynced_logs, self._unsynced_files)
                    self._unsynced_logs, self._unsynced_files = set(), set()
                    with self.ids.lock():
                        if os.pread(self._epoch_fd, 8, 0) == self._epoch_bytes:
                            self._write_record(state="complete", partitions=[], offsets={},
                                               registered=[], active=False)
            finally:
                self.release()

    def release(self) -> None:
        """Close the files; the owner lock goes with them."""
        for fd in (self._epoch_fd, self._owner_fd):
            if fd >= 0:
                os.close(fd)
        self._epoch_fd = self._owner_fd = -1
        self.ids.close()
        self.closed = True


class Transaction:
    """Appends and offset commits that become visible together at commit(), or never.

    Made by ``EmbeddedBroker.begin_transaction``; one open at a time per
    transactional id. As a context manager it commits on success, aborts on error.
    """

    def __init__(self, producer: _Producer, sequence: int, timeout_ms: Optional[int] = None) -> None:
        self._producer = producer
        self.timeout_ms = timeout_ms
        self._deadline = None if timeout_ms is None else time.monotonic() + timeout_ms / 1000
        self.transactional_id = producer.transactional_id
        self.epoch = producer.epoch
        self.sequence = sequence
        self.id = transaction_id(producer.producer_id, sequence)
        """Written as producer_id in the transaction's batches and markers."""
        self.state = "open"
        """open, committed, aborted or fenced."""
        self.touched: dict[TopicPartition, PartitionLog] = {}
        self.offsets: dict[str, dict[TopicPartition, int]] = {}
        self.metadata: dict[str, dict[TopicPartition, str]] = {}

    def __repr__(self) -> str:
        return (f"Transaction({self.transactional_id!r}, sequence={self.sequence}, "
                f"epoch={self.epoch}, {self.state})")

    def append(self, topic: str, partition: int, records: Sequence[OutgoingRecord]) -> int:
        """Append records to a partition as part of this transaction; the first offset."""
        self._check_open()
        self._check_timeout()
        producer = self._producer
        tp = TopicPartition(topic, partition)
        log = self.touched.get(tp)
        if log is None:
            log = producer.coordinator.outcomes.log(topic, partition)
            if not records:
                return log.end_offset()
            if tp not in producer.registered:
                try:
                    producer.register(tp)
                except OSError as exc:
                    raise StorageError(f"topic '{topic}' partition {partition}", f"registering the partition in "
                                       f"transactional id '{self.transactional_id}'", exc) from exc
            self.touched[tp] = log
        try:
            return log.append(records, producer_id=self.id, transactional=True,
                              guard=producer.check_fence)
        except LogGoneError:
            raise UnknownTopicError(f"topic '{topic}' was deleted during transaction "
                                    f"{self.sequence} of '{self.transactional_id}'") from None

    def commit_offsets(self, group: str, offsets: Mapping[TopicPartition, int],
                       metadata: Optional[Mapping[TopicPartition, str]] = None) -> None:
        """Stage consumer-group offsets (with metadata strings); they are committed with
        the transaction."""
        self._check_open()
        encode_name(group, "group name")
        staged = validate_offsets(offsets)
        self.offsets.setdefault(group, {}).update(staged)
        notes = self.metadata.setdefault(group, {})
        for tp in staged:
            text = (metadata or {}).get(tp)
            if text:
                notes[tp] = text
            else:
                notes.pop(tp, None)

    def commit(self) -> None:
        """Make every append and staged offset visible, atomically and durably.

        Raises ProducerFencedError if another owner took the transactional id over (then
        nothing of this transaction is ever visible), or if it ran past its timeout.
        """
        self._check_timeout()
        self._producer.commit(self)

    def abort(self) -> None:
        """Discard every append and staged offset of this transaction."""
        self._producer.abort(self)

    def _check_timeout(self) -> None:
        """As a Kafka transaction coordinator does: a transaction open past its timeout
        is aborted and its producer fenced (a new owner of the id may begin again)."""
        if self._deadline is None or time.monotonic() <= self._deadline or self.state != "open":
            return
        self._producer.abort(self)
        self._producer.fenced = True
        raise ProducerFencedError(
            f"transaction {self.sequence} of '{self.transactional_id}' ran past its timeout "
            f"({self.timeout_ms} ms): aborted, and its producer fenced")

    def _check_open(self) -> None:
        if self.state != "open":
            raise TransactionStateError(
                f"transaction {self.sequence} of '{self.transactional_id}' is {self.state}")

    def __enter__(self) -> "Transaction":
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if self.state != "open":
            return
        if exc_type is None:
            self.commit()
        else:
            self.abort()
