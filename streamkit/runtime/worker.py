"""The worker: owns tasks, feeds them batches from the transport, commits.

One asyncio loop; per-record work happens in each task's synchronous loop over
a fetched batch, so the event loop is paid per batch, not per record.
"""
from __future__ import annotations

import asyncio
import gc
import logging
import signal
import time
from typing import Dict, Optional

from ..app import App
from ..topology.passes import tasks_of
from ..transport.base import Consumer, Membership, Producer, TopicPartition, Transport
from ..transport.factory import open_transport
from .assembly import create_task
from .collector import RecordCollector
from .metrics import TaskMetrics
from .task import Task, task_id
from .topics_setup import prepare_topics

log = logging.getLogger(__name__)

FETCH_WAIT = 0.1  # s: longest a fetch waits for records
REBALANCE_INTERVAL = 1.0  # s between attempts to take over unowned tasks
PROGRESS_INTERVAL = 30.0  # s between progress log lines


class Worker:
    """Runs an app's tasks on a transport until stopped, idle, or failed."""

    def __init__(self, app: App, transport: Transport, *, until_idle: Optional[float] = None) -> None:
        self.app = app
        self.transport = transport
        self.until_idle = until_idle
        self.topology = app.build()
        self.collector = RecordCollector()
        self.tasks: Dict[str, Task] = {}
        self._task_of_partition: Dict[TopicPartition, Task] = {}
        self._stopping = False
        self._waiting_logged = False
        self.totals = TaskMetrics()
        self._consumer: Optional[Consumer] = None
        self._producer: Optional[Producer] = None
        self._membership: Optional[Membership] = None

    def stop(self) -> None:
        """Ask the loop to commit and exit (safe to call from a signal handler)."""
        self._stopping = True

    async def run(self) -> None:
        app, topology = self.app, self.topology
        with_dlq = "dead_letter" in (app.deserialization_error_handler, app.processing_error_handler)
        self.partitions = prepare_topics(topology, self.transport.admin, with_dlq=with_dlq)
        self._all_tasks = [task_id(s, p) for s, p in tasks_of(topology, self.partitions)]
        self._consumer = self.transport.consumer(app.id)
        self._producer = self.transport.producer()
        self._membership = self.transport.membership(app.id)
        log.info("worker for app %s on %s: %d task(s) in the group", app.id, self.transport.url,
                 len(self._all_tasks))
        try:
            await self._loop()
        except BaseException:
            self._abandon()
            raise
        await self._commit()
        self._close_tasks()

    async def _loop(self) -> None:
        """Until stopped: take free tasks, fetch, process, send outputs, commit on time."""
        now = time.monotonic()
        next_commit = now + self.app.commit_interval.total_seconds()
        next_rebalance = now
        self._progress = _Progress(now)
        idle_since: Optional[float] = now  # start of the current run of empty fetches
        while not self._stopping:
            if time.monotonic() >= next_rebalance:
                if self._take_free_tasks():
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
            if now >= next_commit:
                await self._commit()
                next_commit = now + self.app.commit_interval.total_seconds()
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

    def _take_free_tasks(self) -> int:
        """Take over tasks nobody owns (at start, or after another worker exited); return how many."""
        assert self._membership is not None and self._consumer is not None
        taken = self._membership.acquire([t for t in self._all_tasks if t not in self.tasks])
        if not taken and not self.tasks and not self._waiting_logged:
            log.warning("all %d task(s) of app %s are owned by other workers (%s); waiting",
                        len(self._all_tasks), self.app.id, self._owners())
            self._waiting_logged = True
        for tid in taken:
            sub_id, partition = (int(x) for x in tid.split("_"))
            sub = self.topology.sub_topologies[sub_id]
            task = create_task(self.topology, sub, partition, partitions=self.partitions,
                               collector=self.collector, wall_clock=lambda: int(time.time() * 1000),
                               deserialization_error_handler=self.app.deserialization_error_handler,
                               processing_error_handler=self.app.processing_error_handler)
            inputs = task.input_partitions
            positions = self._consumer.committed(inputs)
            self._consumer.assign(inputs, positions)
            for tp in inputs:
                self._task_of_partition[tp] = task
            self.tasks[tid] = task
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
            await self._producer.send(batches)

    async def _commit(self) -> None:
        """Commit, in order: 1. flush stores; 2. send buffered outputs; 3. make them durable
        (producer flush); 4. commit the input offsets of every task."""
        assert self._producer is not None and self._consumer is not None
        # Step 1: in-memory stores have nothing to flush (changelogged stores will).
        # Step 2.
        await self._send_outputs()
        # Step 3.
        await self._producer.flush()
        # Step 4.
        offsets = {}
        for task in self.tasks.values():
            offsets.update(task.positions)
        await self._consumer.commit(offsets)

    def _abandon(self) -> None:
        """After a failure: drop uncommitted output, commit nothing, free the tasks."""
        dropped = self.collector.discard()
        if dropped:
            log.info("dropped %d uncommitted output record(s); they will be produced again on restart", dropped)
        self._close_tasks()

    def _close_tasks(self) -> None:
        for tid, task in list(self.tasks.items()):
            self.totals.add(task.metrics)
            if self._consumer is not None:
                self._consumer.unassign(task.input_partitions)
            if self._membership is not None:
                self._membership.release(tid)
        self.tasks.clear()
        self._task_of_partition.clear()
        if self._consumer is not None:
            self._consumer.close()
        if self._producer is not None:
            self._producer.close()


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


def run_worker(app: App, *, broker: str, until_idle: Optional[float] = None) -> TaskMetrics:
    """Run a worker in this process until SIGINT/SIGTERM, ``until_idle``, or an error."""
    tune_gc_for_streaming()
    transport = open_transport(broker)
    worker = Worker(app, transport, until_idle=until_idle)

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
