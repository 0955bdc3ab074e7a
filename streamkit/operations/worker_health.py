"""When a worker is healthy (/health) and ready (/ready), and the heartbeat of its event
loop that tells a blocked loop from a busy one."""
from __future__ import annotations

import asyncio
import time
from typing import Callable, Optional, TYPE_CHECKING

if TYPE_CHECKING:  # the runtime loads only when a worker runs
    from ..runtime.worker.view import WorkerView

STALL_AFTER_S = 30.0
"""Default seconds without a loop turn before /health reports the worker stalled."""
HEARTBEAT_S = 0.25
"""How often the worker's event loop stamps the heartbeat /health reads."""


class LoopHeartbeat:
    """A stamp the worker's event loop renews every HEARTBEAT_S while it turns; read from
    any thread. :meth:`start` and :meth:`stop` are called on the worker's loop."""

    def __init__(self) -> None:
        self.stamped_at: Optional[float] = None
        """Monotonic time the worker's event loop last stamped (None before start)."""
        self._stamping: Optional[asyncio.Task] = None

    @property
    def running(self) -> bool:
        """Whether the loop is stamping (started and not stopped)."""
        return self._stamping is not None

    def start(self) -> None:
        self.stamped_at = time.monotonic()
        self._stamping = asyncio.ensure_future(self._stamp())

    async def stop(self) -> None:
        """Stop stamping; :attr:`stamped_at` keeps the last stamp."""
        if self._stamping is not None:
            self._stamping.cancel()
            try:
                await self._stamping
            except asyncio.CancelledError:
                pass
            self._stamping = None

    def blocked_for(self) -> Optional[float]:
        """Seconds since the worker's event loop last stamped its heartbeat (None before start)."""
        return None if self.stamped_at is None else time.monotonic() - self.stamped_at

    async def _stamp(self) -> None:
        while True:
            self.stamped_at = time.monotonic()
            await asyncio.sleep(HEARTBEAT_S)


def health_problem_of(worker: WorkerView, heartbeat: LoopHeartbeat, stall_after: float,
                   loop_blocked_after: float) -> Optional[str]:
    """Why the worker is unhealthy, None when it is healthy: it failed or stopped, its
    event loop has not stamped ``heartbeat`` for ``loop_blocked_after`` seconds, or its
    processing loop has not turned (or not started) for ``stall_after`` seconds. Safe
    from any thread."""
    observations = worker.observations
    if observations.failure is not None:
        return f"the worker failed: {observations.failure}"
    if observations.stopped:
        return "the worker has stopped"
    blocked = heartbeat.blocked_for()
    if blocked is not None and heartbeat.running and blocked > loop_blocked_after:
        return (f"the worker's event loop has been blocked for {blocked:.1f} s (limit "
                f"{loop_blocked_after:g} s): code running on it does not return or await")
    since = observations.seconds_since_tick()
    if since is None:
        started = time.time() - observations.started_at
        return None if started < stall_after else f"the processing loop has not started after {started:.0f} s"
    if since > stall_after:
        return f"the processing loop has not turned for {since:.1f} s (limit {stall_after:g} s)"
    return None


def readiness_problem_of(worker: WorkerView, health: Callable[[], Optional[str]]) -> Optional[str]:
    """Why the worker is not ready to serve its tasks' state, None when it is: ``health()``
    (its health problem), a task restoring, no tasks assigned yet, or a rebalance. Call
    on the worker's loop."""
    problem = health()
    if problem is not None:
        return problem
    restoring = sorted(t for t, s in worker.task_states().items() if s == "restoring")
    if restoring:
        return f"restoring task(s) {', '.join(restoring)}"
    if not worker.assigned:
        return "waiting for the group to assign tasks"
    if worker.rebalancing:
        return "the group is rebalancing"
    return None
