"""apps/orders.py (a windowed stream-stream join, a left join emitting unpaid orders at
window close, a repartition into a stream-table join, a global-table join) survives
kill -9 under exactly_once: its outputs hold exactly what an uninterrupted run of the
same input produced, once each."""
from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from apps.orders import produce_sample

from .crashes import committed_records, run_worker

ORDERS = 3_000
MIN_KILLS = 6
CRASH_POINTS = [None, "commit.after_send:2", None, "commit.after_transaction:1", None, "restore.batch:1",
                None, "commit.before_send:1"]


def _outputs(broker_dir: Path):
    return {topic: Counter(committed_records(broker_dir, topic, 3)) for topic in ("orders-enriched", "orders-unpaid")}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    workdir = tmp_path_factory.mktemp("orders-uninterrupted")
    broker_dir = workdir / "broker"
    produce_sample(f"embedded://{broker_dir}", ORDERS)
    code, err = run_worker(workdir, broker_dir, "apps.orders", "exactly_once", None, None)
    assert code == 0, err
    return broker_dir


def test_orders_app_exactly_once_across_kill_minus_9(tmp_path: Path, uninterrupted: Path) -> None:
    broker_dir = tmp_path / "broker"
    produce_sample(f"embedded://{broker_dir}", ORDERS)
    rng = random.Random(5)
    kills = rounds = 0
    while rounds < 40:
        crash_at = CRASH_POINTS[rounds % len(CRASH_POINTS)] if kills < MIN_KILLS else None
        kill_after = None if crash_at or kills >= MIN_KILLS else rng.uniform(0.5, 1.5)
        code, err = run_worker(tmp_path, broker_dir, "apps.orders", "exactly_once", crash_at, kill_after)
        rounds += 1
        if code == -9:
            kills += 1
            continue
        assert code == 0, err
        if kills >= MIN_KILLS:
            break
    assert kills >= MIN_KILLS, f"only {kills} kills in {rounds} rounds"

    expected, actual = _outputs(uninterrupted), _outputs(broker_dir)
    assert sum(expected["orders-enriched"].values()) > 2_000
    assert sum(expected["orders-unpaid"].values()) > 100
    for topic in expected:
        repeated = [key for key, n in actual[topic].items() if n > 1]
        assert not repeated, f"{topic}: records emitted more than once: {repeated[:3]}"
        missing = expected[topic] - actual[topic]
        extra = actual[topic] - expected[topic]
        assert not missing and not extra, \
            f"{topic}: {sum(missing.values())} missing, {sum(extra.values())} extra vs an uninterrupted run"
    print(f"\n{kills} kills in {rounds} rounds: {sum(actual['orders-enriched'].values())} enriched and "
          f"{sum(actual['orders-unpaid'].values())} unpaid orders, each exactly once")
