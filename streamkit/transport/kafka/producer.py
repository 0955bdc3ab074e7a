"""Producing to Kafka in batches; transactional when given a transactional id.

Transactions and aiokafka's transaction state machine
-----------------------------------------------------
aiokafka 0.14 keeps a transactional producer's state in its ``TransactionManager``
(``aiokafka/producer/transaction_manager.py``): READY -> IN_TRANSACTION -> COMMITTING
or ABORTING -> READY, plus two error states:

* ABORTABLE_ERROR: a broker refused part of the transaction in a way the transaction
  survives (GroupAuthorizationFailed while adding offsets, a refused AddPartitionsToTxn).
  ``send_offsets_to_transaction`` / ``commit_transaction`` raise it; ``abort_transaction``
  works from this state (it sends EndTxn(ABORT)) and leads back to READY.
* FATAL_ERROR: any other error in a transactional request (EndTxn, AddOffsetsToTxn or
  TxnOffsetCommit answered with an unexpected error, fencing, an authorization error for
  the transactional id) is raised inside aiokafka's sender task, which then dies and puts
  the manager in FATAL_ERROR. Nothing leaves that state: ``abort_transaction`` trips the
  transition assert (and under ``python -O`` would wait forever for a sender that is gone).
  Only a new producer with the same transactional id can end the transaction: its
  InitProducerId bumps the epoch and aborts whatever the old one left open.

So :class:`KafkaProducer` keeps its own ``_in_transaction`` set after a failed commit (the
transaction is still open on the broker) and clears it only after a successful commit, a
completed abort, or fencing (a newer producer of the id has aborted it already).
``abort_transaction`` aborts on the broker when aiokafka can; when it cannot (FATAL_ERROR,
an interrupted commit or abort still in flight, or the abort itself failing) it raises
:class:`~streamkit.errors.ProducerUnusableError` naming the transactional id, and the
producer refuses every later begin/send/commit with that error: the task must be
restarted with a new producer.
"""
from __future__ import annotations

import asyncio
import collections
import logging
from typing import Deque, Dict, List, Mapping, Optional, Sequence, Tuple

from aiokafka import AIOKafkaProducer
from aiokafka.errors import (IllegalOperation, InvalidProducerEpoch, InvalidTransactionTimeout, KafkaError,
                             ProducerFenced, UnknownError, UnknownTopicOrPartitionError)

from ...errors import ConfigError, ProducerUnusableError, StreamkitError, TaskMigratedError
from ..base import OutgoingRecord, Producer, TopicPartition
from .config import KafkaClientConfig
from .connect import authorization_error, quietly, start_with_retry
from .no_auto_create import no_topic_auto_creation
from .consumer import kafka_offsets, stop_soon

log = logging.getLogger(__name__)

_FENCED = (ProducerFenced, InvalidProducerEpoch)
# What aiokafka's transaction methods raise besides KafkaError: IllegalOperation (not in a
# transaction) and AssertionError (an invalid TransactionManager state transition).
_TXN_ERRORS = (KafkaError, IllegalOperation, AssertionError)
# aiokafka TransactionState names from which abort_transaction() reaches the broker.
_ABORTABLE_STATES = ("IN_TRANSACTION", "ABORTABLE_ERROR")
_NO_HEADERS: list = []  # aiokafka's batch builder wants a list; never mutated
MAX_HANDING_OVER = 64
"""Hand-overs aiokafka has not accepted yet above which send() waits for the oldest: the
worker's backpressure when the broker is slower than processing (output would otherwise
pile up in memory until the next commit)."""


class KafkaProducer(Producer):
    """Sends each (topic, partition, records) batch as Kafka record batches (no per-record
    coroutine), and returns the offset after each partition's last record."""

    def __init__(self, config: KafkaClientConfig, transactional_id: Optional[str] = None) -> None:
        kwargs = config.producer_kwargs()
        kwargs["acks"] = "all"
        if transactional_id is not None:
            kwargs["transactional_id"] = transactional_id
            kwargs["enable_idempotence"] = True
            kwargs["transaction_timeout_ms"] = config.transaction_timeout_ms
        self._kafka = no_topic_auto_creation(AIOKafkaProducer(**kwargs))
        self._config = config
        self._servers = ",".join(config.bootstrap_servers)
        self._connect_timeout = config.connect_timeout_s
        self.transactional_id = transactional_id
        self.transaction_timeout_ms: int = config.transaction_timeout_ms
        """How long the broker lets a transaction of this producer stay open before aborting it
        (sent with InitProducerId; only transactional producers use it). A worker must commit
        well within it."""
        self._started = False
        self._in_transaction = False
        """A transaction is open on the broker: set by begin_transaction, cleared only by a
        successful commit, a completed abort, or fencing (the newer producer aborted it)."""
        self._unusable: Optional[StreamkitError] = None
        """Why this producer cannot be used again (fenced, or a transaction it could not
        abort); begin/send/commit raise a copy of it."""
        self._pending: List[Tuple[str, int, asyncio.Future]] = []
        """Per send and partition, its hand-over to aiokafka (see :meth:`send`), not awaited yet."""
        self._handing_over: Dict[Tuple[str, int], asyncio.Future] = {}
        """Per partition, its latest hand-over (the next one waits for it)."""
        self._not_accepted: Deque[asyncio.Future] = collections.deque()
        """Hand-overs in the order made, oldest first, until seen done (see MAX_HANDING_OVER)."""

    async def start(self) -> None:
        """Connect; with a transactional id, fence older producers of that id (InitProducerId)
        and abort whatever transaction they left open."""
        if self._started:
            return
        try:
            await start_with_retry(self._kafka.start, self._servers, self._connect_timeout,
                                   f"producer {self.transactional_id or ''}".rstrip(), self._config)
        except UnknownError as exc:
            if self.transactional_id is None:
                raise
            await quietly(self._kafka.stop())
            raise StreamkitError(
                f"Kafka at {self._servers} refused a transactional producer ({self.transactional_id}): "
                f"{exc}; exactly_once needs a broker with transactions (Apache Kafka 2.5+)") from None
        except InvalidTransactionTimeout:
            await quietly(self._kafka.stop())
            raise ConfigError(
                f"Kafka at {self._servers} refused transaction_timeout_ms={self.transaction_timeout_ms} for "
                f"producer {self.transactional_id}: it is above the broker's transaction.max.timeout.ms "
                f"(900000 by default); lower transaction_timeout_ms or raise the broker's limit") from None
        except KafkaError as exc:
            refusal = authorization_error(exc, self._config, f"to start a producer with transactional id "
                                          f"'{self.transactional_id}' (WRITE)" if self.transactional_id else
                                          "to start a producer")
            if refusal is None:
                raise
            await quietly(self._kafka.stop())
            raise refusal from None
        self._started = True

    @property
    def unusable(self) -> Optional[str]:
        """Why this producer must be replaced by a new one (None while it is usable)."""
        return None if self._unusable is None else str(self._unusable)

    def _check_usable(self) -> None:
        if self._unusable is not None:
            raise type(self._unusable)(str(self._unusable))

    async def send(self, batches: Sequence[Tuple[str, int, Sequence[OutgoingRecord]]]) -> Dict[TopicPartition, int]:
        """Build the record batches and hand them to aiokafka in the background; neither the
        hand-over nor the broker's acks are awaited here (:meth:`delivered` awaits both,
        before the commit), so the worker goes on fetching and processing meanwhile.

        aiokafka takes one batch per partition at a time (a second waits until the first
        is on its way); each partition's hand-overs are chained, so its batches keep their
        order, and a failed one fails the ones after it. Errors surface in :meth:`delivered`.
        """
        self._check_usable()
        await self.start()
        if self.transactional_id is not None and not self._in_transaction:
            raise RuntimeError("transactional producer: call begin_transaction() before send()")
        for topic, partition, records in batches:
            builders = self._build(records)
            if not builders:
                continue
            previous = self._handing_over.get((topic, partition))
            hand_over = asyncio.ensure_future(self._hand_over(previous, builders, topic, partition))
            self._handing_over[(topic, partition)] = hand_over
            self._pending.append((topic, partition, hand_over))
            self._not_accepted.append(hand_over)
        not_accepted = self._not_accepted
        while not_accepted and not_accepted[0].done():
            not_accepted.popleft()
        while len(not_accepted) > MAX_HANDING_OVER:
            await asyncio.wait([not_accepted.popleft()])  # its failure surfaces in delivered()
        return {}

    def _build(self, records: Sequence[OutgoingRecord]) -> list:
        """aiokafka batch builders holding ``records`` (one unless they overflow a batch)."""
        kafka = self._kafka
        builders = []
        builder = kafka.create_batch()
        for key, value, timestamp, headers in records:
            if builder.append(key=key, value=value, timestamp=timestamp,
                              headers=list(headers) if headers else _NO_HEADERS) is None:
                builders.append(builder)
                builder = kafka.create_batch()
                builder.append(key=key, value=value, timestamp=timestamp,
                               headers=list(headers) if headers else _NO_HEADERS)
        if builder.record_count():
            builders.append(builder)
        return builders

    async def _hand_over(self, previous: Optional[asyncio.Future], builders: list, topic: str,
                         partition: int) -> List[Tuple[int, asyncio.Future]]:
        """``(record count, ack future)`` per batch, handed over after ``previous`` (the
        partition's earlier hand-over, whose failure fails this one)."""
        if previous is not None:
            await previous
        return [(builder.record_count(), await self._kafka.send_batch(builder, topic, partition=partition))
                for builder in builders]

    async def delivered(self) -> Dict[TopicPartition, int]:
        """Await every batch sent since the last call until the broker acknowledged it; the
        offset after each partition's last record. Raises the first failure (fencing as
        TaskMigratedError), cancelling what is left."""
        # _handing_over is kept: a send made while this waits (a commit completing in the
        # background) must still chain after its partition's hand-over in flight.
        pending, self._pending = self._pending, []
        self._not_accepted.clear()
        ends: Dict[TopicPartition, int] = {}
        try:
            for topic, partition, hand_over in pending:
                for count, ack in await hand_over:
                    metadata = await ack
                    ends[TopicPartition(topic, partition)] = metadata.offset + count
        except KafkaError as exc:
            _cancel(pending)
            raise self._failure(exc, [(topic, partition, ()) for topic, partition, _ in pending]) from None
        except BaseException:
            _cancel(pending)
            raise
        return ends

    def _failure(self, exc: KafkaError, batches) -> Exception:
        if isinstance(exc, _FENCED):
            return self._fenced(exc)
        where = _where(batches)
        refusal = authorization_error(exc, self._config, f"producing to {where} (WRITE)")
        if refusal is not None:
            return refusal
        if isinstance(exc, UnknownTopicOrPartitionError):
            return StreamkitError(f"producing to {where} on {self._servers} failed: the topic does not exist "
                                  f"(deleted while the worker ran?): {exc}")
        return StreamkitError(f"producing to {where} on {self._servers} failed: {type(exc).__name__}: {exc}")

    async def flush(self) -> None:
        await self.delivered()
        if self._started:
            await self._kafka.flush()

    async def begin_transaction(self) -> None:
        if self.transactional_id is None:
            raise RuntimeError("this producer has no transactional id")
        self._check_usable()
        if self._in_transaction:
            raise RuntimeError(f"producer {self.transactional_id}: a transaction is still open; "
                               "commit_transaction() or abort_transaction() it first")
        await self.start()
        self._raise_if_stuck("beginning a transaction")
        try:
            await self._kafka.begin_transaction()
        except _TXN_ERRORS as exc:
            raise self._transaction_failure("beginning", exc) from None
        self._in_transaction = True

    async def commit_transaction(self, group: str, offsets: Mapping[TopicPartition, int],
                                 metadata: Optional[Mapping[TopicPartition, str]] = None) -> None:
        """Commit the open transaction with ``offsets`` for ``group``. On failure other than
        fencing the transaction stays open (on the broker too): call :meth:`abort_transaction`."""
        self._check_usable()
        if not self._in_transaction:
            raise RuntimeError(f"producer {self.transactional_id}: no transaction is open; "
                               "call begin_transaction() first")
        await self.delivered()
        self._raise_if_stuck(f"committing (offsets for group {group})")
        try:
            if offsets:
                await self._kafka.send_offsets_to_transaction(kafka_offsets(offsets, metadata), group)
            await self._kafka.commit_transaction()
        except _TXN_ERRORS as exc:
            # Not cleared (unless fenced): the transaction is still open on the broker and
            # abort_transaction() must end it there.
            raise self._transaction_failure(f"committing (offsets for group {group})", exc) from None
        self._in_transaction = False

    async def abort_transaction(self) -> None:
        """Drop unsent output and abort the open transaction on the broker (nothing when none
        is open, or when a newer producer of the id fenced this one: it aborted it already).

        Raises :class:`ProducerUnusableError` (naming the transactional id) when aiokafka cannot
        abort: the transaction may stay open on the broker until ``transaction_timeout_ms``,
        and the producer refuses any further use; restart the task with a new producer.
        """
        _cancel(self._pending)
        self._pending, self._handing_over = [], {}
        self._not_accepted.clear()
        if not self._in_transaction:
            return
        if self._unusable is not None:
            self._check_usable()  # it already failed to abort: say so again, don't retry
        state = self._txn_state()
        if state == "READY":
            # aiokafka has nothing open: a commit or abort whose caller stopped waiting for it
            # (cancelled) completed after all.
            self._in_transaction = False
            return
        if state == "FATAL_ERROR":
            cause = self._txn_error()
            if isinstance(cause, _FENCED):
                self._fenced(cause)  # the newer producer's InitProducerId aborted it
                return
            raise self._stuck("aborting the transaction", cause)
        if state is not None and state not in _ABORTABLE_STATES:
            raise self._give_up(f"aborting is impossible: aiokafka's transaction is in state {state} (an "
                                f"interrupted commit or abort is still in flight), from which it cannot abort")
        try:
            await self._kafka.abort_transaction()
        except _FENCED:
            self._in_transaction = False  # a newer producer of this id already aborted it
            return
        except _TXN_ERRORS as exc:
            raise self._give_up(f"aborting the transaction failed: {type(exc).__name__}: {exc}") from None
        self._in_transaction = False

    # ------------------------------------------------------------ aiokafka's transaction state

    def _txn_state(self) -> Optional[str]:
        """The name of aiokafka's TransactionState (None if its internals are not as expected)."""
        state = getattr(getattr(self._kafka, "_txn_manager", None), "state", None)
        return getattr(state, "name", None)

    def _txn_error(self) -> Optional[BaseException]:
        """The error aiokafka's current transaction ended with, if any."""
        waiter = getattr(getattr(self._kafka, "_txn_manager", None), "_transaction_waiter", None)
        if isinstance(waiter, asyncio.Future) and waiter.done() and not waiter.cancelled():
            return waiter.exception()
        return None

    def _raise_if_stuck(self, step: str) -> None:
        """aiokafka's sender died (FATAL_ERROR): nothing this producer does can reach the
        transaction coordinator again. Fenced: the task moved; otherwise: unusable."""
        if self._txn_state() != "FATAL_ERROR":
            return
        cause = self._txn_error()
        if isinstance(cause, _FENCED):
            raise self._fenced(cause)
        raise self._stuck(step, cause)

    def _stuck(self, step: str, cause: Optional[BaseException]) -> ProducerUnusableError:
        after = f"{type(cause).__name__}: {cause}" if cause is not None else "an error"
        return self._give_up(f"{step} is impossible: aiokafka's transaction manager is in FATAL_ERROR "
                             f"after {after} (its sender task stopped; only a new producer can reach the "
                             f"transaction coordinator)")

    def _give_up(self, why: str) -> ProducerUnusableError:
        error = ProducerUnusableError(
            f"transactional producer {self.transactional_id} on {self._servers}: {why}. Its transaction "
            f"may stay open on the broker, holding back read_committed readers of its partitions, until "
            f"the broker aborts it (transaction_timeout_ms={self.transaction_timeout_ms}) or a new producer "
            f"with transactional id {self.transactional_id} starts (which aborts it at once). This producer "
            f"cannot be used again: restart the task with a new producer")
        self._unusable = error
        return error

    def _transaction_failure(self, step: str, exc: BaseException) -> Exception:
        if isinstance(exc, _FENCED):
            return self._fenced(exc)
        refusal = authorization_error(exc, self._config, f"{step} a transaction of producer {self.transactional_id}")
        if refusal is not None:
            return refusal
        return StreamkitError(f"{step} a transaction of producer {self.transactional_id} on {self._servers} "
                              f"failed: {type(exc).__name__}: {exc}")

    def _fenced(self, exc: BaseException) -> TaskMigratedError:
        """Fenced: the newer producer's InitProducerId aborted this one's open transaction, and
        this one can never commit again."""
        error = TaskMigratedError(f"producer {self.transactional_id} was fenced by a newer one with the same "
                                  f"transactional id: its task moved to another worker ({type(exc).__name__})")
        self._in_transaction = False
        self._unusable = error
        return error

    async def aclose(self) -> None:
        """Abort an open transaction (if this producer still can) and close the client."""
        try:
            if self._started:
                reported = self._unusable is not None
                try:
                    await self.abort_transaction()
                except ProducerUnusableError as exc:
                    if not reported:
                        log.warning("closing: %s", exc)
        finally:
            self._started = False
            await self._kafka.stop()  # also when never started: aiokafka warns about unclosed clients

    def close(self) -> None:
        stop_soon(self._kafka.stop())
        self._started = False


def _where(batches) -> str:
    partitions = sorted({(topic, partition) for topic, partition, *_ in batches})
    return ", ".join(f"{topic}[{partition}]" for topic, partition in partitions[:5]) + \
        (" ..." if len(partitions) > 5 else "")


def _cancel(pending: Sequence[Tuple[str, int, asyncio.Future]]) -> None:
    """Cancel hand-overs not done and the ack futures of those done (output to drop)."""
    for *_, hand_over in pending:
        if not hand_over.done():
            hand_over.cancel()
        elif not hand_over.cancelled() and hand_over.exception() is None:
            for _count, ack in hand_over.result():
                ack.cancel()
