"""exactly_once with one transactional producer per task (the Kafka path), run on the
embedded broker, whose transactions fence and time out as Kafka's do (issue 19 items 1
and 4): a task whose transaction ran past its timeout is fenced, closed dirty and
restarted from its committed offsets, with nothing lost or duplicated; a commit that
fails after some tasks committed leaves those tasks' stores persisted."""
from __future__ import annotations

import asyncio
import logging
import time
from datetime import timedelta
from pathlib import Path
from typing import Dict

import orjson
import pytest

import streamkit as sk
from streamkit import faults
from streamkit.broker import EmbeddedBroker
from streamkit.transport.embedded.transport import EmbeddedTransport

from .crashes import committed_records

USERS = 12
EVENTS = 600


def _count_app(app_id: str, slow_once: Dict[str, bool], *, changelog: bool = True,
               per_record_s: float = 0.0) -> sk.App:
    app = sk.App(app_id, store_backend="rocksdb", caching=False, commit_interval=timedelta(milliseconds=100),
                 processing_guarantee="exactly_once")
    events = app.topic("events", key_serde=sk.serdes.String(), value_serde=sk.serdes.Json(), partitions=2)

    def maybe_slow(value: dict) -> dict:
        if value["n"] == EVENTS // 2 and slow_once.pop("pending", False):
            time.sleep(0.8)  # this round outlives the 400 ms transaction timeout, once
        if per_record_s and slow_once.get("slow records", 0) > 0:
            slow_once["slow records"] -= 1
            time.sleep(per_record_s)
        return value

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        (b.stream(events).map_values(maybe_slow).group_by_key().count(name="counts", changelog=changelog)
         .to_stream().to("counts"))
    return app


def _produce(directory: Path, first: int = 0, end: int = EVENTS) -> None:
    with EmbeddedBroker(directory) as broker:
        broker.create_topic("events", 2, exist_ok=True)
        for partition in (0, 1):
            broker.append("events", partition, [
                (f"u{n % USERS}".encode(), orjson.dumps({"n": n}), 1_000 + n, None)
                for n in range(first, end) if n % USERS % 2 == partition])


def _final_counts(directory: Path) -> Dict[str, int]:
    return {key.decode(): orjson.loads(value) for key, value in committed_records(directory, "counts", 2)}


def _run(app: sk.App, directory: Path, state: Path, **transport_options) -> None:
    transport = EmbeddedTransport(str(directory), transactional_id_per_task=True, **transport_options)
    try:
        asyncio.run(app.worker(transport, until_idle=3.0, state_dir=str(state)).run())
    finally:
        transport.close()


def test_a_task_whose_transaction_timed_out_restarts_from_its_committed_offsets(tmp_path: Path, caplog) -> None:
    directory = tmp_path / "broker"
    _produce(directory)
    slow_once = {"pending": True}
    with caplog.at_level(logging.INFO, logger="streamkit"):
        _run(_count_app("timeout", slow_once), directory, tmp_path / "state", transaction_timeout_ms=400)
    assert not slow_once, "the slow record was never processed"
    assert "ran past its timeout" in caplog.text
    # The slow round held the whole worker up: both tasks' transactions timed out, and
    # both tasks were restarted.
    starts = [r.getMessage().split()[1] for r in caplog.records if "started at" in r.getMessage()]
    assert sorted(starts) == ["0_0", "0_0", "0_1", "0_1"]
    # Nothing lost, nothing counted twice: the aborted transaction's outputs never show.
    assert _final_counts(directory) == {f"u{u}": EVENTS // USERS for u in range(USERS)}
    counted = [orjson.loads(v) for k, v in committed_records(directory, "counts", 2)]
    assert len(counted) == EVENTS


def test_a_long_round_commits_when_due_instead_of_outliving_the_transaction_timeout(tmp_path: Path,
                                                                                     caplog) -> None:
    """600 records at 4 ms each (for their first two passes) are one fetch round of 2.4 s;
    transactions time out after 2 s. The worker cuts slow steps short and stops a round
    that reaches half the timeout (its rest runs after the commit), so no transaction
    times out (before: the round's transaction timed out, and its tasks restarted). The
    half left for the commit is 1 s: a busy CI machine took more than 0.5 s."""
    directory = tmp_path / "broker"
    _produce(directory)
    slow = {"slow records": 2 * EVENTS}
    with caplog.at_level(logging.INFO, logger="streamkit"):
        _run(_count_app("slow", slow, per_record_s=0.004), directory, tmp_path / "state",
             transaction_timeout_ms=2000)
    assert slow["slow records"] == EVENTS  # each record processed once
    assert "ran past its timeout" not in caplog.text
    assert _final_counts(directory) == {f"u{u}": EVENTS // USERS for u in range(USERS)}
    assert len(committed_records(directory, "counts", 2)) == EVENTS


@pytest.mark.parametrize("changelog", [True, False], ids=["changelogged", "unlogged"])
def test_a_failure_between_task_commits_keeps_the_committed_tasks_state(tmp_path: Path, changelog: bool) -> None:
    directory, state = tmp_path / "broker", tmp_path / "state"
    _produce(directory, 0, EVENTS // 2)
    _run(_count_app("between", {}, changelog=changelog), directory, state)   # stores persisted, all committed
    _produce(directory, EVENTS // 2, EVENTS)
    faults.arm("commit.between_tasks")  # the first task has committed the second half, the other not yet
    try:
        with pytest.raises(faults.InjectedFault):
            _run(_count_app("between", {}, changelog=changelog), directory, state)
    finally:
        faults.disarm()
    _run(_count_app("between", {}, changelog=changelog), directory, state)
    # More input shows what the stores hold: the committed task's store kept its second half.
    _produce(directory, EVENTS, EVENTS + EVENTS // 2)
    _run(_count_app("between", {}, changelog=changelog), directory, state)
    assert _final_counts(directory) == {f"u{u}": 3 * EVENTS // 2 // USERS for u in range(USERS)}
    assert len(committed_records(directory, "counts", 2)) == 3 * EVENTS // 2


def test_a_transaction_timeout_not_above_the_commit_interval_is_refused(tmp_path: Path) -> None:
    transport = EmbeddedTransport(str(tmp_path / "broker"), transactional_id_per_task=True,
                                  transaction_timeout_ms=100)
    try:
        with pytest.raises(sk.errors.ConfigError, match=r"transaction_timeout_ms \(100\) must be larger than "
                                                         r"the commit interval \(100 ms\)"):
            _count_app("refused", {}).worker(transport, state_dir=str(tmp_path / "state"))
    finally:
        transport.close()
