"""Issue 17 on a Kafka-protocol broker (Tansu from the fixtures, or Apache Kafka when
STREAMKIT_TEST_KAFKA names one): the skewed page-view backfill of
tests/e2e/test_deterministic_time.py (40/33/27 % partitions, 1% in grace, 0.1% really late)
through ``group_by(page)`` → 60 s windowed count → late-records topic → suppress, run by 1 and
by 3 ``streamkit worker`` processes (one consumer group; each worker its own state directory).
The late-records topic must hold exactly the really late views and every suppressed final
must equal a direct computation; under exactly_once (brokers with transactions only: Tansu
has none, those cases skip saying so) each window's final appears exactly once."""
from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from .. import determinism as det
from .topics import create_app_topics

EVENTS = 60_000
ASSIGNED = re.compile(r"assigned this worker task\(s\) ([^;\n]*)")


def _env(broker) -> dict:
    # as tests/kafka/workers.py: 6 s sessions (Kafka's minimum by default), 1 s heartbeats
    env = {"STREAMKIT_KAFKA_SESSION_TIMEOUT_MS": "6000", "STREAMKIT_KAFKA_HEARTBEAT_INTERVAL_MS": "1000"}
    if broker.tls:
        env.update(STREAMKIT_KAFKA_SECURITY_PROTOCOL="SSL", STREAMKIT_KAFKA_SSL_CAFILE=str(broker.cafile))
    return env


def _run(broker, tmp_path: Path, name: str, workers: int, guarantee: str) -> None:
    app = det.write_app(tmp_path, "count", prefix=name, commit_ms=200)
    # Outputs carry the views' event times (two days back): every topic keeps its records
    # whatever the broker's default retention.
    create_app_topics(broker, det.load_app(app))
    views = det.generate_views(EVENTS, "skewed")
    det.produce(broker.url, app, views)
    logs = [tmp_path / f"worker-{i}.log" for i in range(workers)]
    started = time.monotonic()
    procs = [det.start_worker(broker.url, app, guarantee, log=logs[i], until_idle=2 if workers == 1 else 8,
                              state_dir=tmp_path / f"state-{i}", env=_env(broker)) for i in range(workers)]
    try:
        for proc, log in zip(procs, logs):
            try:
                code = proc.wait(timeout=200)
            except subprocess.TimeoutExpired:
                raise AssertionError(f"worker still running after 200 s: {log.read_text()[-3000:]}") from None
            assert code == 0, f"worker exited with {code}: {log.read_text()[-3000:]}"
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
    took = time.monotonic() - started
    assignments = [ASSIGNED.findall(log.read_text()) for log in logs]
    summary = det.verify(broker.url, app, views, exactly_once=guarantee == "exactly_once", read_timeout=2.0,
                         what=f"{'Tansu' if broker.is_tansu else 'Kafka'}, {workers} worker(s), {guarantee}: ")
    print(f"\n{summary} (workers {took:.1f} s; assignments {[a[-1] if a else 'none' for a in assignments]})")
    if workers > 1:
        assert sum(1 for a in assignments if any(x.strip() != "none" for x in a)) >= 2, \
            f"the tasks did not spread over the workers: {assignments}"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("workers", [1, 3])
def test_skewed_backfill_at_least_once_on_kafka(kafka, tmp_path, unique_name, workers) -> None:
    _run(kafka, tmp_path, unique_name("det"), workers, "at_least_once")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("workers", [1, 3])
def test_skewed_backfill_exactly_once_on_kafka(transactional_kafka, tmp_path, unique_name, workers) -> None:
    _run(transactional_kafka, tmp_path, unique_name("det"), workers, "exactly_once")
