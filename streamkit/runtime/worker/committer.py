"""The commit, one implementation per processing guarantee, chosen once when the worker
starts (:func:`committer_for`) and owning the producers that path needs:

- :class:`AtLeastOnceCommitter`: one producer; outputs are made durable, then the input
  offsets are committed in the group (for tasks without stores, in the background while
  the worker processes on: see :meth:`Committer.commit`).
- :class:`SharedTransactionCommitter` (exactly_once where the transport keeps one
  transactional id per worker: the embedded log): one transaction for every task.
- :class:`PerTaskTransactionCommitter` (exactly_once on Kafka): one producer and one
  transaction per task, so a task moved to another worker fences only its own producer.

A committer is handed what it commits (:class:`CommittedTasks`) and reports the tasks
it found moved to another worker; it never closes them itself (the worker does, with
its :class:`~streamkit.runtime.worker.tasks.TaskManager`). The crash points the tests
arm sit between the steps.
"""
from __future__ import annotations

import asyncio
import logging
import time
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Dict, FrozenSet, List, Mapping, Optional, Protocol, Set, Tuple

from ...core.names import parse_task_id
from ...core.records import TopicPartition
from ...errors import RebalanceInProgressError, StreamkitError, TaskMigratedError
from ...faults import crash_point
from ...transport.base import Consumer, Producer, Transport
from ..ordering.record_order import merge_by_timestamp
from ..task.task import Task
from .topics import AppTopics

log = logging.getLogger("streamkit.runtime.worker")  # the worker's log: the commit is part of it

PURGE_INTERVAL = 30.0  # s between deletions of repartition records below the committed offsets


class CommittedTasks(Protocol):
    """What a committer reads of the tasks it commits."""

    @property
    def active(self) -> Mapping[str, Task]:
        """The running tasks by id."""

    def commit_notes(self, task_id: str) -> Dict[TopicPartition, str]:
        """The metadata committed with each input offset of ``task_id``."""


@dataclass
class CommitOutcome:
    """What a commit (or a send) found: the tasks that belong to another worker now
    (to be closed dirty: nothing of theirs was committed or persisted), and whether
    the group refused the input offsets because it is rebalancing."""

    migrated: Set[str] = field(default_factory=set)
    deferred: bool = False


class Committer(ABC):
    """Sends the tasks' outputs and commits them with their input offsets (the steps of
    :meth:`commit`); one subclass per guarantee, each owning its producers."""

    def __init__(self, app_id: str, transport: Transport, *, repartition_topics: FrozenSet[str],
                 topics: AppTopics) -> None:
        self._app_id = app_id
        self._transport = transport
        self._repartition_topics = repartition_topics
        self._topics = topics
        self._changelog_ends: Dict[TopicPartition, int] = {}
        self._retired: List[Producer] = []
        """Producers of closed tasks, shut down at the next send (closing is async)."""
        self._next_purge = time.monotonic() + PURGE_INTERVAL

    # -- what every path shares -----------------------------------------------------
    async def start(self) -> None:
        """Begin what the path needs open before any task runs (its producers are made
        with the committer)."""

    async def open_task(self, task_id: str) -> None:
        """Called before task ``task_id`` restores its stores or reads its offsets."""

    def close_task(self, task_id: str) -> None:
        """Task ``task_id`` stopped running here."""

    async def commit(self, tasks: CommittedTasks, *, overlap: bool = False) -> CommitOutcome:
        """Commit every running task (step 1, flushing the tasks' caches and announcing
        their progress, is the task manager's and comes first). Under exactly_once, a
        crash at any point is safe:

        2. Write one changelog record per key each store changed since the last commit.
        3. Deliver what tasks wrote to external sinks (each sink makes it durable with
           its own record of the input offsets, see ``streamkit.sinks``), then send all
           buffered output and changelog records (inside the transaction).
        4. exactly_once: commit the transaction with the tasks' input offsets: outputs,
           changelogs and offsets become visible together (one transaction per worker
           on the embedded log, one per task on Kafka). A crash before this point
           aborts it all and the stores were never touched. at_least_once: make the
           outputs durable, then commit the input offsets.
        5. Apply each store's buffered writes to RocksDB in one batch with the changelog
           offset it now reflects. A crash before this leaves RocksDB one commit behind
           its changelog, and restore replays just that tail.

        A task found to belong to another worker now (fenced producer, failed group
        commit) is reported in the outcome instead: nothing of it is committed or persisted.

        With ``overlap``, a path that can (at_least_once, no task with stores) returns after
        step 3 and finishes steps 4-5 for the offsets taken here in the background, while
        the worker goes on processing and sending: those offsets still pass only records
        whose outputs the broker acknowledged. Every commit first waits for the previous
        one's background part (:meth:`settle`): its failure is raised there, before any
        later offsets are committed, and the tasks it found moved are in the outcome.
        """
        outcome = await self.settle()
        # Step 2.
        for task in tasks.active.values():
            # Stamped with the wall clock, not stream time: window changelogs are also deleted
            # by time, and event times far in the past (a backfill) must not expire them at once.
            for topic, partition, records in task.stores.changelog_batches(int(time.time() * 1000)):
                task.collector.send_batch(topic, partition, records)
        # Step 3 (sinks first: a sink that finds its task moved takes the task out of the
        # commit before its outputs enter a transaction shared with other tasks).
        await self._commit_sinks(tasks.active, outcome)
        crash_point("commit.before_send")
        outcome.migrated |= await self.send(_without(tasks.active, outcome.migrated))
        crash_point("commit.after_send")
        # Steps 4 and 5: one path per way of committing.
        if overlap and self._start_in_background(tasks, outcome):
            return outcome
        await self._commit_and_persist(tasks, outcome)
        if not outcome.deferred and time.monotonic() >= self._next_purge:
            await self._purge_if_due({tp: offset for task in _without(tasks.active, outcome.migrated).values()
                                      for tp, offset in task.positions.items()})
        return outcome

    async def settle(self) -> CommitOutcome:
        """Wait for the background part of the last commit, if any (see :meth:`commit`);
        what it found. Raises its failure."""
        return CommitOutcome()

    def _start_in_background(self, tasks: CommittedTasks, outcome: CommitOutcome) -> bool:
        """Begin steps 4-5 in the background if this path can; True if it did."""
        return False

    async def send(self, active: Mapping[str, Task]) -> Set[str]:
        """Hand every task's buffered output to its producer; return the tasks found moved
        to another worker (a fenced task producer)."""
        migrated = await self._send(active)
        if self._retired:
            retired, self._retired = self._retired, []
            for producer in retired:
                try:
                    await producer.aclose()
                except Exception as exc:  # noqa: BLE001 - its task is gone; the next owner fenced it
                    log.warning("closing the producer of a closed task failed: %s", exc)
        return migrated

    async def abort(self) -> None:
        """After a failure: abort open transactions (nothing of them may become visible)."""

    async def aclose(self) -> None:
        """Close every producer (after the tasks closed)."""
        producers, self._retired = [*self._producers(), *self._retired], []
        self._forget_producers()
        for producer in producers:
            try:
                await producer.aclose()
            except Exception as exc:  # noqa: BLE001 - shutting down regardless
                log.debug("closing %s: %s", type(producer).__name__, exc)

    # -- one path per guarantee ---------------------------------------------------------
    @abstractmethod
    async def _send(self, active: Mapping[str, Task]) -> Set[str]:
        """Send the tasks' outputs; return the tasks found moved (step 3)."""

    @abstractmethod
    async def _commit_and_persist(self, tasks: CommittedTasks, outcome: CommitOutcome) -> None:
        """Steps 4 and 5 of this path; add the tasks found moved to ``outcome``."""

    @abstractmethod
    def _producers(self) -> List[Producer]:
        """The producers this committer holds now."""

    @abstractmethod
    def _forget_producers(self) -> None:
        """Drop the producers (they are being closed)."""

    # -- helpers --------------------------------------------------------------------------
    def _persist(self, active: Mapping[str, Task]) -> None:
        ends, self._changelog_ends = self._changelog_ends, {}
        for task in active.values():
            task.persist(ends)
        crash_point("commit.after_persist")

    async def _commit_sinks(self, active: Mapping[str, Task], outcome: CommitOutcome) -> None:
        """Deliver each task's external-sink records (blocking I/O, run in a thread). A sink
        that finds its task moved to another worker reports it migrated; any other failure
        stops the worker before offsets are committed past undelivered records."""
        for tid, task in list(active.items()):
            if not task.sinks:
                continue
            try:
                await asyncio.to_thread(task.commit_sinks)
            except TaskMigratedError as exc:
                log.warning("task %s: %s", tid, exc)
                outcome.migrated.add(tid)
        crash_point("commit.after_sinks")

    async def _purge_if_due(self, committed: Mapping[TopicPartition, int]) -> None:
        """Purge the repartition topics below ``committed`` (offsets just committed) every
        PURGE_INTERVAL."""
        if time.monotonic() >= self._next_purge:
            await self._purge_repartition_topics(committed)
            self._next_purge = time.monotonic() + PURGE_INTERVAL

    async def _purge_repartition_topics(self, committed: Mapping[TopicPartition, int]) -> None:
        """Delete repartition records below the committed offsets (each repartition
        partition has one reader, this app's task): the topics keep everything until
        read (``retention.ms=-1``), and no longer."""
        below = {tp: offset for tp, offset in committed.items() if tp.topic in self._repartition_topics}
        if not below:
            return
        try:
            await asyncio.to_thread(self._transport.admin.delete_records, below)
        except Exception as exc:  # noqa: BLE001 - purging saves space; reading never depends on it
            log.warning("could not delete processed repartition records (%s); retrying in %.0f s",
                        exc, PURGE_INTERVAL)


class _SharedProducer(Committer):
    """A path with one producer for every task of the worker."""

    _producer: Optional[Producer] = None

    async def _send(self, active: Mapping[str, Task]) -> Set[str]:
        batches = merge_by_timestamp(task.collector.drain() for task in active.values())
        if batches:
            assert self._producer is not None
            self._changelog_ends.update(await self._producer.send(batches))
        return set()

    def _producers(self) -> List[Producer]:
        return [self._producer] if self._producer is not None else []

    def _forget_producers(self) -> None:
        self._producer = None


class AtLeastOnceCommitter(_SharedProducer):
    """at_least_once: outputs made durable, then the input offsets committed in the group.

    When no committed task has stores, a commit with ``overlap`` leaves steps 4-5 to a
    background task (:attr:`_completing`): the producer's acks and the group commit are
    network round trips the loop need not stall on. The offsets are taken at the commit
    point, and the task awaits the acks of everything sent until it runs (a superset of
    the outputs of the records below those offsets) before committing them. Tasks with
    stores commit in line: their buffered writes must be persisted with exactly what the
    committed changelog covers, and processing would add to them meanwhile."""

    def __init__(self, app_id: str, transport: Transport, consumer: Consumer, *,
                 repartition_topics: FrozenSet[str], topics: AppTopics) -> None:
        super().__init__(app_id, transport, repartition_topics=repartition_topics, topics=topics)
        self._consumer = consumer
        self._producer = transport.producer()
        self._completing: Optional[asyncio.Future[CommitOutcome]] = None
        """Steps 4-5 of the last commit, running in the background (None: nothing pending)."""

    async def settle(self) -> CommitOutcome:
        completing, self._completing = self._completing, None
        return CommitOutcome() if completing is None else await completing

    def _start_in_background(self, tasks: CommittedTasks, outcome: CommitOutcome) -> bool:
        active = _without(tasks.active, outcome.migrated)
        if any(task.stores.open_stores for task in active.values()):
            return False
        offsets, notes = _offsets_and_notes(tasks, active)
        self._completing = asyncio.ensure_future(self._complete_in_background(offsets, notes, set(active)))
        return True

    async def _complete_in_background(self, offsets: Dict[TopicPartition, int], notes: Dict[TopicPartition, str],
                                      task_ids: Set[str]) -> CommitOutcome:
        """Steps 4-5 for tasks without stores: nothing to persist, then the purge if due."""
        outcome = CommitOutcome()
        if await self._make_durable_and_commit(offsets, notes, outcome):
            crash_point("commit.after_persist")
            if not outcome.deferred:
                await self._purge_if_due(offsets)
        else:
            outcome.migrated |= task_ids
        return outcome

    async def _commit_and_persist(self, tasks: CommittedTasks, outcome: CommitOutcome) -> None:
        """4. Make the outputs durable, then commit the input offsets in the group; a
        rebalancing group defers them to the revocation's commit; a group that moved on
        without this worker migrates every task. 5. Persist the stores."""
        active = _without(tasks.active, outcome.migrated)
        offsets, notes = _offsets_and_notes(tasks, active)
        if not await self._make_durable_and_commit(offsets, notes, outcome):
            outcome.migrated |= set(active)
            active = {}
        self._persist(active)

    async def _make_durable_and_commit(self, offsets: Dict[TopicPartition, int], notes: Dict[TopicPartition, str],
                                       outcome: CommitOutcome) -> bool:
        """Wait for the broker's acks of every output sent so far, then commit ``offsets``;
        False when the group moved on without this worker (nothing committed)."""
        assert self._producer is not None
        self._changelog_ends.update(await self._producer.delivered())
        await self._producer.flush()
        try:
            await self._consumer.commit(offsets, notes)
        except RebalanceInProgressError as exc:
            log.debug("%s", exc)  # the revocation's commit carries these offsets
            outcome.deferred = True
        except TaskMigratedError as exc:
            log.warning("%s", exc)
            return False
        except StreamkitError:
            self._topics.check()  # a deleted topic is the likeliest cause: say so precisely
            raise
        crash_point("commit.after_transaction")
        return True

    async def aclose(self) -> None:
        await self.abort()  # a commit still completing in the background stops first
        await super().aclose()

    async def abort(self) -> None:
        """Stop a commit completing in the background: its offsets may stay uncommitted
        (the next owner processes those records again)."""
        completing, self._completing = self._completing, None
        if completing is None:
            return
        completing.cancel()
        await asyncio.wait([completing])  # its own failure is not raised here: failing or stopping already
        if not completing.cancelled() and completing.exception() is not None:
            log.debug("the commit completing in the background failed: %s", completing.exception())


class SharedTransactionCommitter(_SharedProducer):
    """exactly_once with one transaction for every task of the worker (the embedded log)."""

    def __init__(self, app_id: str, transport: Transport, *, repartition_topics: FrozenSet[str],
                 topics: AppTopics) -> None:
        super().__init__(app_id, transport, repartition_topics=repartition_topics, topics=topics)
        self._producer = transport.producer(transactional_id=f"{app_id}-{uuid.uuid4().hex[:12]}")

    async def start(self) -> None:
        assert self._producer is not None
        await self._producer.begin_transaction()

    async def _commit_and_persist(self, tasks: CommittedTasks, outcome: CommitOutcome) -> None:
        """4. One transaction for every task of the worker: outputs, changelogs and offsets
        become visible together. 5. Persist the stores, then begin the next transaction."""
        active = _without(tasks.active, outcome.migrated)
        offsets, notes = _offsets_and_notes(tasks, active)
        assert self._producer is not None
        self._changelog_ends.update(await self._producer.delivered())
        await self._producer.commit_transaction(self._app_id, offsets, notes)
        crash_point("commit.after_transaction")
        self._persist(active)
        await self._producer.begin_transaction()

    async def abort(self) -> None:
        await _abort(self._producers())


class PerTaskTransactionCommitter(Committer):
    """exactly_once with one producer and transaction per task (Kafka): a task's producer
    is opened when the task starts, which fences any older owner of the task."""

    def __init__(self, app_id: str, transport: Transport, *, repartition_topics: FrozenSet[str],
                 topics: AppTopics) -> None:
        super().__init__(app_id, transport, repartition_topics=repartition_topics, topics=topics)
        self._by_task: Dict[str, Producer] = {}

    async def open_task(self, task_id: str) -> None:
        # Fences any older producer of this task (a zombie owner) and aborts its open
        # transaction, before the changelogs are restored and offsets read.
        sub_id, partition = parse_task_id(task_id)
        producer = self._transport.producer(transactional_id=f"{self._app_id}-{sub_id}-{partition}")
        self._by_task[task_id] = producer  # registered first: closed at shutdown even if this fails
        await producer.begin_transaction()

    def close_task(self, task_id: str) -> None:
        producer = self._by_task.pop(task_id, None)
        if producer is not None:
            self._retired.append(producer)

    async def _send(self, active: Mapping[str, Task]) -> Set[str]:
        migrated = set()
        for tid, task in list(active.items()):
            batches = task.collector.drain()
            if not batches:
                continue
            try:
                self._changelog_ends.update(await self._by_task[tid].send(batches))
            except TaskMigratedError as exc:
                log.warning("task %s: %s", tid, exc)
                migrated.add(tid)
        return migrated

    async def _commit_and_persist(self, tasks: CommittedTasks, outcome: CommitOutcome) -> None:
        """Each task's transaction commits, then its stores persist, then its next
        transaction begins, before the next task commits. A task whose producer was
        fenced (it moved, or its transaction ran past its timeout) is migrated; any other
        failure stops the worker with every task before it committed and persisted, and
        none after it."""
        for tid, task in list(_without(tasks.active, outcome.migrated).items()):
            producer = self._by_task[tid]
            try:
                self._changelog_ends.update(await producer.delivered())
                await producer.commit_transaction(self._app_id, task.positions, tasks.commit_notes(tid))
            except TaskMigratedError as exc:
                log.warning("task %s: %s", tid, exc)
                outcome.migrated.add(tid)
                continue
            crash_point("commit.after_transaction")
            task.persist(self._changelog_ends)
            crash_point("commit.after_persist")
            try:
                await producer.begin_transaction()
            except TaskMigratedError as exc:
                log.warning("task %s: %s", tid, exc)
                outcome.migrated.add(tid)
            crash_point("commit.between_tasks")
        self._changelog_ends = {}

    async def abort(self) -> None:
        await _abort(self._producers())

    def _producers(self) -> List[Producer]:
        return list(self._by_task.values())

    def _forget_producers(self) -> None:
        self._by_task.clear()


def committer_for(app_id: str, transport: Transport, consumer: Consumer, *, exactly_once: bool,
                  per_task_transactions: bool, repartition_topics: FrozenSet[str], topics: AppTopics) -> Committer:
    """The committer of the app's processing guarantee on ``transport`` (with
    ``per_task_transactions``: the transport's ``transactional_id_per_task()``, asked
    when the worker is made so an unsupported guarantee fails before it starts)."""
    if not exactly_once:
        return AtLeastOnceCommitter(app_id, transport, consumer, repartition_topics=repartition_topics,
                                    topics=topics)
    if per_task_transactions:
        return PerTaskTransactionCommitter(app_id, transport, repartition_topics=repartition_topics, topics=topics)
    return SharedTransactionCommitter(app_id, transport, repartition_topics=repartition_topics, topics=topics)


def _without(active: Mapping[str, Task], migrated: Set[str]) -> Mapping[str, Task]:
    return {tid: task for tid, task in active.items() if tid not in migrated} if migrated else active


def _offsets_and_notes(tasks: CommittedTasks, active: Mapping[str, Task]
                       ) -> Tuple[Dict[TopicPartition, int], Dict[TopicPartition, str]]:
    offsets: Dict[TopicPartition, int] = {}
    notes: Dict[TopicPartition, str] = {}
    for tid, task in active.items():
        offsets.update(task.positions)
        notes.update(tasks.commit_notes(tid))
    return offsets, notes


async def _abort(producers: List[Producer]) -> None:
    for producer in producers:
        try:
            await producer.abort_transaction()
        except Exception as exc:  # noqa: BLE001 - the next owner aborts it anyway
            log.warning("could not abort an open transaction (%s); it is aborted on the next start", exc)
