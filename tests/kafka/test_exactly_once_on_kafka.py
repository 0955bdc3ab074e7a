"""exactly_once on Kafka: one transactional producer per task (``<app>-<sub>-<partition>``),
so a worker that lost a task can never commit output for it again (fenced).

These need a broker with transactions (Apache Kafka: ``STREAMKIT_TEST_KAFKA=host:port``);
on Tansu they are skipped with the reason printed, except the check that a worker on
such a broker fails with a clear error.
"""
from __future__ import annotations

import signal
import time

import pytest

from .test_workers_on_kafka import _assignments, _wait_for
from .workers import KafkaApp, stop

EOS = ("--guarantee", "exactly_once")


def _exactly_once(app: KafkaApp, expected: dict, produced: int) -> None:
    ids = app.read(app.ids)
    every = sorted(n for values in ids.values() for n in values)
    assert every == list(range(produced)), "ids duplicated or missing under exactly_once"
    counts = app.read(app.counts)
    for page, total in expected.items():
        assert counts[page] == list(range(1, total + 1)), f"page {page}: counts not exactly 1..{total}"


def test_exactly_once_through_a_kill(transactional_kafka, tmp_path, unique_name) -> None:
    app = KafkaApp(transactional_kafka, tmp_path, unique_name("eos-kill"), standbys=1, delay=0.0004)
    expected = app.produce_events(20_000)
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    workers = [app.worker(*EOS, "--until-idle", "15", state=f"s{i}", log=logs[i]) for i in range(2)]
    try:
        _wait_for(lambda: all(_assignments(log) for log in logs), 60, "both workers to get tasks")
        time.sleep(2)
        workers[1].send_signal(signal.SIGKILL)
        assert workers[0].wait(timeout=180) == 0, logs[0].read_text()[-3000:]
    finally:
        stop(workers)
    _exactly_once(app, expected, 20_000)


def test_a_zombie_worker_is_fenced(transactional_kafka, tmp_path, unique_name) -> None:
    """Worker B stalls (SIGSTOP) past its session timeout; the group gives its tasks to A,
    whose producers, with the same transactional ids, fence B's. When B wakes up, its
    commit fails: it drops those tasks and nothing it produced becomes visible."""
    app = KafkaApp(transactional_kafka, tmp_path, unique_name("eos-zombie"), delay=0.0004)
    expected = app.produce_events(20_000)
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    a = app.worker(*EOS, "--until-idle", "20", state="sa", log=logs[0])
    b = app.worker(*EOS, "--until-idle", "20", state="sb", log=logs[1])
    try:
        _wait_for(lambda: _assignments(logs[0]) and _assignments(logs[1]), 60, "both workers to get tasks")
        time.sleep(2)
        b.send_signal(signal.SIGSTOP)
        _wait_for(lambda: "0_0, 0_1, 0_2" in (_assignments(logs[0]) or [""])[-1], 90,
                  "A to take over every task while B is stalled")
        time.sleep(3)  # A commits transactions for B's old tasks
        b.send_signal(signal.SIGCONT)
        assert a.wait(timeout=180) == 0, logs[0].read_text()[-3000:]
        b.wait(timeout=120)
    finally:
        stop([a, b])
    zombie = logs[1].read_text()
    assert "fenced" in zombie or "rebalanced without this worker" in zombie, zombie[-3000:]
    _exactly_once(app, expected, 20_000)


def test_exactly_once_needs_a_transactional_broker(tansu, tmp_path, unique_name) -> None:
    """On a Kafka-compatible broker without transactions (Tansu) exactly_once refuses to start."""
    assert not tansu.supports_transactions
    app = KafkaApp(tansu, tmp_path, unique_name("eos-refused"))
    app.produce_events(10)
    done = app.cli("worker", app.module, *EOS, "--until-idle", "2", "--state-dir", str(tmp_path / "s"))
    assert done.returncode == 1
    assert "refused a transactional producer" in done.stderr and "exactly_once needs" in done.stderr
    assert "Traceback" not in done.stderr
