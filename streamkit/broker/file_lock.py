"""An exclusive flock on a lock file, as a context manager (the transaction files' guard)."""
from __future__ import annotations

import fcntl
import os
from pathlib import Path


class Flock:
    """An exclusive, blocking flock on a lock file, as a context manager.

    The lock file's directory may be removed (an id with nothing pending) while we
    wait: the lock is then retaken on the file that the path names afterwards.
    """

    def __init__(self, path: Path) -> None:
        self._path = path
        self._fd = -1

    def __enter__(self) -> "Flock":
        while True:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            try:
                fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
            except FileNotFoundError:
                continue  # removed between mkdir and open
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                same = os.stat(self._path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                self._fd = fd
                return self
            os.close(fd)

    def __exit__(self, *exc: object) -> None:
        os.close(self._fd)
