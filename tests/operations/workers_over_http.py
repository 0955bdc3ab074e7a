"""Helpers for tests that run workers with --http in subprocesses: their address from
their log, and JSON GETs."""
from __future__ import annotations

import json
import re
import subprocess
import threading
import time
import urllib.error
import urllib.request
from typing import Any, Callable, Dict, List, Optional, Tuple

SERVES = re.compile(r"serves HTTP at (https?://\S+)")


class WorkerLog:
    """Collects a worker process's stderr lines in a thread (so the pipe never fills)."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.lines: List[str] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    def url(self, timeout: float = 30.0) -> str:
        """The address the worker serves HTTP at (from its log line)."""
        def found() -> Optional[str]:
            for line in list(self.lines):
                match = SERVES.search(line)
                if match:
                    return match.group(1)
            if self.proc.poll() is not None:
                raise AssertionError(f"the worker exited {self.proc.returncode}:\n{''.join(self.lines)[-3000:]}")
            return None
        return wait_for(found, timeout, "the worker's HTTP address")


def get_json(url: str, timeout: float = 10.0) -> Tuple[int, Any, Dict[str, str]]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            return answer.status, json.loads(answer.read()), dict(answer.headers)
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null"), dict(error.headers)


def wait_for(condition: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)


def running_tasks(url: str) -> List[str]:
    status, body, _ = get_json(url + "/status")
    return [t["task"] for t in body["tasks"] if t["state"] == "running"] if status == 200 else []
