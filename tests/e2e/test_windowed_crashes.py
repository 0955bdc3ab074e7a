"""Windowed aggregations survive kill -9: under exactly_once each suppressed final
window result appears exactly once, and the windowed tables end as in an
uninterrupted run of the same input (which also proves stream time is restored:
a restarted task that forgot it would accept records the first run dropped as late).
"""
from __future__ import annotations

import random
import textwrap
from collections import Counter, defaultdict
from pathlib import Path

import orjson
import pytest

from streamkit.broker import EmbeddedBroker
from streamkit.core.partitioner import partition_for_key

from .crashes import committed_records, run_worker

RECORDS = 60_000
KEYS = 50
PARTITIONS = 3
MIN_KILLS = 8

APP = textwrap.dedent("""
    from datetime import timedelta
    import streamkit as sk

    app = sk.App("windowy", commit_interval=timedelta(milliseconds=100))
    clicks = app.topic("clicks", partitions=3)

    @app.topology
    def build(b):
        per_key = b.stream(clicks, timestamp=lambda k, v: v["ts"]).group_by_key()
        minute = per_key.windowed_by(sk.TumblingWindows(size=timedelta(seconds=10), grace=timedelta(seconds=2)))
        minute.count(name="counts").to_stream().to("counts-out")
        (minute.count(name="final-counts", late_records_topic="late")
               .suppress(sk.Suppressed.until_window_closes(), name="finals")
               .to_stream().to("finals-out"))
        (per_key.windowed_by(sk.SessionWindows(inactivity_gap=timedelta(seconds=3), grace=timedelta(seconds=1)))
                .count(name="sessions").to_stream().to("sessions-out"))
""")

CRASH_POINTS = [None, "commit.after_send:2", None, "commit.after_transaction:1", None, "restore.batch:1",
                None, "commit.before_send:1", None, "commit.after_persist:1"]


def _inputs():
    """Event time advancing ~10 ms per record; 1% a little out of order (within grace),
    0.2% far behind (late)."""
    rng = random.Random(7)
    out = []
    for i in range(RECORDS):
        ts = 1_000_000 + i * 10
        roll = rng.random()
        if roll < 0.01:
            ts -= rng.randrange(1, 1_500)
        elif roll < 0.012:
            ts -= rng.randrange(20_000, 40_000)
        out.append((f"user-{rng.randrange(KEYS)}", {"ts": ts}))
    return out


def _produce(directory: Path, inputs) -> None:
    broker = EmbeddedBroker(directory)
    broker.create_topic("clicks", PARTITIONS)
    per_partition = defaultdict(list)
    for i, (key, value) in enumerate(inputs):
        per_partition[partition_for_key(key.encode(), PARTITIONS)].append(
            (key.encode(), orjson.dumps(value), value["ts"], None))
    for partition, records in per_partition.items():
        for start in range(0, len(records), 2000):
            broker.append("clicks", partition, records[start:start + 2000])
    broker.sync()
    broker.close()


def _run_worker(workdir: Path, broker_dir: Path, crash_at, kill_after):
    return run_worker(workdir, broker_dir, "windowy_app", "exactly_once", crash_at, kill_after)


def _records(broker_dir: Path, topic: str):
    return committed_records(broker_dir, topic, PARTITIONS)


def _table(records):
    table = {}
    for key, value in records:
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value
    return table


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    workdir = tmp_path_factory.mktemp("uninterrupted")
    (workdir / "windowy_app.py").write_text(APP)
    broker_dir = workdir / "broker"
    _produce(broker_dir, _inputs())
    code, err = _run_worker(workdir, broker_dir, None, None)
    assert code == 0, err
    return broker_dir


def test_windows_exactly_once_across_kill_minus_9(tmp_path: Path, uninterrupted: Path) -> None:
    workdir = tmp_path
    (workdir / "windowy_app.py").write_text(APP)
    broker_dir = workdir / "broker"
    _produce(broker_dir, _inputs())
    rng = random.Random(3)
    kills = rounds = 0
    finished = False
    while kills < MIN_KILLS and rounds < 40:
        crash_at = CRASH_POINTS[rounds % len(CRASH_POINTS)]
        code, err = _run_worker(workdir, broker_dir, crash_at, None if crash_at else rng.uniform(0.4, 1.2))
        rounds += 1
        if code == -9:
            kills += 1
            continue
        assert code == 0, err
        finished = True
        break
    if not finished:
        code, err = _run_worker(workdir, broker_dir, None, None)
        assert code == 0, err

    finals = _records(broker_dir, "finals-out")
    expected_finals = _records(uninterrupted, "finals-out")
    repeated = [key for key, n in Counter(key for key, _ in finals).items() if n > 1]
    assert not repeated, f"final window results emitted more than once: {repeated[:5]}"
    assert sorted(finals) == sorted(expected_finals), "final window results differ from an uninterrupted run"
    assert len(expected_finals) > 500
    for topic in ("counts-out", "sessions-out"):
        assert _table(_records(broker_dir, topic)) == _table(_records(uninterrupted, topic)), topic
    late = _records(broker_dir, "late")
    assert sorted(late) == sorted(_records(uninterrupted, "late")) and late, "late records differ"
    print(f"\n{kills} kills in {rounds} rounds: {len(finals)} final windows exactly once, {len(late)} late records")
