"""Fixtures of the mirror tests: the suite's Apache Kafka (tests/kafka/fixtures.py), a second
Apache Kafka node for Kafka → Kafka, and the ``streamkit`` CLI in a subprocess."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterator, Optional

import pytest

from tests.kafka.apache_kafka import start_apache_kafka
from tests.kafka.broker import KafkaTestBroker

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def second_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaTestBroker]:
    """Another single-node Apache Kafka: the target of Kafka → Kafka mirrors."""
    broker = start_apache_kafka(1, directory=tmp_path_factory.mktemp("kafka-2")).broker
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def streamkit() -> Callable[..., subprocess.CompletedProcess]:
    """Run ``python -m streamkit ARGS`` (exit code, stdout, stderr)."""

    def run(*args: str, timeout: float = 180, env: Optional[dict] = None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "streamkit", *args], capture_output=True, text=True,
                              timeout=timeout, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})
    return run
