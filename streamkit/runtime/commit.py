"""The commit, as a part of :class:`~streamkit.runtime.worker.Worker`: the steps every
commit shares, then one method per way of committing (at_least_once; exactly_once
with one transaction for the worker; exactly_once with one transaction per task).

A mixin over the worker's state (tasks, producers, consumer), kept apart so the
worker module holds the life cycle and the loop, and this one what a commit does and
in which order, with the crash points the tests arm between the steps.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Dict, Tuple

from ..errors import RebalanceInProgressError, StreamkitError, TaskMigratedError
from ..faults import crash_point
from ..core.records import TopicPartition
from .writer_merge import CommitNote

log = logging.getLogger("streamkit.runtime.worker")  # the worker's log: the commit is part of it

SHARED = ""  # producer key of the worker-wide producer
PURGE_INTERVAL = 30.0  # s between deletions of repartition records below the committed offsets
MAX_COMMIT_NOTE = 4000  # characters of offset metadata (Kafka's offset.metadata.max.bytes: 4096)


class CommitSteps:
    """The worker's commit (see the numbered steps of :meth:`_commit`)."""

    async def _commit(self) -> None:
        """Commit every task. Under exactly_once, a crash at any point is safe:

        1. Record each task's stream time in its windowed stores; flush the record caches:
           forward each key's latest value downstream.
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
        commit) is closed dirty instead: nothing of it is committed or persisted.
        """
        assert self._consumer is not None
        self._commit_deferred = False
        # Step 1 (progress markers after the flushed records: they announce what follows them).
        for task in self.tasks.values():
            task.prepare_commit()
        own = self._task_of_partition
        self._wrote_own_input = any(TopicPartition(topic, partition) in own for task in self.tasks.values()
                                    for topic, partition in task.collector.pending())
        self._send_markers()
        # Step 2.
        for task in self.tasks.values():
            # Stamped with the wall clock, not stream time: window changelogs are also deleted
            # by time, and event times far in the past (a backfill) must not expire them at once.
            for topic, partition, records in task.store_set.changelog_batches(int(time.time() * 1000)):
                task.collector.send_batch(topic, partition, records)
        # Step 3 (sinks first: a sink that finds its task moved closes it before its
        # outputs enter a transaction shared with other tasks).
        await self._commit_sinks()
        crash_point("commit.before_send")
        await self._send_outputs()
        crash_point("commit.after_send")
        # Steps 4 and 5: one path per way of committing.
        if self._per_task_producers:
            await self._commit_per_task_transactions()
        elif self.exactly_once:
            await self._commit_shared_transaction()
        else:
            await self._commit_at_least_once()
        if time.monotonic() >= self._next_purge and not self._commit_deferred:
            await self._purge_repartition_topics()
            self._next_purge = time.monotonic() + PURGE_INTERVAL
        self._note_too_long_logged = False

    def _offsets_and_notes(self) -> Tuple[Dict[TopicPartition, int], Dict[TopicPartition, str]]:
        offsets: Dict[TopicPartition, int] = {}
        notes: Dict[TopicPartition, str] = {}
        for tid, task in self.tasks.items():
            offsets.update(task.positions)
            notes.update(self._commit_notes(tid))
        return offsets, notes

    async def _commit_at_least_once(self) -> None:
        """4. Make the outputs durable, then commit the input offsets in the group; a
        rebalancing group defers them to the revocation's commit; a group that moved on
        without this worker closes every task dirty. 5. Persist the stores."""
        assert self._consumer is not None
        offsets, notes = self._offsets_and_notes()
        shared = self._producers[SHARED]
        self._changelog_ends.update(await shared.delivered())
        await shared.flush()
        try:
            await self._consumer.commit(offsets, notes)
        except RebalanceInProgressError as exc:
            log.debug("%s", exc)  # the revocation's commit carries these offsets
            self._commit_deferred = True
        except TaskMigratedError as exc:
            log.warning("%s", exc)
            for tid in list(self.tasks):
                self._close_task(tid, dirty=True)
        except StreamkitError:
            self._check_topics()  # a deleted topic is the likeliest cause: say so precisely
            raise
        crash_point("commit.after_transaction")
        self._persist_all()

    async def _commit_shared_transaction(self) -> None:
        """4. One transaction for every task of the worker (the embedded log): outputs,
        changelogs and offsets become visible together. 5. Persist the stores, then
        begin the next transaction."""
        offsets, notes = self._offsets_and_notes()
        shared = self._producers[SHARED]
        self._changelog_ends.update(await shared.delivered())
        await shared.commit_transaction(self.app_id, offsets, notes)
        crash_point("commit.after_transaction")
        self._persist_all()
        await shared.begin_transaction()

    def _persist_all(self) -> None:
        ends, self._changelog_ends = self._changelog_ends, {}
        for task in self.tasks.values():
            task.persist(ends)
        crash_point("commit.after_persist")

    async def _commit_per_task_transactions(self) -> None:
        """Per-task transactions (Kafka): each task's transaction commits, then its stores
        persist, then its next transaction begins, before the next task commits. A task
        whose producer was fenced (it moved, or its transaction ran past its timeout) is
        closed dirty and handed back to the group; any other failure stops the worker
        with every task before it committed and persisted, and none after it."""
        for tid, task in list(self.tasks.items()):
            producer = self._producers[tid]
            try:
                self._changelog_ends.update(await producer.delivered())
                await producer.commit_transaction(self.app_id, task.positions, self._commit_notes(tid))
            except TaskMigratedError as exc:
                log.warning("task %s: %s", tid, exc)
                self._close_task(tid, dirty=True)
                continue
            crash_point("commit.after_transaction")
            task.persist(self._changelog_ends)
            crash_point("commit.after_persist")
            try:
                await producer.begin_transaction()
            except TaskMigratedError as exc:
                log.warning("task %s: %s", tid, exc)
                self._close_task(tid, dirty=True)
            crash_point("commit.between_tasks")
        self._changelog_ends = {}

    async def _purge_repartition_topics(self) -> None:
        """Delete repartition records below the committed offsets (each repartition
        partition has one reader, this app's task): the topics keep everything until
        read (``retention.ms=-1``), and no longer."""
        repartition = set(self.topology.repartition_topics)
        below = {tp: offset for task in self.tasks.values() for tp, offset in task.positions.items()
                 if tp.topic in repartition}
        if not below:
            return
        try:
            await asyncio.to_thread(self.transport.admin.delete_records, below)
        except Exception as exc:  # noqa: BLE001 - purging saves space; reading never depends on it
            log.warning("could not delete processed repartition records (%s); retrying in %.0f s",
                        exc, PURGE_INTERVAL)

    def _commit_notes(self, tid: str) -> Dict[TopicPartition, str]:
        """The metadata committed with each input offset of ``tid`` (see CommitNote)."""
        task = self.tasks[tid]
        cursors = self._inputs[tid].cursors(task.positions)
        notes = {}
        for tp, position in task.positions.items():
            text = CommitNote(task.stream_time, cursors.get(tp, {})).encode(position)
            if len(text) > MAX_COMMIT_NOTE:
                # Kafka would refuse the commit: keep the stream time; a restart from this
                # commit may then process again records of writers that ran ahead.
                if not self._note_too_long_logged:
                    log.warning("%s[%d]: the per-writer cursor (%d writers) is longer than Kafka's offset "
                                "metadata allows; committing without it (after a crash, up to a commit "
                                "interval of records may be processed twice)", tp.topic, tp.partition,
                                len(cursors.get(tp, {})))
                    self._note_too_long_logged = True
                text = CommitNote(task.stream_time).encode(position)
            notes[tp] = text
        return notes

    async def _commit_sinks(self) -> None:
        """Deliver each task's external-sink records (blocking I/O, run in a thread). A sink
        that finds its task moved to another worker closes the task dirty; any other
        failure stops the worker before offsets are committed past undelivered records."""
        for tid, task in list(self.tasks.items()):
            if not task.sinks:
                continue
            try:
                await asyncio.to_thread(task.commit_sinks)
            except TaskMigratedError as exc:
                log.warning("task %s: %s", tid, exc)
                self._close_task(tid, dirty=True)
        crash_point("commit.after_sinks")
