"""The tasks of one worker: which it runs (applying the group's assignments), starting
them (restoring their stores, resuming at their committed offsets) and closing them,
their standby copies and the global tables, and what their inputs hold between
processing rounds. Read by the operations endpoints through
:class:`~streamkit.runtime.worker.view.WorkerView`."""
from __future__ import annotations

import collections
import logging
import time
from typing import Any, Dict, FrozenSet, List, Mapping, Optional, Protocol, Sequence, Set, Tuple

from ...core.names import parse_task_id
from ...core.records import RawRecord, TopicPartition
from ...errors import StreamkitError
from ...state.restore import StateRepairs, restore_task_stores
from ...topology import Topology
from ...transport.base import Consumer, FetchedBatch, Membership, TaskAssignment, Transport
from ..context.collector import RecordCollector
from ..context.task_metrics import TaskMetrics
from ..ordering.pacing import Pauses, frontier
from ..ordering.repartition_stamps import marker, repartition_writers, writer_rank, written_repartition_topics
from ..ordering.task_inputs import TaskInputs
from ..ordering.writer_merge import CommitNote
from ..task.factory import TaskSettings, create_task
from ..task.global_tables import GlobalTables
from ..task.task import Task
from .observations import WorkerObservations
from .standby import StandbyTasks

log = logging.getLogger("streamkit.runtime.worker")  # the worker's log: its tasks are part of it

MAX_COMMIT_NOTE = 4000  # characters of offset metadata (Kafka's offset.metadata.max.bytes: 4096)

Run = Tuple[TopicPartition, Sequence[RawRecord]]
"""Records of one input partition, handed to its task in one call."""


class TaskProducers(Protocol):
    """The part of the committer a task's start and close reach (see
    :class:`~streamkit.runtime.worker.committer.Committer`)."""

    async def open_task(self, task_id: str) -> None: ...

    def close_task(self, task_id: str) -> None: ...


class TaskManager:
    """The active tasks, standbys and global tables of one worker (see the module docstring)."""

    def __init__(self, topology: Topology, transport: Transport, *, partitions: Mapping[str, int],
                 plan: Mapping[str, Tuple[TopicPartition, ...]], settings: TaskSettings,
                 membership: Membership, consumer: Consumer, restore_consumer: Consumer,
                 standbys: StandbyTasks, global_tables: GlobalTables, producers: TaskProducers,
                 observations: WorkerObservations, totals: TaskMetrics, state_repairs: StateRepairs,
                 max_task_idle: float) -> None:
        self._topology = topology
        self._transport = transport
        self.partitions = partitions
        self.plan = plan
        """Every task of the app (started here or not) with its input partitions."""
        self._settings = settings
        self._membership = membership
        self._consumer = consumer
        self._restore_consumer = restore_consumer
        self.standbys = standbys
        self.global_tables = global_tables
        self._producers = producers
        self._observations = observations
        self._totals = totals
        self._state_repairs = state_repairs
        self._max_task_idle = max_task_idle
        self.active: Dict[str, Task] = {}
        """The running tasks by id."""
        self.restored: Dict[str, Dict[str, int]] = {}
        """Records replayed per task and store at start (or takeover)."""
        self._task_of_partition: Dict[TopicPartition, Task] = {}
        self._inputs: Dict[str, TaskInputs] = {}
        """Per task: fetched records not processed yet (a task with several inputs may wait for one)."""
        self._assigned: FrozenSet[str] = frozenset()
        """The active tasks of the last assignment, started or not."""
        self._pauses = Pauses()
        self._writers = repartition_writers(topology, partitions)
        self._marker_topics = {sub.id: written_repartition_topics(topology, sub.id)
                               for sub in topology.sub_topologies}
        """Per sub-topology: the repartition topics its tasks announce progress to."""
        self._announced: Dict[str, tuple] = {}
        """Per task: the progress its last markers announced (see send_markers)."""
        self._note_too_long_logged = False

    # -- what operations tools read ---------------------------------------------------
    def task_states(self) -> Dict[str, str]:
        """Every task this worker holds: ``restoring``, ``running`` or ``standby``."""
        restoring = self._observations.restoring
        states = {tid: "restoring" if tid in restoring else "running" for tid in self.active}
        for tid in self.standbys.task_ids:
            states.setdefault(tid, "standby")
        return states

    def task_stores(self, task_id: str, *, standby: bool = False) -> Optional[Dict[str, Any]]:
        """The stores (by name) of active task ``task_id``, or of its standby copy with
        ``standby``; None when this worker holds neither."""
        if standby:
            stores = self.standbys.stores(task_id)
            return None if stores is None else stores.by_name
        task = self.active.get(task_id)
        return None if task is None else task.stores.by_name

    def input_positions(self) -> Dict[TopicPartition, Optional[int]]:
        """Per input partition of the running tasks: the next offset to process (None:
        nothing processed or committed yet, so the start of the log)."""
        return {tp: task.positions.get(tp) for task in self.active.values() for tp in task.input_partitions}

    def owners(self) -> str:
        """Who runs the app's tasks, as the group knows it (for log lines)."""
        owners = {self._membership.owner_of(t) for t in self.plan} - {None}
        return "; ".join(sorted(owners)) or "owners unknown"  # type: ignore[arg-type]

    # -- assignments ------------------------------------------------------------------
    async def apply(self, assignment: TaskAssignment) -> int:
        """Close the tasks ``assignment`` took away, start the new ones, keep standbys as it
        says; return how many tasks were started."""
        for tid in sorted(set(self.active) - assignment.active):
            self.close(tid, dirty=False)
        # Tasks the last assignment gave this worker that it never started (its start
        # loop yielded to a rebalance) and that are no longer assigned: nothing closes
        # them, so hand them back here, or they stay held while this worker lives.
        for tid in sorted(self._assigned - assignment.active - set(self.active)):
            self._membership.release(tid)
        self._assigned = frozenset(assignment.active)
        # The group moved tasks: a reader of this worker's repartition output may restart on
        # another worker from its last commit, past this worker's last progress marker, and
        # would wait for that writer forever. Announce every task's progress again.
        self._announced.clear()
        new = [tid for tid in sorted(assignment.active, key=parse_task_id) if tid not in self.active]
        # A standby promoted to active, or dropped, closes first: its store files get reopened.
        self.standbys.keep(assignment.standby - assignment.active)
        if new:
            # A dead owner's last transaction decides what its tasks' changelogs and
            # offsets hold: settle it before restoring or reading committed offsets.
            resolved = self._transport.resolve_abandoned_transactions()
            if resolved:
                log.info("settled %d transaction(s) left by a stopped worker", resolved)
        for tid, task in self.active.items():  # kept across a rebalance: continue where they were
            inputs = self._inputs[tid]
            task.positions.update(inputs.merge_positions())
            inputs.clear()  # re-read from the processed positions
            self._pauses.forget(task.input_partitions)
            # From what the stores reflect: a rebuild under way has not reached task.positions.
            self._consumer.assign(task.input_partitions, task.store_positions)
        for tid in new:
            if self._membership.revocation_pending():
                break  # the group is rebalancing again: answer it first; the rest waits
            await self.start(tid)
        await self.standbys.open(assignment.standby - assignment.active)
        return len(new)

    async def start(self, tid: str) -> None:
        """Start task ``tid``: its producer (which fences an older owner), its stores
        restored or rebuilt, its inputs assigned at the committed offsets."""
        sub_id, partition = parse_task_id(tid)
        sub = self._topology.sub_topologies[sub_id]
        await self._producers.open_task(tid)
        task = create_task(self._topology, sub, partition, partitions=self.partitions,
                           collector=RecordCollector(), wall_clock=lambda: int(time.time() * 1000),
                           settings=self._settings,
                           global_stores=self.global_tables.stores if self.global_tables else None)
        self.active[tid] = task
        inputs = task.input_partitions
        positions = await self._consumer.committed(inputs)
        notes = {tp: CommitNote.decode(text, positions.get(tp, 0))
                 for tp, text in (await self._consumer.committed_metadata(inputs)).items()}
        # Stream time as committed: a writer's stream time must never go back (see
        # ..ordering.repartition_stamps).
        committed_time = max((note.stream_time for note in notes.values()), default=-1)
        if committed_time > task.context.stream_time:
            task.context.stream_time = committed_time
        lost = task.stores.lost_unlogged
        recorded = task.stores.unlogged_positions()
        ahead = _unlogged_ahead(recorded, positions)
        behind = _unlogged_behind(recorded, positions)
        if ahead or ((lost or behind) and positions):
            replay_from = None
            if behind and not lost and not ahead and not task.stores.has_changelogged_stores \
                    and len({tuple(sorted(p.items())) for p in behind.values()}) == 1 \
                    and set(behind) == set(recorded):
                replay_from = next(iter(behind.values()))  # every store stopped at the same commit
            if replay_from is not None:
                log.warning("task %s: store(s) %s have no changelog and are behind the committed offsets (a "
                            "crash between the commit and their write): replaying the input from %s with "
                            "outputs muted", tid, ", ".join(behind), _describe(replay_from))
            else:
                # Replaying input for some stores would apply it twice to the others, and input
                # a store reflects past the committed offsets cannot be taken out of it: the
                # whole task's state is rebuilt from the input instead.
                if ahead:
                    reason = (f"reflect input past the committed offsets ({_describe(positions) or 'none'}; "
                              "written by a commit whose offsets were not committed)")
                else:
                    reason = "no local state" if lost else "are behind the committed offsets"
                log.warning("task %s: store(s) %s have no changelog and %s: rebuilding the task's state from "
                            "the start of the input (with its outputs muted up to the committed offsets)",
                            tid, ", ".join(ahead or lost or behind), reason)
            task.rebuild_from_input(positions, replay_from)
            positions, notes = dict(replay_from or {}), {}
        else:
            observations = self._observations
            self.restored[tid] = await restore_task_stores(
                tid, task.stores, self._restore_consumer, self._transport.admin,
                progress=lambda done, total: observations.restore_progress(tid, done, total),
                repairs=self._state_repairs, open_producer=self._transport.producer)
            observations.restore_done(tid, sum(self.restored[tid].values()))
        self._consumer.assign(inputs, positions)
        task.positions.update(positions)  # where to resume if the group moves it before it reads
        for tp in inputs:
            self._task_of_partition[tp] = task
        writers = {tp: self._writers[tp.topic] for tp in inputs if tp.topic in self._writers}
        self._inputs[tid] = TaskInputs(inputs, writers, {tp: notes[tp].cursor for tp in writers if tp in notes})
        log.info("task %s started at %s", tid,
                 ", ".join(f"{tp.topic}[{tp.partition}]@{positions.get(tp, 'earliest')}" for tp in inputs))

    def close(self, tid: str, *, dirty: bool) -> None:
        """Stop running ``tid``. Dirty: its uncommitted output and store writes are dropped
        (another worker owns it now and redoes that work from the last commit)."""
        task = self.active.pop(tid)
        self._totals.add(task.metrics)
        if dirty:
            dropped = task.collector.discard()
            task.stores.discard()
            log.warning("task %s closed dirty (it moved to another worker, or its producer was fenced): "
                        "dropped its uncommitted work (%d output record(s)); it resumes from its last "
                        "commit wherever the group runs it next", tid, dropped)
        self._consumer.unassign(task.input_partitions)
        for tp in task.input_partitions:
            self._task_of_partition.pop(tp, None)
        self._inputs.pop(tid, None)
        self._announced.pop(tid, None)
        self._pauses.forget(task.input_partitions)
        task.close_sinks(dirty=dirty)
        task.stores.close()
        self._producers.close_task(tid)
        self._membership.release(tid)

    def close_all(self) -> None:
        """Close every task cleanly, then the standbys and global tables (their readers
        are the worker's to close)."""
        for tid in list(self.active):
            self.close(tid, dirty=False)
        self.standbys.close()
        self.global_tables.close()

    def discard_uncommitted(self) -> int:
        """After a failure: drop every task's uncommitted output and store writes; return
        the output records dropped."""
        dropped = 0
        for task in self.active.values():
            dropped += task.collector.discard()
            dropped += sum(writer.discard() for writer in task.sinks.values())
            task.stores.discard()
        return dropped

    def held(self) -> Set[str]:
        """The tasks this worker runs or keeps a standby copy of."""
        return set(self.active) | self.standbys.task_ids

    # -- a processing round -------------------------------------------------------------
    def receive(self, batches: Sequence[FetchedBatch], now: float) -> None:
        """Queue fetched batches in their tasks' inputs."""
        lookup = self._task_of_partition
        for batch in batches:
            tp = TopicPartition(batch.topic, batch.partition)
            task = lookup.get(tp)
            if task is not None:
                self._inputs[task.id].add(tp, batch.records, now)

    def released(self, now: float) -> List[List[Run]]:
        """Per task, the runs its inputs release now, in the order the task takes them."""
        has_unread = self._consumer.has_unread
        limit = frontier(self._inputs.values(), has_unread)
        return [inputs.release(now, self._max_task_idle, has_unread, limit if inputs.sources_only else None)
                for inputs in self._inputs.values()]

    def task_of(self, tp: TopicPartition) -> Task:
        """The running task reading input partition ``tp``."""
        return self._task_of_partition[tp]

    def put_back(self, runs: "collections.deque[Run]") -> None:
        """Return the round's unprocessed ``runs`` to their inputs, in order, so the loop
        can commit. A run of a merged repartition partition cannot go back (its writers'
        cursors already count it as handed out): it stays in ``runs``, with every run its
        task takes before it, so each task's order holds; what a task takes after its
        last such run goes back."""
        lookup = self._task_of_partition
        last_merged: Dict[str, int] = {}
        for index, (tp, _records) in enumerate(runs):
            tid = lookup[tp].id
            if tp in self._inputs[tid].merges:
                last_merged[tid] = index
        keep = []
        by_partition: Dict[TopicPartition, list] = {}
        for index, (tp, records) in enumerate(runs):
            if index <= last_merged.get(lookup[tp].id, -1):
                keep.append((tp, records))
            else:
                by_partition.setdefault(tp, []).extend(records)
        for tp, records in by_partition.items():
            self._inputs[lookup[tp].id].put_back(tp, records)
        runs.clear()
        runs.extend(keep)

    def end_round(self) -> None:
        """After a round: record where merged inputs resume, pause inputs far ahead of
        the others and resume those caught up."""
        for tid, inputs in self._inputs.items():
            if inputs.merges:  # processed out of offset order: resume at the first record not processed
                self.active[tid].positions.update(inputs.merge_positions())
        pause, resume = self._pauses.update(self._inputs.values())
        for tp in pause:
            self._consumer.unassign([tp])
        for tp, offset in resume.items():
            self._consumer.assign([tp], {tp: offset})

    def holding_back(self) -> bool:
        """Whether a task holds records that a writer's progress will release (not idle)."""
        now = time.monotonic()
        return any(merge.held and merge.busy(now, self._max_task_idle)
                   for inputs in self._inputs.values() for merge in inputs.merges.values())

    def input_pending(self) -> bool:
        """Whether some task's input holds fetched records not processed yet."""
        return any(inputs.pending() for inputs in self._inputs.values())

    def account_lost(self, app_id: str) -> None:
        """Records deleted before they were read: counted and logged for a source topic;
        for an internal topic (only this app reads it, and purges it below its commits) a
        bug, which stops the worker."""
        for tp, first, end in self._consumer.take_lost():
            task = self._task_of_partition.get(tp)
            spec = self._topology.topics.get(tp.topic)
            if spec is not None and spec.internal:
                raise StreamkitError(
                    f"internal topic {tp.topic}[{tp.partition}]: offsets {first} to {end - 1} were deleted "
                    f"before app {app_id} read them; its results would be wrong. Reset the app "
                    "(delete its group, internal topics and state) and reprocess")
            log.warning("%s[%d]: %d record(s) at offsets %d to %d were deleted (retention, compaction or an "
                        "offset reset) before task %s read them: they are lost to this app", tp.topic,
                        tp.partition, end - first, first, end - 1, task.id if task is not None else "?")
            if task is not None:
                task.metrics.records_lost_to_retention += end - first

    # -- progress and commits -----------------------------------------------------------
    def send_markers(self) -> None:
        """Each task that writes repartition topics announces its progress to every partition
        of them when it changed: its stream time, and whether it is idle (see
        ..ordering.repartition_stamps)."""
        now = time.monotonic()
        has_unread = self._consumer.has_unread
        for tid, task in self.active.items():
            sub_id = task.sub_topology.id
            topics = self._marker_topics[sub_id]
            if not topics:
                continue
            idle = self._inputs[tid].idle(now, self._max_task_idle, has_unread)
            progress = (task.stream_time, idle, task.metrics.records_processed)
            # Records written since the last marker (a cache flush, a punctuation) follow it:
            # announce again after them, or readers wait for progress that never changes.
            wrote = any(topic in topics for topic, _partition in task.collector.pending())
            if self._announced.get(tid) == progress and not wrote:
                continue
            self._announced[tid] = progress
            record = marker(writer_rank(sub_id, task.partition), task.stream_time, idle)
            for topic in topics:
                for partition in range(self.partitions[topic]):
                    task.collector.send_batch(topic, partition, [record])

    def prepare_commit(self) -> bool:
        """Step 1 of a commit (see Committer.commit): record each task's stream time in its
        windowed stores and flush its record caches (forwarding each key's latest value),
        then announce progress after the flushed records. True when the flushed records
        include some for an input partition of this worker's own tasks."""
        self._note_too_long_logged = False
        for task in self.active.values():
            task.prepare_commit()
        own = self._task_of_partition
        wrote_own_input = any(TopicPartition(topic, partition) in own for task in self.active.values()
                              for topic, partition in task.collector.pending())
        self.send_markers()
        return wrote_own_input

    def commit_notes(self, task_id: str) -> Dict[TopicPartition, str]:
        """The metadata committed with each input offset of ``task_id`` (see CommitNote)."""
        task = self.active[task_id]
        cursors = self._inputs[task_id].cursors(task.positions)
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


def _unlogged_behind(recorded: Dict[str, Optional[Dict[TopicPartition, int]]],
                     committed: Dict[TopicPartition, int]) -> Dict[str, Dict[TopicPartition, int]]:
    """The stores without changelog whose recorded input positions are behind the
    committed offsets (None: not recorded, taken as up to date)."""
    return {name: positions for name, positions in recorded.items() if positions is not None
            and any(positions.get(tp, 0) < offset for tp, offset in committed.items())}


def _unlogged_ahead(recorded: Dict[str, Optional[Dict[TopicPartition, int]]],
                    committed: Dict[TopicPartition, int]) -> List[str]:
    """The stores without changelog that reflect input past the committed offsets (their
    last write's offsets never got committed: a commit the group refused, a worker that
    stopped before the group took them): the task processes that input again from the
    committed offsets, which would apply it to them twice."""
    return [name for name, positions in recorded.items() if positions is not None
            and any(offset > committed.get(tp, 0) for tp, offset in positions.items())]


def _describe(positions: Dict[TopicPartition, int]) -> str:
    return ", ".join(f"{tp.topic}[{tp.partition}]@{offset}" for tp, offset in sorted(positions.items()))
