"""Fixtures: the real ``streamkit`` CLI in subprocesses (see tests/cli_processes.py), a
producer that keeps writing while a test watches a group's lag, and the Kafka-protocol
test broker (see tests/kafka/fixtures.py)."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Callable, Iterator, List

import pytest

from tests.cli_processes import REPO, broker_dir, cli, spawn  # noqa: F401 (fixtures)


class Trickle:
    """``streamkit produce TOPIC`` fed ``burst`` JSON lines every ``every`` seconds by a
    thread, until :meth:`stop` (the producer sends what it has whenever its input pauses)."""

    def __init__(self, broker: Path, topic: str, *, every: float, burst: int) -> None:
        env = {**os.environ, "STREAMKIT_BROKER": f"embedded://{broker}", "PYTHONPATH": str(REPO)}
        self._proc = subprocess.Popen([sys.executable, "-m", "streamkit", "produce", topic], stdin=subprocess.PIPE,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO,
                                      env=env)
        self._every, self._burst = every, burst
        self._stopped = threading.Event()
        self.written = 0
        self._thread = threading.Thread(target=self._feed, daemon=True)
        self._thread.start()

    def _feed(self) -> None:
        assert self._proc.stdin is not None
        while not self._stopped.is_set():
            for _ in range(self._burst):
                self._proc.stdin.write(f'{{"n": {self.written}}}\n')
                self.written += 1
            self._proc.stdin.flush()
            self._stopped.wait(self._every)

    def stop(self) -> None:
        """Stop writing and wait for the producer to send the rest and exit (idempotent)."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        self._thread.join(timeout=10)
        _, err = self._proc.communicate(timeout=30)  # closes its input: the producer sends the rest
        assert self._proc.returncode == 0, err


@pytest.fixture
def trickle(broker_dir: Path) -> Iterator[Callable[..., Trickle]]:  # noqa: F811 (the fixture above)
    """``trickle(topic, every=s, burst=n)``: a :class:`Trickle` on the test's broker, stopped at teardown."""
    started: List[Trickle] = []

    def start(topic: str, *, every: float, burst: int) -> Trickle:
        producer = Trickle(broker_dir, topic, every=every, burst=burst)
        started.append(producer)
        return producer
    yield start
    for producer in started:
        producer.stop()
