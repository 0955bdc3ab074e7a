"""The bodies of /status (the worker's tasks now) and /history (its last minutes, sampled
in the HTTP thread every SAMPLE_EVERY_S)."""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable, Dict, Optional, TYPE_CHECKING, Tuple

from ..core.records import TopicPartition
from .history import SAMPLE_EVERY_S, WorkerHistory, take_moment, take_sample
from .input_lag import InputLag
from .worker_access import read_racing

if TYPE_CHECKING:  # the runtime loads only when a worker runs
    from ..runtime.worker.view import WorkerView

log = logging.getLogger(__name__)


class TaskRates:
    """Records per second of each task since the previous /status read."""

    def __init__(self) -> None:
        self._previous: Dict[str, Tuple[float, int]] = {}

    def rate(self, task_id: str, processed: int, now: float) -> float:
        """The rate of ``task_id`` (``processed`` records at monotonic ``now``) since the
        previous call for it, 0.0 on the first; remembers this call for the next."""
        before = self._previous.get(task_id)
        rate = 0.0
        if before is not None and now > before[0]:
            rate = max(processed - before[1], 0) / (now - before[0])
        self._previous[task_id] = (now, processed)
        return rate


def status_body(worker: WorkerView, url: Optional[str], lag: Dict[TopicPartition, int], rates: TaskRates,
                health_problem: Callable[[], Optional[str]],
                readiness_problem: Callable[[], Optional[str]]) -> Dict[str, Any]:
    """What the live page shows: per task its state, records processed and per second,
    lag (from ``lag``), late drops, dead letters, cached bytes and restore progress; the
    worker's health and readiness. Call on the worker's loop."""
    now = time.monotonic()
    rows = []
    for task_id, state in sorted(worker.task_states().items()):
        task = worker.tasks.get(task_id)
        processed = task.metrics.records_processed if task is not None else 0
        rate = rates.rate(task_id, processed, now)
        behind = sum(lag.get(tp, 0) for tp in task.input_partitions) if task is not None else None
        rows.append({"task": task_id, "state": state, "records_processed": processed,
                     "records_per_second": round(rate, 1), "lag": behind,
                     "late_records_dropped": task.metrics.late_records_dropped if task is not None else 0,
                     "records_dead_lettered": task.metrics.records_dead_lettered if task is not None else 0,
                     "cache_bytes": (sum(s.buffer.cached_bytes for s in task.stores.open_stores)
                                     if task is not None else 0),
                     "restore": _restore_of(worker, task_id)})
    return {"app": worker.app_id, "worker": url, "health": health_problem() or "ok",
            "ready": readiness_problem() or "ready", "tasks": rows}


def _restore_of(worker: WorkerView, task_id: str) -> Optional[Dict[str, int]]:
    progress = worker.observations.restoring.get(task_id)
    return None if progress is None else {"restored": progress[0], "remaining": progress[1]}


def history_body(worker: WorkerView, history: WorkerHistory, since: Optional[int]) -> Dict[str, Any]:
    """The /history body: ``history``'s samples (newer than epoch ms ``since`` when given)
    and the worker's state now. Safe from the HTTP thread."""
    moment = read_racing(lambda: take_moment(worker.observations))
    return history.snapshot(moment, since)


async def sample_history_forever(worker: WorkerView, history: WorkerHistory, lag: InputLag) -> None:
    """Sample ``worker``'s counters and the known ``lag`` into ``history`` every
    SAMPLE_EVERY_S, re-reading the lag when nobody else did lately (HTTP thread)."""
    next_at = time.monotonic()
    while True:
        try:
            lag.refresh_in_background()
            known = dict(lag.by_partition)
            history.add(read_racing(lambda: take_sample(worker, known)))
        except Exception:  # noqa: BLE001 - a failed sample leaves a gap, never stops sampling
            log.exception("sampling the worker's counters for /history failed")
        next_at = max(next_at + SAMPLE_EVERY_S, time.monotonic())
        await asyncio.sleep(next_at - time.monotonic())
