"""Durable writes of the embedded broker: fsync of many partition logs and files in
parallel (a transaction commit syncs everything it touched at once)."""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterable, Optional

from streamkit.broker.partition_log import PartitionLog


_pool: Optional[ThreadPoolExecutor] = None
_pool_mutex = threading.Lock()


def _reset_pool() -> None:
    global _pool
    _pool = None  # threads do not survive fork


os.register_at_fork(after_in_child=_reset_pool)


def sync_all(logs: Iterable[PartitionLog], files: Iterable[Path] = ()) -> None:
    """fsync partitions (what they appended) and files (with their directories), in
    parallel: a file system commits concurrent fsyncs together."""
    global _pool
    jobs: list[Callable[[], None]] = [log.sync for log in logs]
    directories = set()
    for path in files:
        jobs.append(lambda path=path: _fsync_path(path))
        directories.add(path.parent)
    jobs.extend(lambda d=d: _fsync_path(d) for d in directories)
    if len(jobs) <= 1:
        for job in jobs:
            job()
        return
    with _pool_mutex:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="streamkit-fsync")
        pool = _pool
    for future in [pool.submit(job) for job in jobs]:
        future.result()


def _fsync_path(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return  # replaced meanwhile: the newer file is its writer's business
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
