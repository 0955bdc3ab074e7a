"""A ``streamkit mirror --continuous`` process for the tests: its log, its /metrics, and a
clean stop (SIGTERM, exit 0) checked when it ends."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Dict, Optional

from streamkit.transport.base import Transport

from .conftest import REPO


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RunningMirror:
    """``python -m streamkit mirror ARGS --continuous --metrics ...``, its stderr in ``log_path``."""

    def __init__(self, log_path: Path, *args: str, env: Optional[dict] = None) -> None:
        self.port = free_port()
        self.log_path = log_path
        self._log = open(log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "streamkit", "mirror", *args, "--continuous", "--metrics", f"127.0.0.1:{self.port}"],
            stdout=subprocess.DEVNULL, stderr=self._log, cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})

    def log(self) -> str:
        return self.log_path.read_text()

    def scrape(self) -> str:
        try:
            return urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5).read().decode()
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGTERM, then check the mirror ended cleanly."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(90)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(30)
            self._log.close()
        assert self.proc.returncode == 0, self.log()[-4000:]

    def __enter__(self) -> "RunningMirror":
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.stop()
            return
        self.proc.kill()  # the test failed already: its error matters, not this exit
        self.proc.wait(30)
        self._log.close()


def group_offsets(transport: Transport, group: str, topic: str) -> Dict[int, int]:
    """``group``'s committed offsets on ``topic``, per partition."""
    return {tp.partition: offset for tp, offset in transport.admin.committed_offsets(group).items()
            if tp.topic == topic}

