"""A worker as a process: :func:`run_worker` runs one until SIGINT/SIGTERM, idle or an
error, with its companions (the HTTP endpoints) in the same event loop."""
from __future__ import annotations

import asyncio
import gc
import logging
import signal
import time
from typing import Callable, List, Optional, Protocol, Sequence

from ...core.app_config import AppConfig
from ...state.restore import StateRepairs
from ...topology import Topology
from ...transport.factory import open_transport
from ..context.task_metrics import TaskMetrics
from .loop import Worker
from .view import WorkerView

log = logging.getLogger("streamkit.runtime.worker")


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

    async def start(self, worker: WorkerView) -> Optional[str]:
        """Start beside ``worker``; return the HTTP address the worker advertises to its
        group (None: this companion serves none)."""

    async def stop(self) -> None: ...


def run_worker(topology: Topology, config: AppConfig, *, broker: str, until_idle: Optional[float] = None,
               config_file: Optional[str] = None, companions: Sequence[WorkerCompanion] = (),
               on_start: Optional[Callable[[Worker, asyncio.AbstractEventLoop], None]] = None,
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
                endpoint = await companion.start(worker)
                if endpoint is not None:
                    worker.endpoint = endpoint
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
