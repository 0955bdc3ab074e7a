"""A worker's state directory, locked so two worker processes never share one.

On Kafka, tasks move between workers; two workers on one machine sharing a
directory would open the same RocksDB files. Without an explicit ``--state-dir``
a worker takes the first free slot ``<base>/worker-<n>``; the slot is stable
across restarts, so a restarted worker finds its state again.
"""
from __future__ import annotations

import fcntl
import os
import re
from dataclasses import dataclass, field
from typing import Optional, Set

from ..errors import ConfigError

MAX_SLOTS = 256
_TASK_DIR = re.compile(r"^\d+_\d+$")


@dataclass
class StateDirectory:
    path: str
    _lock_fd: Optional[int] = field(default=None, repr=False)

    def task_ids(self) -> Set[str]:
        """Tasks with local state here."""
        try:
            return {name for name in os.listdir(self.path) if _TASK_DIR.match(name)}
        except FileNotFoundError:
            return set()

    def release(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing drops the flock
            self._lock_fd = None


def claim_state_directory(base: str, *, exclusive: bool, explicit: bool) -> StateDirectory:
    """The directory this worker keeps its stores in. ``exclusive``: lock it for this process
    (an explicit one must be free; otherwise the first free ``worker-<n>`` slot is used)."""
    if not exclusive:
        os.makedirs(base, exist_ok=True)
        return StateDirectory(base)
    if explicit:
        fd = _try_lock(base)
        if fd is None:
            raise ConfigError(f"state directory {base} is in use by another worker process "
                              f"({_holder(base)}): give each worker its own --state-dir")
        return StateDirectory(base, fd)
    for slot in range(MAX_SLOTS):
        path = os.path.join(base, f"worker-{slot}")
        fd = _try_lock(path)
        if fd is not None:
            return StateDirectory(path, fd)
    raise ConfigError(f"all {MAX_SLOTS} state directory slots under {base} are in use")


def _try_lock(path: str) -> Optional[int]:
    os.makedirs(path, exist_ok=True)
    fd = os.open(os.path.join(path, ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def _holder(path: str) -> str:
    try:
        with open(os.path.join(path, ".lock")) as f:
            return f"pid {f.read().strip()}"
    except OSError:
        return "unknown process"
