"""The worker: owns tasks, feeds them batches from the transport, commits.

One asyncio loop; per-record work happens in each task's synchronous loop over
a fetched batch, so the event loop is paid per batch, not per record. Which
tasks the worker runs is decided by the transport's :class:`Membership`: on the
embedded log it takes tasks nobody holds; on Kafka the consumer group assigns
them and may move them in a rebalance (committed first, see :meth:`Worker._rebalance`).
"""
from __future__ import annotations

import asyncio
import collections
import gc
import logging
import math
import os
import signal
import time
import uuid
from typing import Any, Callable, Dict, FrozenSet, List, Optional, Protocol, Sequence

from ..core.app_config import AppConfig
from ..errors import ConfigError, StreamkitError, TaskMigratedError
from ..state.directory import StateDirectory, claim_state_directory
from ..state.restore import StateRepairs, restore_task_stores
from ..topology import Topology
from ..topology.passes import tasks_of
from ..topology.serde_binding import bind_serdes
from ..core.records import TopicPartition
from ..transport.base import Consumer, GroupPlan, Membership, Producer, TaskAssignment, Transport
from ..transport.factory import open_transport
from .assembly import TaskSettings, create_task
from .commit import PURGE_INTERVAL, SHARED, CommitSteps
from .collector import RecordCollector
from .external_sources import with_external_sources
from .global_tables import GlobalTables
from .record_order import interleave_lanes, merge_by_timestamp
from .metrics import TaskMetrics
from .observations import WorkerObservations
from .pacing import Pauses, frontier
from .progress import marker, repartition_writers, writer_rank, written_repartition_topics
from .standby import StandbyTasks
from ..core.names import parse_task_id, task_id
from .task import Task
from .task_inputs import TaskInputs
from .topics_setup import prepare_topics
from .writer_merge import CommitNote

log = logging.getLogger(__name__)

FETCH_WAIT = 0.1  # s: longest a fetch waits for records
PROGRESS_INTERVAL = 30.0  # s between progress log lines
SLICE = 1000  # records processed between looks at the clock
ROUND_LIMIT = 5.0  # s a processing round may run past the last commit (without a transaction timeout)
MAX_BLOCKING = 0.05  # s of processing before the event loop gets a turn
FINAL_COMMIT_WAIT = 30.0  # s a stopping worker waits for a rebalance to take its offsets
TOPIC_CHECK_INTERVAL = 5.0  # s between checks that the app's topics still exist as planned
MARKER_INTERVAL = 0.1  # s between progress markers of a task whose progress changed (see .progress)


class Worker(CommitSteps):
    """Runs an app's tasks on a transport until stopped, idle, or failed."""

    def __init__(self, topology: Topology, config: AppConfig, transport: Transport, *,
                 until_idle: Optional[float] = None, state_repairs: StateRepairs = StateRepairs()) -> None:
        self.topology = bind_serdes(topology, transport.url)  # registry serdes learn their topics
        unknown = sorted((state_repairs.reseed | state_repairs.reset) - set(topology.stores))
        if unknown:
            raise ConfigError(f"app {config.app_id} has no store named {', '.join(unknown)} (its stores: "
                              f"{', '.join(sorted(topology.stores)) or 'none'})")
        self.state_repairs = state_repairs
        """The operator's choice for stores whose checkpoint is past their changelog's end."""
        self.config = config
        self.app_id = config.app_id
        self.transport = transport
        self.until_idle = until_idle
        self.guarantee = config.processing_guarantee
        self.exactly_once = config.exactly_once
        self.commit_interval = config.effective_commit_interval.total_seconds()
        timeout_ms = transport.transaction_timeout_ms
        if self.exactly_once and timeout_ms is not None and timeout_ms <= self.commit_interval * 1000:
            raise ConfigError(
                f"transaction_timeout_ms ({timeout_ms}) must be larger than the commit interval "
                f"({self.commit_interval * 1000:g} ms): the broker would abort each transaction before the "
                "worker commits it")
        # A processing round normally ends before the commit (checked between rounds).
        # One that runs much longer is cut short so a transaction never nears its
        # timeout: at half of it (exactly_once with a broker timeout), else after
        # ROUND_LIMIT, and never before the commit interval.
        if self.exactly_once and timeout_ms is not None:
            self._round_budget = max(self.commit_interval, timeout_ms / 2000)
        else:
            self._round_budget = max(self.commit_interval, ROUND_LIMIT)
        self._round_deadline = math.inf
        """When a processing round stops early (monotonic s), so the loop can commit."""
        self._slices: Dict[int, int] = {}
        """Per sub-topology: records processed in one step, sized so a step takes at most
        about MAX_BLOCKING (SLICE at most). Each sub-topology has its own cost per record,
        so a fast one never makes a slow one's steps long; an unmeasured one starts at a
        single record, whatever it costs, and doubles while steps stay short."""
        self.standby_replicas = config.num_standby_replicas
        self._explicit_state_dir = config.state_dir
        self._state: Optional[StateDirectory] = None
        self.tasks: Dict[str, Task] = {}
        self._task_of_partition: Dict[TopicPartition, Task] = {}
        self._inputs: Dict[str, TaskInputs] = {}
        """Per task: fetched records not processed yet (a task with several inputs may wait for one)."""
        self._max_task_idle = config.max_task_idle.total_seconds()
        self._stopping = False
        self._waiting_logged = False
        self._suspended = False
        self._assigned_once = False
        self._assigned_tasks: FrozenSet[str] = frozenset()
        """The active tasks of the last assignment, started or not."""
        self.totals = TaskMetrics()
        self.restored: Dict[str, Dict[str, int]] = {}
        """Records replayed per task and store at start (or takeover)."""
        self._consumer: Optional[Consumer] = None
        self._restore_consumer: Optional[Consumer] = None
        self._producers: Dict[str, Producer] = {}
        self._per_task_producers = self.exactly_once and transport.transactional_id_per_task()
        self._membership: Optional[Membership] = None
        self._standbys: Optional[StandbyTasks] = None
        self._globals: Optional[GlobalTables] = None
        self._changelog_ends: Dict[TopicPartition, int] = {}
        self._commit_deferred = False
        """The last commit's input offsets were refused by a rebalancing group."""
        self._retired_producers: List[Producer] = []
        """Producers of closed tasks, shut down at the next opportunity (closing is async)."""
        self._pauses = Pauses()
        self._next_purge = time.monotonic() + PURGE_INTERVAL
        self._note_too_long_logged = False
        self._wrote_own_input = False
        """The last commit flushed records (not markers) to an input partition of this worker's tasks."""
        self._housekeeping = False
        """This worker started the transport's housekeeping (and stops it when it ends)."""
        self._announced: Dict[str, tuple] = {}
        """Per task: the progress its last markers announced (see _send_markers)."""
        self.observations = WorkerObservations()
        """The loop's vital signs, commits and restores (read by the operations endpoints)."""
        self.endpoint: Optional[str] = None
        """This worker's HTTP address (``http://host:port``), advertised to the group so
        other workers can forward interactive queries to it; set before :meth:`run`."""

    def stop(self) -> None:
        """Ask the loop to commit and exit (safe to call from a signal handler)."""
        self._stopping = True

    # -- what operations tools read (HTTP endpoints, metrics); never mutated by them ----
    @property
    def rebalancing(self) -> bool:
        """Between a revocation's commit and the group's new assignment."""
        return self._suspended

    @property
    def assigned(self) -> bool:
        """The group has given this worker an assignment at least once."""
        return self._assigned_once

    def task_states(self) -> Dict[str, str]:
        """Every task this worker holds: ``restoring``, ``running`` or ``standby``."""
        states = {tid: "restoring" if tid in self.observations.restoring else "running" for tid in self.tasks}
        if self._standbys is not None:
            for tid in self._standbys.task_ids:
                states.setdefault(tid, "standby")
        return states

    def task_stores(self, task_id: str, *, standby: bool = False) -> Optional[Dict[str, Any]]:
        """The stores (by name) of active task ``task_id`` on this worker, or of its
        standby copy with ``standby``; None when this worker holds neither."""
        if standby:
            stores = self._standbys.stores(task_id) if self._standbys is not None else None
            return None if stores is None else stores.by_name
        task = self.tasks.get(task_id)
        return None if task is None else task.store_set.by_name

    def endpoint_of(self, task_id: str) -> Optional[str]:
        """The HTTP address of the worker running ``task_id`` as the group knows it (None
        when nobody runs it or its worker serves no HTTP)."""
        if task_id in self.tasks:
            return self.endpoint
        return self._membership.endpoint_of(task_id) if self._membership is not None else None

    def standby_endpoints_of(self, task_id: str) -> tuple:
        """The HTTP addresses of the workers keeping a standby copy of ``task_id``."""
        return self._membership.standby_endpoints_of(task_id) if self._membership is not None else ()

    def input_positions(self) -> Dict[TopicPartition, Optional[int]]:
        """Per input partition of the running tasks: the next offset to process (None:
        nothing processed or committed yet, so the start of the log)."""
        return {tp: task.positions.get(tp) for task in self.tasks.values() for tp in task.input_partitions}

    # -- life cycle -----------------------------------------------------------------
    async def run(self) -> None:
        config, topology, transport = self.config, self.topology, self.transport
        app_id = self.app_id
        self.partitions = prepare_topics(topology, transport.admin, with_dlq=config.uses_dead_letters)
        self._writers = repartition_writers(topology, self.partitions)
        self._marker_topics = {sub.id: written_repartition_topics(topology, sub.id)
                               for sub in topology.sub_topologies}
        """Per sub-topology: the repartition topics its tasks announce progress to."""
        self._plan_tasks = {}
        for sub_id, partition in tasks_of(topology, self.partitions):
            sub = topology.sub_topologies[sub_id]
            self._plan_tasks[task_id(sub_id, partition)] = tuple(
                TopicPartition(topic, partition) for topic in sorted(topology.source_nodes(sub))
                if partition < self.partitions[topic])
        try:  # from here on, every client and the state-dir lock are released on failure
            self._membership = transport.membership(app_id, GroupPlan(
                tasks=self._plan_tasks, standby_replicas=self.standby_replicas,
                stateful=frozenset(t for t in self._plan_tasks
                                   if topology.sub_topologies[parse_task_id(t)[0]].store_names),
                running=lambda: frozenset(self.tasks), local_state=self._local_state, endpoint=self.endpoint))
            self._state = claim_state_directory(
                self._explicit_state_dir or default_state_dir(transport, app_id),
                exclusive=self._membership.group_managed, explicit=self._explicit_state_dir is not None)
            self.settings = TaskSettings(
                deserialization_error_handler=config.deserialization_error_handler,
                processing_error_handler=config.processing_error_handler,
                store_backend=config.store_backend, state_dir=self._state.path, caching=config.caching,
                close_idle_windows_after_ms=config.close_idle_windows_after_ms)
            self._consumer = with_external_sources(
                self._membership.consumer() or transport.consumer(app_id, read_committed=True), topology)
            self._restore_consumer = _reader(transport, app_id)
            self._standbys = StandbyTasks(topology, self.settings, _reader(transport, app_id), transport.admin)
            self._globals = GlobalTables(topology, backend=config.store_backend, state_dir=self._state.path,
                                         consumer=_reader(transport, app_id) if topology.global_tables else None)
            if self.exactly_once and not self._per_task_producers:
                self._producers[SHARED] = transport.producer(transactional_id=f"{app_id}-{uuid.uuid4().hex[:12]}")
            elif not self.exactly_once:
                self._producers[SHARED] = transport.producer()
            transport.start_housekeeping()
            self._housekeeping = True
            log.info("worker for app %s on %s: %d task(s) in the group, %s, state in %s", app_id,
                     transport.url, len(self._plan_tasks), self.guarantee, self._state.path)
            if SHARED in self._producers and self.exactly_once:
                await self._producers[SHARED].begin_transaction()
            await self._globals.load(transport.admin, self.partitions)  # before any task runs
            await self._loop()
            await self._final_commit()
            while self.until_idle is not None and not self._stopping and self._wrote_own_input:
                # The final commit flushed caches into topics this worker reads (a
                # repartition topic between two of its tasks): process those too.
                log.info("the final commit wrote records this worker reads: processing them before stopping")
                await self._loop()
                await self._final_commit()
        except BaseException as exc:
            if not isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt)):
                self.observations.failure = f"{type(exc).__name__}: {exc}"
            await self._abandon()
            self.observations.stopped = True
            raise
        await self._shutdown()
        self.observations.stopped = True

    async def _loop(self) -> None:
        """Until stopped: follow the membership, fetch, process, send outputs, commit on time."""
        now = time.monotonic()
        next_commit = now + self.commit_interval
        self._round_deadline = now + self._round_budget
        self._progress = _Progress(now)
        idle_since: Optional[float] = now  # start of the current run of empty fetches
        next_topic_check = now + TOPIC_CHECK_INTERVAL
        cache_limit = self.config.cache_max_bytes
        assert self._membership is not None
        waits_for_group = self._membership.group_managed  # not idle before the group assigned tasks
        next_markers = now + MARKER_INTERVAL
        observations = self.observations
        while not self._stopping:
            observations.tick()
            if await self._rebalance():
                idle_since = time.monotonic()  # new work restarts the --until-idle clock
            # Idle means fetches found nothing for that long (slow commits do not count), with
            # every assignment received applied (checked right after _rebalance for that).
            now = time.monotonic()
            if self.until_idle is not None and idle_since is not None and now - idle_since >= self.until_idle \
                    and not self._suspended and not (waits_for_group and not self._assigned_once):
                log.info("no input for %.1f s: stopping (--until-idle)", self.until_idle)
                return
            fetch_started = time.monotonic()
            assert self._globals is not None
            await self._globals.update()
            processed = await self._process_available()
            if processed is None or processed or self._holding_back():
                idle_since = None  # a pass that skipped the fetch (rebalancing) breaks a run of empty ones
            elif idle_since is None:
                idle_since = fetch_started
            for task in self.tasks.values():
                task.punctuate_wall_clock()
            if time.monotonic() >= next_markers:
                self._send_markers()
                next_markers = time.monotonic() + MARKER_INTERVAL
            await self._send_outputs()
            assert self._standbys is not None
            await self._standbys.tail()
            now = time.monotonic()
            buffered = sum(task.store_set.pending_bytes for task in self.tasks.values())
            # Suspended (between a revocation's commit and the new assignment): nothing was
            # processed since, and the group may already have moved the partitions.
            if (now >= next_commit or buffered > cache_limit) and not self._suspended:
                await self._commit()
                observations.committed(time.monotonic() - now,
                                       {tid: task.metrics.records_processed for tid, task in self.tasks.items()})
                next_commit = time.monotonic() + self.commit_interval
                self._round_deadline = time.monotonic() + self._round_budget
            self._progress.maybe_log(now, self.tasks)
            if now >= next_topic_check:
                self._check_topics()
                next_topic_check = now + TOPIC_CHECK_INTERVAL

    def _check_topics(self) -> None:
        """Fail clearly when a topic of the app was deleted (or recreated with another
        partition count) under the running worker, instead of waiting for input forever."""
        counts = self.transport.admin.partition_counts(list(self.partitions))
        for topic, partitions in self.partitions.items():
            actual = counts.get(topic)
            if actual is None:
                raise StreamkitError(f"topic '{topic}' was deleted while app {self.app_id} ran on "
                                     f"{self.transport.url}; recreate it with {partitions} partition(s) "
                                     "and restart the workers")
            if actual != partitions:
                raise StreamkitError(f"topic '{topic}' now has {actual} partition(s) but app "
                                     f"{self.app_id} started with {partitions} (deleted and recreated "
                                     "while the app ran?); keys would land on the wrong tasks")

    async def _process_available(self) -> Optional[bool]:
        """Fetch one round of batches and run each through its task; False if there was none,
        None if the group is rebalancing and nothing was fetched."""
        assert self._consumer is not None and self._membership is not None
        if self._suspended:
            await asyncio.sleep(FETCH_WAIT)
            return None
        if not self.tasks and not self._membership.group_managed:
            await asyncio.sleep(FETCH_WAIT)
            return False
        membership = self._membership
        if membership.revocation_pending():
            return None  # a rebalance waits for this worker's commit: the loop answers it first
        # A group member keeps fetching even without tasks: that is how it stays in the group.
        batches = await self._consumer.fetch(FETCH_WAIT)
        self._account_lost()
        lookup = self._task_of_partition
        now = time.monotonic()
        for batch in batches:
            tp = TopicPartition(batch.topic, batch.partition)
            task = lookup.get(tp)
            if task is not None:
                self._inputs[task.id].add(tp, batch.records, now)
        has_unread = self._consumer.has_unread
        limit = frontier(self._inputs.values(), has_unread)
        lanes = [inputs.release(now, self._max_task_idle, has_unread, limit if inputs.sources_only else None)
                 for inputs in self._inputs.values()]
        processed = False
        last_yield = time.monotonic()
        runs = collections.deque(interleave_lanes(lanes, SLICE))
        slices = self._slices
        while runs:
            tp, records = runs.popleft()
            task = lookup[tp]
            sub_id = task.sub_topology.id
            size = slices.get(sub_id, 1)
            if len(records) > size:  # a slow topology: look at the clock more often
                runs.appendleft((tp, records[size:]))
                records = records[:size]
            started = time.monotonic()
            task.process(tp.topic, records)
            took = time.monotonic() - started
            task.metrics.processing_seconds += took
            if took > MAX_BLOCKING:
                slices[sub_id] = max(1, int(len(records) * MAX_BLOCKING / took))
            elif size < SLICE and took < MAX_BLOCKING / 4:
                slices[sub_id] = min(SLICE, size * 2)
            processed = True
            if time.monotonic() - last_yield > MAX_BLOCKING:
                # Let the network clients run (group heartbeats, fetches): a slow
                # topology must not get this worker thrown out of its group.
                await asyncio.sleep(0)
                last_yield = time.monotonic()
                if last_yield >= self._round_deadline or membership.revocation_pending():
                    # The commit is due, or a rebalance waits for this worker to commit
                    # (it must join the new generation within the rebalance timeout,
                    # whatever a record costs): the rest of the round waits.
                    self._put_back(runs)
        for tid, inputs in self._inputs.items():
            if inputs.merges:  # processed out of offset order: resume at the first record not processed
                self.tasks[tid].positions.update(inputs.merge_positions())
        pause, resume = self._pauses.update(self._inputs.values())
        for tp in pause:
            self._consumer.unassign([tp])
        for tp, offset in resume.items():
            self._consumer.assign([tp], {tp: offset})
        return processed

    def _put_back(self, runs: "collections.deque") -> None:
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

    def _holding_back(self) -> bool:
        """Whether a task holds records that a writer's progress will release (not idle)."""
        now = time.monotonic()
        return any(merge.held and merge.busy(now, self._max_task_idle)
                   for inputs in self._inputs.values() for merge in inputs.merges.values())

    def _account_lost(self) -> None:
        """Records deleted before they were read: counted and logged for a source topic;
        for an internal topic (only this app reads it, and purges it below its commits) a
        bug, which stops the worker."""
        assert self._consumer is not None
        for tp, first, end in self._consumer.take_lost():
            task = self._task_of_partition.get(tp)
            spec = self.topology.topics.get(tp.topic)
            if spec is not None and spec.internal:
                raise StreamkitError(
                    f"internal topic {tp.topic}[{tp.partition}]: offsets {first} to {end - 1} were deleted "
                    f"before app {self.app_id} read them; its results would be wrong. Reset the app "
                    "(delete its group, internal topics and state) and reprocess")
            log.warning("%s[%d]: %d record(s) at offsets %d to %d were deleted (retention, compaction or an "
                        "offset reset) before task %s read them: they are lost to this app", tp.topic,
                        tp.partition, end - first, first, end - 1, task.id if task is not None else "?")
            if task is not None:
                task.metrics.records_lost_to_retention += end - first

    def _send_markers(self) -> None:
        """Each task that writes repartition topics announces its progress to every partition
        of them when it changed: its stream time, and whether it is idle (see .progress)."""
        assert self._consumer is not None
        now = time.monotonic()
        has_unread = self._consumer.has_unread
        for tid, task in self.tasks.items():
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
    # -- membership -----------------------------------------------------------------
    async def _rebalance(self) -> bool:
        """Follow the group: commit when a rebalance revokes tasks, then apply a new
        assignment (close, restore, start tasks). True when tasks were started."""
        membership = self._membership
        assert membership is not None
        if membership.revocation_pending():
            if not self._suspended:
                await self._commit()
                self._suspended = True  # process nothing until the new assignment
                log.info("group rebalancing: committed %d task(s), waiting for the new assignment",
                         len(self.tasks))
            membership.revocation_committed()
        assignment = await membership.poll()
        if assignment is None:
            if not self.tasks and not self._waiting_logged and not membership.group_managed:
                log.warning("all %d task(s) of app %s are owned by other workers (%s); waiting",
                            len(self._plan_tasks), self.app_id, self._owners())
                self._waiting_logged = True
            return False
        if assignment.error:
            raise StreamkitError(f"app {self.app_id}: {assignment.error}")
        started = await self._apply_assignment(assignment)
        self._suspended = False
        self._assigned_once = True
        return started > 0

    async def _apply_assignment(self, assignment: TaskAssignment) -> int:
        assert self._consumer is not None and self._standbys is not None
        for tid in sorted(set(self.tasks) - assignment.active):
            self._close_task(tid, dirty=False)
        if self._membership is not None:
            # Tasks the last assignment gave this worker that it never started (its start
            # loop yielded to a rebalance) and that are no longer assigned: nothing closes
            # them, so hand them back here, or they stay held while this worker lives.
            for tid in sorted(self._assigned_tasks - assignment.active - set(self.tasks)):
                self._membership.release(tid)
        self._assigned_tasks = frozenset(assignment.active)
        # The group moved tasks: a reader of this worker's repartition output may restart on
        # another worker from its last commit, past this worker's last progress marker, and
        # would wait for that writer forever. Announce every task's progress again.
        self._announced.clear()
        new = [tid for tid in sorted(assignment.active, key=parse_task_id) if tid not in self.tasks]
        # A standby promoted to active, or dropped, closes first: its store files get reopened.
        self._standbys.keep(assignment.standby - assignment.active)
        if new:
            # A dead owner's last transaction decides what its tasks' changelogs and
            # offsets hold: settle it before restoring or reading committed offsets.
            resolved = self.transport.resolve_abandoned_transactions()
            if resolved:
                log.info("settled %d transaction(s) left by a stopped worker", resolved)
        for tid, task in self.tasks.items():  # kept across a rebalance: continue where they were
            inputs = self._inputs[tid]
            task.positions.update(inputs.merge_positions())
            inputs.clear()  # re-read from the processed positions
            self._pauses.forget(task.input_partitions)
            # From what the stores reflect: a rebuild under way has not reached task.positions.
            self._consumer.assign(task.input_partitions, task.store_positions)
        for tid in new:
            if self._membership is not None and self._membership.revocation_pending():
                break  # the group is rebalancing again: answer it first; the rest waits
            await self._start_task(tid)
        await self._standbys.open(assignment.standby - assignment.active)
        return len(new)

    async def _start_task(self, tid: str) -> None:
        assert self._consumer is not None and self._restore_consumer is not None
        sub_id, partition = parse_task_id(tid)
        sub = self.topology.sub_topologies[sub_id]
        if self._per_task_producers:
            # Fences any older producer of this task (a zombie owner) and aborts its open
            # transaction, before the changelogs are restored and offsets read.
            producer = self.transport.producer(transactional_id=f"{self.app_id}-{sub_id}-{partition}")
            self._producers[tid] = producer  # registered first: closed at shutdown even if this fails
            await producer.begin_transaction()
        task = create_task(self.topology, sub, partition, partitions=self.partitions,
                           collector=RecordCollector(), wall_clock=lambda: int(time.time() * 1000),
                           settings=self.settings, global_stores=self._globals.stores if self._globals else None)
        self.tasks[tid] = task
        inputs = task.input_partitions
        positions = await self._consumer.committed(inputs)
        notes = {tp: CommitNote.decode(text, positions.get(tp, 0))
                 for tp, text in (await self._consumer.committed_metadata(inputs)).items()}
        # Stream time as committed: a writer's stream time must never go back (see .progress).
        committed_time = max((note.stream_time for note in notes.values()), default=-1)
        if committed_time > task.context.stream_time:
            task.context.stream_time = committed_time
        lost = task.store_set.lost_unlogged
        recorded = task.store_set.unlogged_positions()
        ahead = _unlogged_ahead(recorded, positions)
        behind = _unlogged_behind(recorded, positions)
        if ahead or ((lost or behind) and positions):
            replay_from = None
            if behind and not lost and not ahead and not task.store_set.has_changelogged_stores \
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
            observations = self.observations
            self.restored[tid] = await restore_task_stores(
                tid, task.store_set, self._restore_consumer, self.transport.admin,
                progress=lambda done, total: observations.restore_progress(tid, done, total),
                repairs=self.state_repairs, open_producer=self.transport.producer)
            observations.restore_done(tid, sum(self.restored[tid].values()))
        self._consumer.assign(inputs, positions)
        task.positions.update(positions)  # where to resume if the group moves it before it reads
        for tp in inputs:
            self._task_of_partition[tp] = task
        writers = {tp: self._writers[tp.topic] for tp in inputs if tp.topic in self._writers}
        self._inputs[tid] = TaskInputs(inputs, writers, {tp: notes[tp].cursor for tp in writers if tp in notes})
        log.info("task %s started at %s", tid,
                 ", ".join(f"{tp.topic}[{tp.partition}]@{positions.get(tp, 'earliest')}" for tp in inputs))

    def _close_task(self, tid: str, *, dirty: bool) -> None:
        """Stop running ``tid``. Dirty: its uncommitted output and store writes are dropped
        (another worker owns it now and redoes that work from the last commit)."""
        task = self.tasks.pop(tid)
        self.totals.add(task.metrics)
        if dirty:
            dropped = task.collector.discard()
            task.store_set.discard()
            log.warning("task %s closed dirty (it moved to another worker, or its producer was fenced): "
                        "dropped its uncommitted work (%d output record(s)); it resumes from its last "
                        "commit wherever the group runs it next", tid, dropped)
        if self._consumer is not None:
            self._consumer.unassign(task.input_partitions)
        for tp in task.input_partitions:
            self._task_of_partition.pop(tp, None)
        self._inputs.pop(tid, None)
        self._announced.pop(tid, None)
        self._pauses.forget(task.input_partitions)
        task.close_sinks(dirty=dirty)
        task.store_set.close()
        producer = self._producers.pop(tid, None) if self._per_task_producers else None
        if producer is not None:
            self._retired_producers.append(producer)
        if self._membership is not None:
            self._membership.release(tid)

    def _local_state(self) -> FrozenSet[str]:
        tasks = set(self.tasks)
        if self._standbys is not None:
            tasks |= self._standbys.task_ids
        if self._state is not None:
            tasks |= self._state.task_ids()
        return frozenset(tasks)

    def _owners(self) -> str:
        assert self._membership is not None
        owners = {self._membership.owner_of(t) for t in self._plan_tasks} - {None}
        return "; ".join(sorted(owners)) or "owners unknown"  # type: ignore[arg-type]

    # -- output and commits -----------------------------------------------------------
    async def _send_outputs(self) -> None:
        """Hand every task's buffered output to its producer. A fenced task producer means
        the task moved to another worker: the task is closed dirty."""
        if self._per_task_producers:
            for tid, task in list(self.tasks.items()):
                batches = task.collector.drain()
                if not batches:
                    continue
                try:
                    self._changelog_ends.update(await self._producers[tid].send(batches))
                except TaskMigratedError as exc:
                    log.warning("task %s: %s", tid, exc)
                    self._close_task(tid, dirty=True)
        else:
            batches = merge_by_timestamp(task.collector.drain() for task in self.tasks.values())
            if batches:
                self._changelog_ends.update(await self._producers[SHARED].send(batches))
        if self._retired_producers:
            retired, self._retired_producers = self._retired_producers, []
            for producer in retired:
                try:
                    await producer.aclose()
                except Exception as exc:  # noqa: BLE001 - its task is gone; the next owner fenced it
                    log.warning("closing the producer of a closed task failed: %s", exc)

    async def _final_commit(self) -> None:
        """Commit before stopping. If the group is rebalancing and refuses the offsets,
        wait (bounded) for the rebalance to ask for them, so a clean stop redoes nothing."""
        await self._commit()
        deadline = time.monotonic() + FINAL_COMMIT_WAIT
        membership = self._membership
        while self._commit_deferred and membership is not None and time.monotonic() < deadline:
            if membership.revocation_pending():
                await self._commit()
                membership.revocation_committed()
                if not self._commit_deferred:
                    return
            await asyncio.sleep(0.1)
            await self._commit()
        if self._commit_deferred:
            log.warning("stopping with input offsets uncommitted: the group kept rebalancing for %.0f s; "
                        "the next owner reprocesses them (at_least_once)", FINAL_COMMIT_WAIT)

    async def _abandon(self) -> None:
        """After a failure: drop uncommitted output and store writes, abort open
        transactions, commit nothing, free the tasks."""
        dropped = 0
        for task in self.tasks.values():
            dropped += task.collector.discard()
            dropped += sum(writer.discard() for writer in task.sinks.values())
            task.store_set.discard()
        if dropped:
            log.info("dropped %d uncommitted output record(s); they will be produced again on restart", dropped)
        if self.exactly_once:
            for producer in self._producers.values():
                try:
                    await producer.abort_transaction()
                except Exception as exc:  # noqa: BLE001 - the next owner aborts it anyway
                    log.warning("could not abort an open transaction (%s); it is aborted on the next start", exc)
        await self._shutdown()

    async def _shutdown(self) -> None:
        for tid in list(self.tasks):
            self._close_task(tid, dirty=False)
        if self._standbys is not None:
            self._standbys.close()
        clients = [self._consumer, self._restore_consumer, *self._producers.values(), *self._retired_producers]
        if self._standbys is not None:
            clients.append(self._standbys.reader)
        if self._globals is not None:
            clients.append(self._globals.consumer)
            self._globals.close()
        self._producers.clear()
        self._retired_producers = []
        for client in clients:
            if client is not None:
                try:
                    await client.aclose()
                except Exception as exc:  # noqa: BLE001 - shutting down regardless
                    log.debug("closing %s: %s", type(client).__name__, exc)
        self._consumer = self._restore_consumer = None
        if self._housekeeping:
            self._housekeeping = False
            self.transport.stop_housekeeping()
        try:
            if self._membership is not None:
                await self._membership.aclose()
        finally:
            if self._state is not None:
                self._state.release()


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


def _reader(transport: Transport, app_id: str) -> Consumer:
    """A consumer outside the app's group, for restore and standbys."""
    reader = getattr(transport, "reader", None)
    return reader(read_committed=True) if reader is not None else \
        transport.consumer(f"{app_id}-restore", read_committed=True)


def default_state_dir(transport: Transport, app_id: str) -> str:
    """``<embedded dir>/state/<app-id>``, or ``.streamkit/state/<app-id>`` for other brokers."""
    base = getattr(transport, "directory", None) or ".streamkit"
    return os.path.join(base, "state", app_id)


def tune_gc_for_streaming() -> None:
    """Make the cyclic GC run less often in a worker process.

    Every record allocates short-lived containers (tuples, decoded dicts) that die
    without cycles; with the default thresholds the collector runs every 700 of
    them and costs 10-20% of throughput. Long-lived objects made at start-up are
    frozen out of collections altogether. Process-wide, so only the worker entry
    point (``streamkit worker``, ``App.run``) calls it, not the library.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


class WorkerCompanion(Protocol):
    """Something that runs beside a worker in its event loop (the HTTP endpoints):
    started before the worker joins its group, stopped after it has stopped."""

    async def start(self, worker: "Worker") -> None: ...

    async def stop(self) -> None: ...


def run_worker(topology: Topology, config: AppConfig, *, broker: str, until_idle: Optional[float] = None,
               config_file: Optional[str] = None, companions: Sequence[WorkerCompanion] = (),
               on_start: Optional[Callable[["Worker", asyncio.AbstractEventLoop], None]] = None,
               state_repairs: StateRepairs = StateRepairs()) -> TaskMetrics:
    """Run a worker in this process until SIGINT/SIGTERM, ``until_idle``, or an error.
    ``companions`` run beside it; ``on_start(worker, loop)`` is called once both exist."""
    tune_gc_for_streaming()
    transport = open_transport(broker, kafka_config=config.kafka_config, config_file=config_file)
    worker = Worker(topology, config, transport, until_idle=until_idle, state_repairs=state_repairs)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, worker.stop)
            except (NotImplementedError, RuntimeError):  # not the main thread
                pass
        started: List[WorkerCompanion] = []
        try:
            for companion in companions:
                await companion.start(worker)
                started.append(companion)
            if on_start is not None:
                on_start(worker, loop)
            await worker.run()
        finally:
            for companion in reversed(started):
                try:
                    await companion.stop()
                except Exception as exc:  # noqa: BLE001 - the worker's own outcome matters more
                    log.warning("stopping %s failed: %s", type(companion).__name__, exc)

    started = time.monotonic()
    try:
        asyncio.run(main())
    finally:
        transport.close()
    elapsed = time.monotonic() - started
    totals = worker.totals
    log.info("worker stopped after %.1f s: %s", elapsed, totals.as_dict())
    return totals


class _Progress:
    """Logs the processing rate every PROGRESS_INTERVAL seconds."""

    def __init__(self, now: float) -> None:
        self._next = now + PROGRESS_INTERVAL
        self._last_total = 0

    def maybe_log(self, now: float, tasks: Dict[str, Task]) -> None:
        if now < self._next:
            return
        total = sum(task.metrics.records_processed for task in tasks.values())
        done = max(total - self._last_total, 0)
        log.info("%d record(s) in the last %.0f s (%.0f/s); tasks: %s", done, PROGRESS_INTERVAL,
                 done / PROGRESS_INTERVAL, ", ".join(sorted(tasks)) or "none")
        self._last_total = total
        self._next = now + PROGRESS_INTERVAL
