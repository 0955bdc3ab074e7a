"""The worker's life cycle and processing loop: it opens the clients, the tasks
(:class:`~streamkit.runtime.worker.tasks.TaskManager`) and the committer of the app's
guarantee (:mod:`~streamkit.runtime.worker.committer`), then fetches, processes, sends
and commits on time until stopped, idle, or failed.

One asyncio loop; per-record work happens in each task's synchronous loop over a
fetched batch, so the event loop is paid per batch, not per record. Which tasks the
worker runs is decided by the transport's :class:`Membership`: on the embedded log it
takes tasks nobody holds; on Kafka the consumer group assigns them and may move them
in a rebalance (committed first, see :meth:`Worker._rebalance`).
"""
from __future__ import annotations

import asyncio
import collections
import logging
import math
import os
import time
from typing import Any, Dict, FrozenSet, List, Mapping, Optional, Set, Tuple

from ...core.app_config import AppConfig
from ...core.names import parse_task_id, task_id
from ...core.records import TopicPartition
from ...errors import ConfigError, StreamkitError
from ...state.directory import StateDirectory, claim_state_directory
from ...state.restore import StateRepairs
from ...topology import Topology
from ...topology.passes import tasks_of
from ...topology.serde_binding import bind_serdes
from ...transport.base import Consumer, GroupPlan, Membership, Transport
from ..context.task_metrics import TaskMetrics
from ..ordering.record_order import interleave_lanes
from ..task.external_sources import with_external_sources
from ..task.factory import TaskSettings
from ..task.global_tables import GlobalTables
from ..task.task import Task
from .committer import Committer, committer_for
from .observations import WorkerObservations
from .standby import StandbyTasks
from .tasks import TaskManager
from .topics import AppTopics, prepare_topics

log = logging.getLogger("streamkit.runtime.worker")

FETCH_WAIT = 0.1  # s: longest a fetch waits for records
THROUGHPUT_LOG_INTERVAL = 30.0  # s between throughput log lines
SLICE = 1000  # records processed between looks at the clock
ROUND_LIMIT = 5.0  # s a processing round may run past the last commit (without a transaction timeout)
MAX_BLOCKING = 0.05  # s of processing before the event loop gets a turn
FINAL_COMMIT_WAIT = 30.0  # s a stopping worker waits for a rebalance to take its offsets
TOPIC_CHECK_INTERVAL = 5.0  # s between checks that the app's topics still exist as planned
MARKER_INTERVAL = 0.1  # s between progress markers of a task whose progress changed


class Worker:
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
        self._per_task_transactions = self.exactly_once and transport.transactional_id_per_task()
        """exactly_once with one transaction per task (Kafka), else one per worker."""
        self._round_deadline = math.inf
        """When a processing round stops early (monotonic s), so the loop can commit."""
        self._slices: Dict[int, int] = {}
        """Per sub-topology: records processed in one step, sized so a step takes at most
        about MAX_BLOCKING (SLICE at most). Each sub-topology has its own cost per record,
        so a fast one never makes a slow one's steps long; an unmeasured one starts at a
        single record, whatever it costs, and doubles while steps stay short."""
        self._stopping = False
        self._waiting_logged = False
        self._suspended = False
        self._assigned_once = False
        self.totals = TaskMetrics()
        """The counters of every task this worker closed (all of them once it stopped)."""
        self.task_manager: Optional[TaskManager] = None
        """The worker's tasks (set by :meth:`run`)."""
        self.committer: Optional[Committer] = None
        """How the worker commits, chosen by its guarantee (set by :meth:`run`)."""
        self._topics: Optional[AppTopics] = None
        self._state: Optional[StateDirectory] = None
        self._membership: Optional[Membership] = None
        self._consumer: Optional[Consumer] = None
        """The app's consumer: its tasks' inputs (in the group, where the transport has one)."""
        self._clients: List[Consumer] = []
        """The consumers this worker opened, closed when it stops."""
        self._commit_deferred = False
        """The last commit's input offsets were refused by a rebalancing group."""
        self._wrote_own_input = False
        """The last commit flushed records (not markers) to an input partition of this worker's tasks."""
        self._housekeeping = False
        """This worker started the transport's housekeeping (and stops it when it ends)."""
        self.observations = WorkerObservations()
        """The loop's vital signs, commits and restores (read by the operations endpoints)."""
        self.endpoint: Optional[str] = None
        """This worker's HTTP address (``http://host:port``), advertised to the group so
        other workers can forward interactive queries to it; set before :meth:`run`."""

    def stop(self) -> None:
        """Ask the loop to commit and exit (safe to call from a signal handler)."""
        self._stopping = True

    # -- what operations tools read (see WorkerView); never mutated by them ---------------
    @property
    def tasks(self) -> Mapping[str, Task]:
        """The running tasks by id."""
        return self.task_manager.active if self.task_manager is not None else {}

    @property
    def partitions(self) -> Mapping[str, int]:
        """The partition count of every topic of the app (empty until :meth:`run` resolved them)."""
        return self._topics.partitions if self._topics is not None else {}

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
        return self.task_manager.task_states() if self.task_manager is not None else {}

    def task_stores(self, task_id: str, *, standby: bool = False) -> Optional[Dict[str, Any]]:
        """The stores (by name) of active task ``task_id`` on this worker, or of its
        standby copy with ``standby``; None when this worker holds neither."""
        return self.task_manager.task_stores(task_id, standby=standby) if self.task_manager is not None else None

    def endpoint_of(self, task_id: str) -> Optional[str]:
        """The HTTP address of the worker running ``task_id`` as the group knows it (None
        when nobody runs it or its worker serves no HTTP)."""
        if task_id in self.tasks:
            return self.endpoint
        return self._membership.endpoint_of(task_id) if self._membership is not None else None

    def standby_endpoints_of(self, task_id: str) -> Tuple[str, ...]:
        """The HTTP addresses of the workers keeping a standby copy of ``task_id``."""
        return tuple(self._membership.standby_endpoints_of(task_id)) if self._membership is not None else ()

    def input_positions(self) -> Dict[TopicPartition, Optional[int]]:
        """Per input partition of the running tasks: the next offset to process (None:
        nothing processed or committed yet, so the start of the log)."""
        return self.task_manager.input_positions() if self.task_manager is not None else {}

    # -- life cycle -----------------------------------------------------------------
    async def run(self) -> None:
        """Run until stopped, idle (``until_idle``) or failed; on failure nothing more is
        committed and every client and the state directory are released."""
        config, topology, transport = self.config, self.topology, self.transport
        app_id = self.app_id
        partitions = prepare_topics(topology, transport.admin, with_dlq=config.uses_dead_letters)
        self._topics = AppTopics(app_id, transport, partitions)
        plan: Dict[str, Tuple[TopicPartition, ...]] = {}
        for sub_id, partition in tasks_of(topology, partitions):
            sub = topology.sub_topologies[sub_id]
            plan[task_id(sub_id, partition)] = tuple(
                TopicPartition(topic, partition) for topic in sorted(topology.source_nodes(sub))
                if partition < partitions[topic])
        explicit_state_dir = config.state_dir
        try:  # from here on, every client and the state-dir lock are released on failure
            self._membership = transport.membership(app_id, GroupPlan(
                tasks=plan, standby_replicas=config.num_standby_replicas,
                stateful=frozenset(t for t in plan if topology.sub_topologies[parse_task_id(t)[0]].store_names),
                running=lambda: frozenset(self.tasks), local_state=self._local_state, endpoint=self.endpoint))
            self._state = claim_state_directory(
                explicit_state_dir or default_state_dir(transport, app_id),
                exclusive=self._membership.group_managed, explicit=explicit_state_dir is not None)
            settings = TaskSettings(
                deserialization_error_handler=config.deserialization_error_handler,
                processing_error_handler=config.processing_error_handler,
                store_backend=config.store_backend, state_dir=self._state.path, caching=config.caching,
                close_idle_windows_after_ms=config.close_idle_windows_after_ms)
            consumer = with_external_sources(
                self._membership.consumer() or transport.consumer(app_id, read_committed=True), topology)
            self._consumer = consumer
            self._clients.append(consumer)
            restore_consumer = self._reader()
            standbys = StandbyTasks(topology, settings, self._reader(), transport.admin)
            global_tables = GlobalTables(topology, backend=config.store_backend, state_dir=self._state.path,
                                         consumer=self._reader() if topology.global_tables else None)
            self.committer = committer_for(app_id, transport, consumer, exactly_once=self.exactly_once,
                                           per_task_transactions=self._per_task_transactions,
                                           repartition_topics=frozenset(topology.repartition_topics),
                                           topics=self._topics)
            self.task_manager = TaskManager(
                topology, transport, partitions=partitions, plan=plan, settings=settings,
                membership=self._membership, consumer=consumer, restore_consumer=restore_consumer,
                standbys=standbys, global_tables=global_tables, producers=self.committer,
                observations=self.observations, totals=self.totals, state_repairs=self.state_repairs,
                max_task_idle=config.max_task_idle.total_seconds())
            transport.start_housekeeping()
            self._housekeeping = True
            log.info("worker for app %s on %s: %d task(s) in the group, %s, state in %s", app_id,
                     transport.url, len(plan), config.processing_guarantee, self._state.path)
            await self.committer.start()
            await global_tables.load(transport.admin, partitions)  # before any task runs
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

    def _reader(self) -> Consumer:
        """A consumer outside the app's group, for restore, standbys and global tables."""
        reader = getattr(self.transport, "reader", None)
        client = reader(read_committed=True) if reader is not None else \
            self.transport.consumer(f"{self.app_id}-restore", read_committed=True)
        self._clients.append(client)
        return client

    async def _loop(self) -> None:
        """Until stopped: follow the membership, fetch, process, send outputs, commit on time."""
        tasks, topics = self.task_manager, self._topics
        assert tasks is not None and topics is not None and self._membership is not None
        now = time.monotonic()
        next_commit = now + self.commit_interval
        self._round_deadline = now + self._round_budget
        throughput = _ThroughputLog(now)
        idle_since: Optional[float] = now  # start of the current run of empty fetches
        next_topic_check = now + TOPIC_CHECK_INTERVAL
        cache_limit = self.config.cache_max_bytes
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
            await tasks.global_tables.update()
            processed = await self._process_available()
            if processed is None or processed or tasks.holding_back():
                idle_since = None  # a pass that skipped the fetch (rebalancing) breaks a run of empty ones
            elif idle_since is None:
                idle_since = fetch_started
            for task in tasks.active.values():
                task.punctuate_wall_clock()
            if time.monotonic() >= next_markers:
                tasks.send_markers()
                next_markers = time.monotonic() + MARKER_INTERVAL
            await self._send_outputs()
            await tasks.standbys.tail()
            now = time.monotonic()
            buffered = sum(task.stores.pending_bytes for task in tasks.active.values())
            # Suspended (between a revocation's commit and the new assignment): nothing was
            # processed since, and the group may already have moved the partitions.
            if (now >= next_commit or buffered > cache_limit) and not self._suspended:
                await self._commit(overlap=True)
                observations.committed(time.monotonic() - now,
                                       {tid: task.metrics.records_processed for tid, task in tasks.active.items()})
                next_commit = time.monotonic() + self.commit_interval
                self._round_deadline = time.monotonic() + self._round_budget
            throughput.maybe_log(now, tasks.active)
            if now >= next_topic_check:
                topics.check()
                next_topic_check = now + TOPIC_CHECK_INTERVAL

    async def _process_available(self) -> Optional[bool]:
        """Fetch one round of batches and run each through its task; False if there was none,
        None if the group is rebalancing and nothing was fetched."""
        tasks, membership = self.task_manager, self._membership
        assert tasks is not None and membership is not None
        if self._suspended:
            await asyncio.sleep(FETCH_WAIT)
            return None
        if not tasks.active and not membership.group_managed:
            await asyncio.sleep(FETCH_WAIT)
            return False
        if membership.revocation_pending():
            return None  # a rebalance waits for this worker's commit: the loop answers it first
        # A group member keeps fetching even without tasks: that is how it stays in the group.
        assert self._consumer is not None
        batches = await self._consumer.fetch(FETCH_WAIT)
        tasks.account_lost(self.app_id)
        now = time.monotonic()
        tasks.receive(batches, now)
        processed = False
        last_yield = time.monotonic()
        runs = collections.deque(interleave_lanes(tasks.released(now), SLICE))
        slices = self._slices
        while runs:
            tp, records = runs.popleft()
            task = tasks.task_of(tp)
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
                    tasks.put_back(runs)
        tasks.end_round()
        return processed

    # -- membership -----------------------------------------------------------------
    async def _rebalance(self) -> bool:
        """Follow the group: commit when a rebalance revokes tasks, then hand a new
        assignment to the tasks (close, restore, start). True when tasks were started."""
        membership, tasks = self._membership, self.task_manager
        assert membership is not None and tasks is not None
        if membership.revocation_pending():
            if not self._suspended:
                await self._commit()
                self._suspended = True  # process nothing until the new assignment
                log.info("group rebalancing: committed %d task(s), waiting for the new assignment",
                         len(tasks.active))
            membership.revocation_committed()
        assignment = await membership.poll()
        if assignment is None:
            if not tasks.active and not self._waiting_logged and not membership.group_managed:
                log.warning("all %d task(s) of app %s are owned by other workers (%s); waiting",
                            len(tasks.plan), self.app_id, tasks.owners())
                self._waiting_logged = True
            return False
        if assignment.error:
            raise StreamkitError(f"app {self.app_id}: {assignment.error}")
        started = await tasks.apply(assignment)
        self._suspended = False
        self._assigned_once = True
        return started > 0

    def _local_state(self) -> FrozenSet[str]:
        held: Set[str] = self.task_manager.held() if self.task_manager is not None else set()
        if self._state is not None:
            held |= self._state.task_ids()
        return frozenset(held)

    # -- output and commits -----------------------------------------------------------
    async def _send_outputs(self) -> None:
        """Hand every task's buffered output to the committer's producers; a task found
        moved to another worker (its producer fenced) is closed dirty."""
        tasks, committer = self.task_manager, self.committer
        assert tasks is not None and committer is not None
        for tid in sorted(await committer.send(tasks.active)):
            tasks.close(tid, dirty=True)

    async def _commit(self, *, overlap: bool = False) -> None:
        """One commit of every task: step 1 by the tasks, the rest by the committer (see
        :meth:`Committer.commit`); tasks it found moved to another worker are closed
        dirty. With ``overlap`` (the loop's periodic commit) the committer may finish it
        in the background; the rebalance's and the final commit are complete when this
        returns. (The hook benchmarks time and tests hold up.)"""
        tasks, committer = self.task_manager, self.committer
        assert tasks is not None and committer is not None
        self._wrote_own_input = tasks.prepare_commit()
        outcome = await committer.commit(tasks, overlap=overlap)
        for tid in sorted(outcome.migrated):
            if tid in tasks.active:  # a background commit may report a task closed since
                tasks.close(tid, dirty=True)
        self._commit_deferred = outcome.deferred

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
        if self.task_manager is not None:
            dropped = self.task_manager.discard_uncommitted()
            if dropped:
                log.info("dropped %d uncommitted output record(s); they will be produced again on restart",
                         dropped)
        if self.committer is not None:
            await self.committer.abort()
        await self._shutdown()

    async def _shutdown(self) -> None:
        if self.task_manager is not None:
            self.task_manager.close_all()
        clients, self._clients = self._clients, []
        for client in clients:
            try:
                await client.aclose()
            except Exception as exc:  # noqa: BLE001 - shutting down regardless
                log.debug("closing %s: %s", type(client).__name__, exc)
        self._consumer = None
        if self.committer is not None:
            await self.committer.aclose()
        if self._housekeeping:
            self._housekeeping = False
            self.transport.stop_housekeeping()
        try:
            if self._membership is not None:
                await self._membership.aclose()
        finally:
            if self._state is not None:
                self._state.release()


def default_state_dir(transport: Transport, app_id: str) -> str:
    """``<embedded dir>/state/<app-id>``, or ``.streamkit/state/<app-id>`` for other brokers."""
    base = getattr(transport, "directory", None) or ".streamkit"
    return os.path.join(base, "state", app_id)


class _ThroughputLog:
    """Logs the processing rate every THROUGHPUT_LOG_INTERVAL seconds."""

    def __init__(self, now: float) -> None:
        self._next = now + THROUGHPUT_LOG_INTERVAL
        self._last_total = 0

    def maybe_log(self, now: float, tasks: Mapping[str, Task]) -> None:
        if now < self._next:
            return
        total = sum(task.metrics.records_processed for task in tasks.values())
        done = max(total - self._last_total, 0)
        log.info("%d record(s) in the last %.0f s (%.0f/s); tasks: %s", done, THROUGHPUT_LOG_INTERVAL,
                 done / THROUGHPUT_LOG_INTERVAL, ", ".join(sorted(tasks)) or "none")
        self._last_total = total
        self._next = now + THROUGHPUT_LOG_INTERVAL
