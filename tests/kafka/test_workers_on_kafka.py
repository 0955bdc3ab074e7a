"""Workers on a real Kafka-protocol broker: scale-out, failover with standbys, rolling
restarts, dead letters, bad topics. Each worker is a ``streamkit worker`` subprocess."""
from __future__ import annotations

import re
import shutil
import signal
import time
from pathlib import Path

from .workers import KafkaApp, assert_nothing_lost, final_counts, stop, wait_for as _wait_for

ASSIGNED = re.compile(r"assigned this worker task\(s\) ([^;\n]*)")


def _assignments(log: Path) -> list:
    return [m.group(1).strip() for m in ASSIGNED.finditer(log.read_text())]


def test_one_worker_counts_exactly(kafka, tmp_path, unique_name) -> None:
    app = KafkaApp(kafka, tmp_path, unique_name("one"))
    expected = app.produce_events(3000)
    done = app.run_until_idle("s")
    assert final_counts(app) == expected
    assert_nothing_lost(app, expected, range(3000))
    # restarted with its state deleted, the worker restores the counts from the changelog
    more = app.produce_events(600, first=3000)
    shutil.rmtree(tmp_path / "s")
    done = app.run_until_idle("s")
    assert "restored" in done.stderr
    assert final_counts(app) == {p: expected[p] + more[p] for p in expected}


def test_three_workers_split_the_tasks_and_survive_a_kill(kafka, tmp_path, unique_name) -> None:
    app = KafkaApp(kafka, tmp_path, unique_name("three"), standbys=1, delay=0.0004)
    expected = app.produce_events(24_000)
    logs = [tmp_path / f"w{i}.log" for i in range(3)]
    workers = [app.worker("--until-idle", "15", state=f"s{i}", log=logs[i]) for i in range(3)]
    try:
        _wait_for(lambda: all(_assignments(log) for log in logs), 60, "all three workers to get tasks")
        first = [set(_assignments(log)[-1].split(", ")) - {"none"} for log in logs]
        time.sleep(1.5)  # let them process a while
        workers[2].send_signal(signal.SIGKILL)
        for proc in workers[:2]:
            proc.wait(timeout=150)
            assert proc.returncode == 0, open(logs[workers.index(proc)]).read()[-3000:]
    finally:
        stop(workers)
    every_task = {f"{s}_{p}" for s in range(2) for p in range(3)}
    assert set().union(*first) == every_task, f"not every task was assigned at first: {first}"
    assert all(first), f"a worker got no task: {first}"
    survivors = [_assignments(log)[-1] for log in logs[:2]]
    took_over = set().union(*(set(s.split(", ")) for s in survivors))
    assert took_over == every_task, f"the killed worker's tasks {first[2]} were not taken over: {survivors}"
    assert "standby task" in logs[0].read_text() + logs[1].read_text()
    duplicates = assert_nothing_lost(app, expected, range(24_000))
    print(f"\nkill -9 of one of three workers: nothing lost; duplicates {duplicates}")


def test_rolling_restart_with_static_membership(kafka, tmp_path, unique_name) -> None:
    app = KafkaApp(kafka, tmp_path, unique_name("rolling"), delay=0.0003)
    expected = app.produce_events(12_000)
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    a = app.worker("--until-idle", "6", state="sa", log=logs[0], STREAMKIT_KAFKA_GROUP_INSTANCE_ID="worker-a")
    b = app.worker("--until-idle", "6", state="sb", log=logs[1], STREAMKIT_KAFKA_GROUP_INSTANCE_ID="worker-b")
    try:
        _wait_for(lambda: _assignments(logs[0]) and _assignments(logs[1]), 60, "both workers to get tasks")
        for name, proc, log, state in (("a", a, logs[0], "sa"), ("b", b, logs[1], "sb")):
            time.sleep(1.0)
            proc.send_signal(signal.SIGTERM)  # a rolling restart: commit, stop, start again
            assert proc.wait(timeout=60) == 0, log.read_text()[-3000:]
            restarted = app.worker("--until-idle", "6", state=state, log=log.with_suffix(".2.log"),
                                   STREAMKIT_KAFKA_GROUP_INSTANCE_ID=f"worker-{name}")
            if name == "a":
                a = restarted
            else:
                b = restarted
        for proc in (a, b):
            assert proc.wait(timeout=150) == 0
    finally:
        stop([a, b])
    # On Kafka, clean shutdowns commit everything and static members rejoin without a
    # rebalance: the counts are exact, not merely complete.
    assert final_counts(app) == expected
    ids = app.read(app.ids)
    assert sorted(n for values in ids.values() for n in values) == list(range(12_000))


def test_dead_letters_on_kafka(kafka, tmp_path, unique_name) -> None:
    app = KafkaApp(kafka, tmp_path, unique_name("dlq"), handler="dead_letter")
    app.produce_events(10)
    bad = app.cli("produce", app.source, "--format", "text", stdin="not json at all\n")
    assert bad.returncode == 0, bad.stderr
    expected = app.produce_events(10, first=10)
    app.run_until_idle("s")
    dead = app.cli("consume", f"{app.app_id}-dlq", "--from-beginning", "--timeout", "2")
    assert dead.returncode == 0, dead.stderr
    lines = dead.stdout.splitlines()
    assert len(lines) == 1 and "not json at all" in lines[0] and "streamkit.error" in lines[0]
    assert sum(final_counts(app).values()) == 20 and expected


def test_source_topic_deleted_under_a_running_worker(kafka, tmp_path, unique_name) -> None:
    app = KafkaApp(kafka, tmp_path, unique_name("deleted"), delay=0.001)
    app.produce_events(30_000)
    log = tmp_path / "w.log"
    proc = app.worker(state="s", log=log)
    try:
        _wait_for(lambda: _assignments(log), 60, "the worker to get tasks")
        time.sleep(1)
        deleted = app.cli("topics", "delete", app.source)
        assert deleted.returncode == 0, deleted.stderr
        proc.wait(timeout=90)
    finally:
        stop([proc])
    text = log.read_text()
    assert proc.returncode == 1, text[-3000:]
    assert f"topic '{app.source}' was deleted while app" in text, text[-2000:]


def test_broker_down_at_start_is_a_clear_error(kafka, tmp_path, unique_name) -> None:
    from .broker import free_port

    app = KafkaApp(kafka, tmp_path, unique_name("down"))
    url = f"kafka://127.0.0.1:{free_port()}"
    done = app.cli("worker", app.module, "--broker", url, "--until-idle", "1",
                   env=app.env(STREAMKIT_KAFKA_CONNECT_TIMEOUT_S="2"))
    assert done.returncode == 1
    assert "cannot reach Kafka at 127.0.0.1:" in done.stderr and "after 2 s" in done.stderr
    assert "Traceback" not in done.stderr


def test_broker_outage_mid_run(kafka_behind_proxy, tmp_path, unique_name) -> None:
    broker, proxy = kafka_behind_proxy
    app = KafkaApp(broker, tmp_path, unique_name("outage"), delay=0.0003)
    expected = app.produce_events(12_000)
    log = tmp_path / "w.log"
    proc = app.worker("--until-idle", "6", state="s", log=log)
    try:
        _wait_for(lambda: _assignments(log), 60, "the worker to get tasks")
        time.sleep(1.0)
        proxy.cut()
        time.sleep(4)
        proxy.restore()
        assert proc.wait(timeout=150) == 0, log.read_text()[-3000:]
    finally:
        stop([proc])
    assert_nothing_lost(app, expected, range(12_000))
    assert final_counts(app) == expected


def test_tls_end_to_end(kafka_tls, tmp_path, unique_name) -> None:
    app = KafkaApp(kafka_tls, tmp_path, unique_name("tls"))
    expected = app.produce_events(500)
    app.run_until_idle("s")
    assert final_counts(app) == expected
    # without the CA the handshake fails, and the error says where
    plain = app.env()
    plain.pop("STREAMKIT_KAFKA_SSL_CAFILE")
    refused = app.cli("topics", "list", env={**plain, "STREAMKIT_KAFKA_CONNECT_TIMEOUT_S": "2"})
    assert refused.returncode == 1 and kafka_tls.bootstrap in refused.stderr


def test_secrets_never_reach_the_logs(kafka, tmp_path, unique_name) -> None:
    app = KafkaApp(kafka, tmp_path, unique_name("secret"))
    secret = "hunter2-very-secret"
    env = app.env(STREAMKIT_KAFKA_SECURITY_PROTOCOL="SASL_PLAINTEXT", STREAMKIT_KAFKA_SASL_MECHANISM="PLAIN",
                  STREAMKIT_KAFKA_SASL_USERNAME="alice", STREAMKIT_KAFKA_SASL_PASSWORD=secret,
                  STREAMKIT_KAFKA_CONNECT_TIMEOUT_S="2")
    done = app.cli("--log-level", "DEBUG", "worker", app.module, "--until-idle", "1", env=env)
    assert done.returncode != 0  # the broker does not speak SASL
    assert secret not in done.stdout + done.stderr
