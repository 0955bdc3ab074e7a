"""A worker's view of its own group's lag, Burrow-style, as served at ``GET /lag``.

A background task samples the group (committed offsets, end offsets, members; see
:mod:`.lag_sampling`) every ``interval`` seconds in a thread (the reads are broker
round trips), keeping the last ``window`` samples; ``/lag`` answers with their
evaluation (:mod:`.lag`), in Burrow's consumer-status JSON.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable, Dict, Optional, TYPE_CHECKING

from .lag_sampling import LagMonitor

if TYPE_CHECKING:  # the runtime loads only when a worker runs
    from ..runtime.worker.view import WorkerView

log = logging.getLogger(__name__)

SAMPLE_INTERVAL_S = 5.0
WINDOW = 10


class WorkerLag:
    """Samples ``worker``'s group in the background; ``await self()`` is the latest evaluation."""

    def __init__(self, worker: WorkerView, *, interval: float = SAMPLE_INTERVAL_S, window: int = WINDOW) -> None:
        self.monitor = LagMonitor(worker.transport.admin, worker.app_id, window=window)
        self.interval = interval
        self._task: Optional[asyncio.Task] = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - stopping regardless
                pass
            self._task = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                await loop.run_in_executor(None, self.monitor.sample)
            except Exception as exc:  # noqa: BLE001 - the next sample may work; /lag says what it has
                log.warning("sampling the lag of group %s failed: %s", self.monitor.group, exc)
            await asyncio.sleep(self.interval)

    async def __call__(self) -> Dict[str, Any]:
        if not self.monitor.samples:
            await asyncio.get_running_loop().run_in_executor(None, self.monitor.sample)
        return self.monitor.evaluate().to_json()


def worker_lag_evaluator(worker: WorkerView) -> Callable[[], Awaitable[Dict[str, Any]]]:
    """A started :class:`WorkerLag` of ``worker`` (call it from the worker's event loop)."""
    lag = WorkerLag(worker)
    lag.start()
    return lag
