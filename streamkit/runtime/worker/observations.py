"""What a worker observes about itself beyond the per-task counters: whether its loop
is alive, its commits and their latency, restores in progress, and why it failed.

Plain numbers, updated where the worker does the work and read by whoever reports
them (the HTTP endpoints of :mod:`streamkit.operations`); nothing here costs more
than an attribute write per loop turn or per commit.
"""
from __future__ import annotations

import bisect
import time
from collections import deque
from typing import Deque, Dict, List, Mapping, Optional, Tuple

COMMIT_SECONDS_BUCKETS: Tuple[float, ...] = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                                             2.5, 5.0, 10.0)
"""Upper bounds of the commit-latency histogram (seconds; +Inf is implied)."""
RECENT_COMMITS = 200
"""How many of the latest commits :attr:`WorkerObservations.recent_commits` keeps."""
RECENT_RESTORES = 20
"""How many of the latest finished restores :attr:`WorkerObservations.recent_restores` keeps."""


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
        self.recent_commits: Deque[Tuple[float, float, int]] = deque(maxlen=RECENT_COMMITS)
        """The latest commits, oldest first: (wall-clock time it ended, seconds it took,
        records the tasks processed since the commit before)."""
        self._processed_at_commit: Dict[str, int] = {}
        self.restoring: Dict[str, Tuple[int, int]] = {}
        """Per task being restored now: (changelog records restored, records remaining)."""
        self.restoring_since: Dict[str, float] = {}
        """Per task being restored now: wall-clock time its restore started."""
        self.restored_records: Dict[str, int] = {}
        """Per task: changelog records replayed by its restores since the worker started."""
        self.recent_restores: Deque[Tuple[str, int, float, float]] = deque(maxlen=RECENT_RESTORES)
        """The latest finished restores, oldest first: (task, records replayed, seconds it
        took, wall-clock time it ended)."""

    def tick(self) -> None:
        """The processing loop took a turn."""
        self.loop_ticked_at = time.monotonic()

    def committed(self, seconds: float, processed: Optional[Mapping[str, int]] = None) -> None:
        """A commit (every task, flush or transaction) took ``seconds``; ``processed``: each
        task's records_processed counter when it committed (the records in this commit are
        what the counters grew by since the last one; a task new since then counts from 0)."""
        records = 0
        if processed is not None:
            before = self._processed_at_commit
            records = sum(max(count - before.get(task, 0), 0) for task, count in processed.items())
            self._processed_at_commit = dict(processed)
        self.recent_commits.append((time.time(), seconds, records))
        self.commits += 1
        self.commit_seconds_sum += seconds
        index = bisect.bisect_left(COMMIT_SECONDS_BUCKETS, seconds)
        if index < len(self.commit_bucket_counts):
            self.commit_bucket_counts[index] += 1

    def restore_progress(self, task_id: str, restored: int, total: int) -> None:
        """Task ``task_id``'s restore has replayed ``restored`` of ``total`` records."""
        if task_id not in self.restoring:
            self.restoring_since[task_id] = time.time()
        self.restoring[task_id] = (restored, max(total - restored, 0))

    def restore_done(self, task_id: str, restored: int) -> None:
        self.restoring.pop(task_id, None)
        started = self.restoring_since.pop(task_id, None)
        if started is not None:
            ended = time.time()
            self.recent_restores.append((task_id, restored, ended - started, ended))
        self.restored_records[task_id] = self.restored_records.get(task_id, 0) + restored

    def seconds_since_tick(self) -> Optional[float]:
        """Seconds since the loop's latest turn (None before the first)."""
        return None if self.loop_ticked_at is None else time.monotonic() - self.loop_ticked_at
