"""``streamkit lag`` against real worker processes on the embedded broker: a healthy worker
is OK, a killed one STOP, one hung on a poison record STALL (tests/operations/lag_app.py)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

from streamkit.broker import EmbeddedBroker
from streamkit.core.records import TopicPartition
from tests.cli_processes import REPO
from tests.kafka.workers import wait_for

APP, GROUP, TOPIC = "tests.operations.lag_app", "lag-app", "lag-events"
QUICK = ("--window", "5", "--interval", "0.2")  # 0.8 s of samples; the app commits every 0.1 s


def committed(broker_dir: Path) -> Dict[TopicPartition, int]:
    with EmbeddedBroker(broker_dir) as broker:
        return broker.committed_offsets(GROUP)


def log_ends(broker_dir: Path) -> int:
    """How many records the lag app's input holds, over its partitions."""
    with EmbeddedBroker(broker_dir) as broker:
        return sum(broker.partition_offsets(TOPIC, p).end for p in range(2))


def rows(stdout: str) -> List[List[str]]:
    """The table's rows after the group line and the header: topic, partition, status, ..."""
    return [line.split() for line in stdout.splitlines()[2:]]


def lines(n: int) -> str:
    return "".join(f'{{"n": {i}}}\n' for i in range(n))


def start_worker(cli, spawn, broker_dir: Path) -> subprocess.Popen:
    """A worker of the lag app that has committed past 2 records of each partition."""
    assert cli("topics", "create", TOPIC, "--partitions", "2").returncode == 0
    worker = spawn("worker", APP)
    assert cli("produce", TOPIC, stdin=lines(4)).returncode == 0
    try:
        wait_for(lambda: sorted(committed(broker_dir).values()) == [2, 2], 30, "the worker's first commit")
    except AssertionError as exc:
        worker.kill()
        _, err = worker.communicate(timeout=10)
        raise AssertionError(f"{exc}; committed {committed(broker_dir)}; worker's log:\n{err[-3000:]}") from None
    return worker


def test_a_healthy_worker_keeping_up_is_ok(cli, spawn, broker_dir, trickle) -> None:
    worker = start_worker(cli, spawn, broker_dir)
    trickle(TOPIC, every=0.5, burst=4)
    run = cli("lag", GROUP, *QUICK)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.startswith(f"group {GROUP}: OK  total lag "), run.stdout
    assert "1 live member(s), window 5/5 samples 0.2 s apart (complete)" in run.stdout
    assert [(r[0], r[1], r[2]) for r in rows(run.stdout)] == [(TOPIC, "0", "OK"), (TOPIC, "1", "OK")]
    assert worker.poll() is None


def test_a_killed_worker_is_stop_while_records_keep_arriving(cli, spawn, broker_dir, trickle) -> None:
    worker = start_worker(cli, spawn, broker_dir)
    worker.send_signal(signal.SIGKILL)
    worker.wait(timeout=10)
    assert cli("produce", TOPIC, stdin=lines(4)).returncode == 0  # lag on both partitions
    trickle(TOPIC, every=0.1, burst=2)
    wait_for(lambda: log_ends(broker_dir) > 8, 30, "the trickle's first records")
    run = cli("lag", GROUP, *QUICK)
    assert run.returncode == 4, run.stdout + run.stderr
    assert run.stdout.startswith(f"group {GROUP}: STOP  "), run.stdout
    assert "0 live member(s)" in run.stdout
    # the offsets stood at the last commit (2) for the whole window while the lag grew
    assert [(r[0], r[1], r[2], r[3], r[4]) for r in rows(run.stdout)] == [
        (TOPIC, "0", "STOP", "2", "2"), (TOPIC, "1", "STOP", "2", "2")]
    assert all(int(r[5]) >= 2 and int(r[6]) > int(r[5]) for r in rows(run.stdout))


def test_a_worker_hung_on_a_poison_record_is_stall(cli, spawn, broker_dir, trickle) -> None:
    worker = start_worker(cli, spawn, broker_dir)
    assert cli("produce", TOPIC, "--partition", "0", stdin='{"poison": true}\n').returncode == 0  # offset 2
    trickle(TOPIC, every=0.1, burst=2)
    run = cli("lag", GROUP, *QUICK, "--json")
    assert run.returncode == 5, run.stdout + run.stderr
    status = json.loads(run.stdout)
    assert (status["group"], status["status"], status["complete"]) == (GROUP, "ERR", True)
    poisoned = status["partitions"][0]
    assert (poisoned["partition"], poisoned["status"]) == (0, "STALL")
    # committed up to the poison record, never past it, while records pile up behind it
    assert poisoned["start"]["offset"] == poisoned["end"]["offset"] == 2
    assert poisoned["current_lag"] == poisoned["end"]["lag"] >= 1
    assert status["totallag"] == sum(p["current_lag"] for p in status["partitions"])
    assert worker.poll() is None, "the worker should hang on the record, not exit"


def test_watch_reevaluates_the_sliding_window_until_interrupted(cli, spawn, broker_dir, tmp_path) -> None:
    worker = start_worker(cli, spawn, broker_dir)
    worker.send_signal(signal.SIGKILL)
    worker.wait(timeout=10)
    assert cli("produce", TOPIC, stdin=lines(2)).returncode == 0
    watch = subprocess.Popen([sys.executable, "-m", "streamkit", "lag", GROUP, "--window", "3", "--interval", "0.1",
                              "--watch", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             cwd=REPO, env=_env(broker_dir))
    try:
        evaluations = [json.loads(watch.stdout.readline()) for _ in range(5)]  # type: ignore[union-attr]
        watch.send_signal(signal.SIGINT)
        _, err = watch.communicate(timeout=10)
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.communicate()
    assert watch.returncode == 4, err
    # after one sample nothing moved yet (OK, incomplete); from the third on the window is full
    assert [(e["status"], e["complete"]) for e in evaluations] == [
        ("OK", False), ("ERR", False), ("ERR", True), ("ERR", True), ("ERR", True)]
    assert {p["status"] for p in evaluations[-1]["partitions"]} == {"STOP"}


def test_an_unknown_group_is_an_error(cli) -> None:
    run = cli("lag", "nobody", "--window", "2", "--interval", "0.1")
    assert run.returncode == 1
    assert "unknown group 'nobody'" in run.stderr


def _env(broker_dir: Path) -> Dict[str, str]:
    return {**os.environ, "STREAMKIT_BROKER": f"embedded://{broker_dir}", "PYTHONPATH": str(REPO)}
