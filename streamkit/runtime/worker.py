"""The worker: owns tasks, feeds them batches from the transport, commits.

One asyncio loop; per-record work happens in each task's synchronous loop over
a fetched batch, so the event loop is paid per batch, not per record.
"""
from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import time
import uuid
from typing import Dict, Optional

from ..app import GUARANTEES, App
from ..errors import ConfigError
from ..state.restore import restore_task_stores
from ..topology.passes import tasks_of
from ..transport.base import Consumer, Membership, Producer, TopicPartition, Transport
from ..transport.factory import open_transport
from .assembly import TaskSettings, create_task
from .collector import RecordCollector
from ..faults import crash_point
from .metrics import TaskMetrics
from .task import Task, task_id
from .topics_setup import prepare_topics

log = logging.getLogger(__name__)

FETCH_WAIT = 0.1  # s: longest a fetch waits for records
REBALANCE_INTERVAL = 1.0  # s between attempts to take over unowned tasks
PROGRESS_INTERVAL = 30.0  # s between progress log lines


class Worker:
    """Runs an app's tasks on a transport until stopped, idle, or failed."""

    def __init__(self, app: App, transport: Transport, *, until_idle: Optional[float] = None,
                 guarantee: Optional[str] = None, state_dir: Optional[str] = None) -> None:
        self.app = app
        self.transport = transport
        self.until_idle = until_idle
        self.guarantee = guarantee or app.processing_guarantee
        if self.guarantee not in GUARANTEES:
            raise ConfigError(f"processing guarantee {self.guarantee!r}: use one of {', '.join(GUARANTEES)}")
        self.exactly_once = self.guarantee == "exactly_once"
        self.commit_interval = app.effective_commit_interval(self.guarantee).total_seconds()
        self.settings = TaskSettings(
            deserialization_error_handler=app.deserialization_error_handler,
            processing_error_handler=app.processing_error_handler,
            store_backend=app.store_backend,
            state_dir=state_dir or app.state_dir or default_state_dir(transport, app.id),
            caching=app.caching)
        self.topology = app.build()
        self.collector = RecordCollector()
        self.tasks: Dict[str, Task] = {}
        self._task_of_partition: Dict[TopicPartition, Task] = {}
        self._stopping = False
        self._waiting_logged = False
        self.totals = TaskMetrics()
        self.restored: Dict[str, Dict[str, int]] = {}
        """Records replayed per task and store at start (or takeover)."""
        self._consumer: Optional[Consumer] = None
        self._restore_consumer: Optional[Consumer] = None
        self._producer: Optional[Producer] = None
        self._membership: Optional[Membership] = None
        self._changelog_ends: Dict[TopicPartition, int] = {}

    def stop(self) -> None:
        """Ask the loop to commit and exit (safe to call from a signal handler)."""
        self._stopping = True

    async def run(self) -> None:
        app, topology = self.app, self.topology
        with_dlq = "dead_letter" in (app.deserialization_error_handler, app.processing_error_handler)
        self.partitions = prepare_topics(topology, self.transport.admin, with_dlq=with_dlq)
        self._all_tasks = [task_id(s, p) for s, p in tasks_of(topology, self.partitions)]
        self._consumer = self.transport.consumer(app.id, read_committed=True)
        self._restore_consumer = self.transport.consumer(f"{app.id}-restore", read_committed=True)
        transactional_id = f"{app.id}-{uuid.uuid4().hex[:12]}" if self.exactly_once else None
        self._producer = self.transport.producer(transactional_id=transactional_id)
        self._membership = self.transport.membership(app.id)
        self.transport.start_housekeeping()
        log.info("worker for app %s on %s: %d task(s) in the group, %s, state in %s", app.id,
                 self.transport.url, len(self._all_tasks), self.guarantee, self.settings.state_dir)
        try:
            if self.exactly_once:
                await self._producer.begin_transaction()
            await self._loop()
            await self._commit()
        except BaseException:
            await self._abandon()
            raise
        self._close_tasks()

    async def _loop(self) -> None:
        """Until stopped: take free tasks, fetch, process, send outputs, commit on time."""
        now = time.monotonic()
        next_commit = now + self.commit_interval
        next_rebalance = now
        self._progress = _Progress(now)
        idle_since: Optional[float] = now  # start of the current run of empty fetches
        cache_limit = self.app.cache_max_bytes
        while not self._stopping:
            if time.monotonic() >= next_rebalance:
                if await self._take_free_tasks():
                    idle_since = time.monotonic()  # new work restarts the --until-idle clock
                next_rebalance = time.monotonic() + REBALANCE_INTERVAL
            fetch_started = time.monotonic()
            if await self._process_available():
                idle_since = None
            elif idle_since is None:
                idle_since = fetch_started
            for task in self.tasks.values():
                task.punctuate_wall_clock()
            await self._send_outputs()
            now = time.monotonic()
            buffered = sum(task.store_set.pending_bytes for task in self.tasks.values())
            if now >= next_commit or buffered > cache_limit:
                await self._commit()
                next_commit = time.monotonic() + self.commit_interval
            self._progress.maybe_log(now, self.tasks)
            # Idle means fetches found nothing for that long (slow commits do not count).
            if self.until_idle is not None and idle_since is not None and now - idle_since >= self.until_idle:
                log.info("no input for %.1f s: stopping (--until-idle)", self.until_idle)
                return

    async def _process_available(self) -> bool:
        """Fetch one round of batches and run each through its task; False if there was none."""
        assert self._consumer is not None
        if not self.tasks:
            await asyncio.sleep(FETCH_WAIT)
            return False
        batches = await self._consumer.fetch(FETCH_WAIT)
        lookup = self._task_of_partition
        for batch in batches:
            lookup[TopicPartition(batch.topic, batch.partition)].process(batch.topic, batch.records)
        return bool(batches)

    async def _take_free_tasks(self) -> int:
        """Take over tasks nobody owns (at start, or after another worker exited), restore
        their stores, and start reading their inputs; return how many were taken."""
        assert self._membership is not None and self._consumer is not None
        taken = self._membership.acquire([t for t in self._all_tasks if t not in self.tasks])
        if not taken and not self.tasks and not self._waiting_logged:
            log.warning("all %d task(s) of app %s are owned by other workers (%s); waiting",
                        len(self._all_tasks), self.app.id, self._owners())
            self._waiting_logged = True
        if taken:
            # A dead owner's last transaction decides what its tasks' changelogs and
            # offsets hold: settle it before restoring or reading committed offsets.
            resolved = self.transport.resolve_abandoned_transactions()
            if resolved:
                log.info("settled %d transaction(s) left by a stopped worker", resolved)
        for tid in taken:
            sub_id, partition = (int(x) for x in tid.split("_"))
            sub = self.topology.sub_topologies[sub_id]
            task = create_task(self.topology, sub, partition, partitions=self.partitions,
                               collector=self.collector, wall_clock=lambda: int(time.time() * 1000),
                               settings=self.settings)
            self.tasks[tid] = task
            inputs = task.input_partitions
            positions = self._consumer.committed(inputs)
            lost = task.store_set.lost_unlogged
            if lost and positions:
                # Replaying input for one store would apply it twice to the others: the
                # whole task's state is rebuilt from the input instead.
                log.warning("task %s: store(s) %s have no changelog and no local state: rebuilding the "
                            "task's state from the start of the input (with its outputs muted up to the "
                            "committed offsets)", tid, ", ".join(lost))
                task.rebuild_from_input(positions)
                positions = {}
            else:
                assert self._restore_consumer is not None
                self.restored[tid] = await restore_task_stores(
                    tid, task.store_set, self._restore_consumer, self.transport.admin)
            self._consumer.assign(inputs, positions)
            for tp in inputs:
                self._task_of_partition[tp] = task
            log.info("task %s started at %s", tid,
                     ", ".join(f"{tp.topic}[{tp.partition}]@{positions.get(tp, 'earliest')}" for tp in inputs))
        return len(taken)

    def _owners(self) -> str:
        assert self._membership is not None
        owners = {self._membership.owner_of(t) for t in self._all_tasks} - {None}
        return "; ".join(sorted(owners)) or "owners unknown"  # type: ignore[arg-type]

    async def _send_outputs(self) -> None:
        batches = self.collector.drain()
        if batches:
            assert self._producer is not None
            ends = await self._producer.send(batches)
            self._changelog_ends.update(ends)

    async def _commit(self) -> None:
        """Commit every task. Under exactly_once, a crash at any point is safe:

        1. Flush the record caches: forward each key's latest value downstream.
        2. Write one changelog record per key each store changed since the last commit.
        3. Send all buffered output and changelog records (inside the transaction).
        4. exactly_once: commit the transaction with the tasks' input offsets: outputs,
           changelogs and offsets become visible together. A crash before this point
           aborts it all and the stores were never touched. at_least_once: make the
           outputs durable, then commit the input offsets.
        5. Apply each store's buffered writes to RocksDB in one batch with the changelog
           offset it now reflects. A crash before this leaves RocksDB one commit behind
           its changelog, and restore replays just that tail.
        """
        assert self._producer is not None and self._consumer is not None
        tasks = list(self.tasks.values())
        # Step 1.
        for task in tasks:
            task.store_set.flush()
        # Step 2.
        for task in tasks:
            for topic, partition, records in task.store_set.changelog_batches(max(task.stream_time, 0)):
                self.collector.send_batch(topic, partition, records)
        # Step 3.
        crash_point("commit.before_send")
        await self._send_outputs()
        crash_point("commit.after_send")
        offsets = {}
        for task in tasks:
            offsets.update(task.positions)
        # Step 4.
        if self.exactly_once:
            await self._producer.commit_transaction(self.app.id, offsets)
        else:
            await self._producer.flush()
            await self._consumer.commit(offsets)
        crash_point("commit.after_transaction")
        # Step 5.
        ends, self._changelog_ends = self._changelog_ends, {}
        for task in tasks:
            task.store_set.persist(ends)
        crash_point("commit.after_persist")
        if self.exactly_once:
            await self._producer.begin_transaction()

    async def _abandon(self) -> None:
        """After a failure: drop uncommitted output and store writes, abort the open
        transaction, commit nothing, free the tasks."""
        dropped = self.collector.discard()
        if dropped:
            log.info("dropped %d uncommitted output record(s); they will be produced again on restart", dropped)
        for task in self.tasks.values():
            task.store_set.discard()
        if self.exactly_once and self._producer is not None:
            try:
                await self._producer.abort_transaction()
            except Exception as exc:  # noqa: BLE001 - the next owner aborts it anyway
                log.warning("could not abort the open transaction (%s); it is aborted on the next start", exc)
        self._close_tasks()

    def _close_tasks(self) -> None:
        for tid, task in list(self.tasks.items()):
            self.totals.add(task.metrics)
            if self._consumer is not None:
                self._consumer.unassign(task.input_partitions)
            task.store_set.close()
            if self._membership is not None:
                self._membership.release(tid)
        self.tasks.clear()
        self._task_of_partition.clear()
        for client in (self._consumer, self._restore_consumer, self._producer):
            if client is not None:
                client.close()
        self._consumer = self._restore_consumer = self._producer = None


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


def run_worker(app: App, *, broker: str, until_idle: Optional[float] = None, guarantee: Optional[str] = None,
               state_dir: Optional[str] = None) -> TaskMetrics:
    """Run a worker in this process until SIGINT/SIGTERM, ``until_idle``, or an error."""
    tune_gc_for_streaming()
    transport = open_transport(broker)
    worker = Worker(app, transport, until_idle=until_idle, guarantee=guarantee, state_dir=state_dir)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, worker.stop)
            except (NotImplementedError, RuntimeError):  # not the main thread
                pass
        await worker.run()

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
