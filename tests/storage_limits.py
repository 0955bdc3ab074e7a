"""Real storage failures for tests: a small tmpfs that fills up (ENOSPC) and a file size
limit (RLIMIT_FSIZE: EFBIG) for child processes."""
from __future__ import annotations

import errno
import os
import resource
import signal
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import pytest

FILLER = "filler"


@contextmanager
def small_filesystem(directory: Path, size_bytes: int) -> Iterator[Path]:
    """A tmpfs of ``size_bytes`` mounted on ``directory`` for the block. Mounting needs
    root: the test is skipped, saying so, where the mount is refused."""
    directory.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("a real disk-full test mounts a small tmpfs, which needs root; this user is "
                    f"uid {os.geteuid()} (the EFBIG tests cover OS errors without root)")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(directory)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"mounting a tmpfs was refused: {mounted.stderr.strip()}")
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], check=True)


def fill(directory: Path, leave_bytes: int = 0) -> Path:
    """Fill the file system of ``directory`` with a file until a write fails with ENOSPC,
    then give back about ``leave_bytes``; returns the filler (delete it to free the space)."""
    path = directory / FILLER
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for chunk in (b"\0" * (64 << 10), b"\0" * 4096, b"\0"):
            while True:
                try:
                    if os.write(fd, chunk) < len(chunk):
                        break
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
                    break
        size = os.fstat(fd).st_size
    finally:
        os.close(fd)
    if leave_bytes:
        os.truncate(path, max(0, size - leave_bytes))
    return path


def file_size_limit(max_bytes: int) -> Callable[[], None]:
    """A ``preexec_fn`` limiting the files the child writes to ``max_bytes`` (RLIMIT_FSIZE):
    a write past it fails with EFBIG, as SIGXFSZ (which would kill the child) is ignored."""

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))
    return limit
