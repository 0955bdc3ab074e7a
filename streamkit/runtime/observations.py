"""What a worker observes about itself beyond the per-task counters: whether its loop
is alive, its commits and their latency, restores in progress, and why it failed.

Plain numbers, updated where the worker does the work and read by whoever reports
them (the HTTP endpoints of :mod:`streamkit.operations`); nothing here costs more
than an attribute write per loop turn or per commit.
"""
from __future__ import annotations

import bisect
import time
from typing import Dict, List, Optional, Tuple

COMMIT_SECONDS_BUCKETS: Tuple[float, ...] = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                                             2.5, 5.0, 10.0)
"""Upper bounds of the commit-latency histogram (seconds; +Inf is implied)."""


class WorkerObservations:
    """The worker's own vital signs (see the module docstring)."""

    def __init__(self) -> None:
        self.started_at = time.time()
        """Wall-clock time the worker was made."""
        self.loop_ticked_at: Optional[float] = None
        """Monotonic time of the processing loop's latest turn (None before the first)."""
        self.failure: Optional[str] = None
        """Why the worker stopped with an error (None while it has not)."""
        self.stopped = False
        self.commits = 0
        self.commit_seconds_sum = 0.0
        self.commit_bucket_counts: List[int] = [0] * len(COMMIT_SECONDS_BUCKETS)
        """Per bucket of COMMIT_SECONDS_BUCKETS, commits that took at most that long (not cumulative)."""
        self.restoring: Dict[str, Tuple[int, int]] = {}
        """Per task being restored now: (changelog records restored, records remaining)."""
        self.restored_records: Dict[str, int] = {}
        """Per task: changelog records replayed by its restores since the worker started."""

    def tick(self) -> None:
        """The processing loop took a turn."""
        self.loop_ticked_at = time.monotonic()

    def committed(self, seconds: float) -> None:
        """A commit (every task, flush or transaction) took ``seconds``."""
        self.commits += 1
        self.commit_seconds_sum += seconds
        index = bisect.bisect_left(COMMIT_SECONDS_BUCKETS, seconds)
        if index < len(self.commit_bucket_counts):
            self.commit_bucket_counts[index] += 1

    def restore_progress(self, task_id: str, restored: int, total: int) -> None:
        """Task ``task_id``'s restore has replayed ``restored`` of ``total`` records."""
        self.restoring[task_id] = (restored, max(total - restored, 0))

    def restore_done(self, task_id: str, restored: int) -> None:
        self.restoring.pop(task_id, None)
        self.restored_records[task_id] = self.restored_records.get(task_id, 0) + restored

    def seconds_since_tick(self) -> Optional[float]:
        """Seconds since the loop's latest turn (None before the first)."""
        return None if self.loop_ticked_at is None else time.monotonic() - self.loop_ticked_at
