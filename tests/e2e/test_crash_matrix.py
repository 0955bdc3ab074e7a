"""kill -9 at any moment: after restart, exactly_once outputs and state are as if no
crash happened; at_least_once loses nothing.

A worker subprocess counts by key and keeps a Processor-API running total over
pre-produced records. It is killed with SIGKILL again and again: at random
moments, and at named crash points inside the commit and the restore
(STREAMKIT_CRASH_AT), once with its state directory deleted. Whenever a worker
finishes its input before the next kill (a fast machine), another chunk of input
is appended, so the number of kills never depends on the machine's speed. Then it
runs to completion and every output and store is checked against the input.
"""
from __future__ import annotations

import random
import shutil
import sys
import textwrap
from collections import defaultdict
from pathlib import Path

import orjson
import pytest

from streamkit.broker import EmbeddedBroker
from streamkit.core.partitioner import partition_for_key

from .crashes import committed_records, run_worker

CHUNK = 100_000     # records appended per chunk
MAX_CHUNKS = 12
KEYS = 300
PARTITIONS = 3
MIN_KILLS = 20

APP = textwrap.dedent("""
    from datetime import timedelta
    import streamkit as sk

    app = sk.App("crashy", caching=False, commit_interval=timedelta(milliseconds=100))
    events = app.topic("events", partitions=3)

    @app.processor(stores=[sk.stores.key_value("totals")])
    def running_total(ctx, key, value):
        totals = ctx.store("totals")
        total = (totals.get(key) or 0) + value["amount"]
        totals.put(key, total)
        ctx.forward(key, total)

    @app.topology
    def build(b):
        stream = b.stream(events)
        stream.group_by_key().count(name="counts").to_stream().to("counts-out")
        stream.process(running_total).to("totals-out")
""")

# Crash points, cycled; None = SIGKILL from outside at a random moment.
CRASH_POINTS = ["commit.after_send:2", None, "commit.after_transaction:1", "restore.batch:1", None,
                "commit.before_send:1", None, "commit.after_persist:1", None, "commit.after_transaction:2"]


def _inputs(chunk: int):
    rng = random.Random(11 + chunk)
    first = chunk * CHUNK
    return [(f"k{rng.randrange(KEYS)}", {"n": first + i, "amount": rng.randrange(1, 10)}) for i in range(CHUNK)]


def _produce(directory: Path, inputs, first_timestamp: int) -> None:
    broker = EmbeddedBroker(directory)
    if broker.topic("events") is None:
        broker.create_topic("events", PARTITIONS)
    per_partition = defaultdict(list)
    for i, (key, value) in enumerate(inputs):
        per_partition[partition_for_key(key.encode(), PARTITIONS)].append(
            (key.encode(), orjson.dumps(value), first_timestamp + i, None))
    for partition, records in per_partition.items():
        for start in range(0, len(records), 2000):
            broker.append("events", partition, records[start:start + 2000])
    broker.sync()
    broker.close()


def _run_worker(workdir: Path, broker_dir: Path, guarantee: str, crash_at, kill_after):
    return run_worker(workdir, broker_dir, "crashy_app", guarantee, crash_at, kill_after)


def _outputs(broker_dir: Path, topic: str):
    per_key = defaultdict(list)
    for key, value in committed_records(broker_dir, topic, PARTITIONS):
        per_key[key.decode()].append(orjson.loads(value))
    return per_key


def _stores(broker_dir: Path):
    sys.path.insert(0, str(broker_dir.parent))
    try:
        from streamkit.state.task_stores import open_task_stores
        import crashy_app  # noqa: F401  (the app module written by the test)
        topology = crashy_app.app.build()
    finally:
        sys.path.pop(0)
    counts, totals = {}, {}
    for partition in range(PARTITIONS):
        stores = open_task_stores(topology.stores.values(), app_id="crashy", task_id=f"0_{partition}",
                                  partition=partition, backend="rocksdb",
                                  state_dir=str(broker_dir / "state" / "crashy"))
        counts.update(stores.by_name["counts"].all())
        totals.update(stores.by_name["totals"].all())
        stores.close()
    sys.modules.pop("crashy_app", None)
    return counts, totals


@pytest.mark.parametrize("guarantee", ["exactly_once", "at_least_once"])
def test_kill_minus_9_anywhere(tmp_path: Path, guarantee: str) -> None:
    workdir = tmp_path
    (workdir / "crashy_app.py").write_text(APP)
    broker_dir = workdir / "broker"
    inputs = _inputs(0)
    _produce(broker_dir, inputs, 1_000)

    rng = random.Random(5)
    kills, rounds, deleted_state = 0, 0, False
    while kills < MIN_KILLS and rounds < 80:
        crash_at = CRASH_POINTS[rounds % len(CRASH_POINTS)]
        if rounds == 7 and not deleted_state:
            shutil.rmtree(broker_dir / "state", ignore_errors=True)  # restore from the changelog alone
            deleted_state = True
        code, err = _run_worker(workdir, broker_dir, guarantee, crash_at,
                                None if crash_at else rng.uniform(0.3, 1.0))
        rounds += 1
        if code == -9:
            kills += 1
            continue
        assert code == 0, err
        if len(inputs) // CHUNK == MAX_CHUNKS:
            break
        chunk = _inputs(len(inputs) // CHUNK)  # all processed before the kill: give it more work
        _produce(broker_dir, chunk, 1_000 + len(inputs))
        inputs += chunk
    assert kills >= MIN_KILLS, f"only {kills} kills happened before the input ran out ({rounds} rounds)"
    code, err = _run_worker(workdir, broker_dir, guarantee, None, None)
    assert code == 0, err

    expected_counts, expected_totals = defaultdict(list), defaultdict(list)
    for key, value in inputs:
        expected_counts[key].append(len(expected_counts[key]) + 1)
        previous = expected_totals[key][-1] if expected_totals[key] else 0
        expected_totals[key].append(previous + value["amount"])

    counts = _outputs(broker_dir, "counts-out")
    totals = _outputs(broker_dir, "totals-out")
    store_counts, store_totals = _stores(broker_dir)
    if guarantee == "exactly_once":
        assert store_counts == {k: v[-1] for k, v in expected_counts.items()}
        assert dict(counts) == dict(expected_counts), "count results duplicated or missing"
        assert dict(totals) == dict(expected_totals), "running totals duplicated or missing"
        assert store_totals == {k: v[-1] for k, v in expected_totals.items()}
        print(f"\n{guarantee}: {kills} kills in {rounds} rounds over {len(inputs)} records, every result exactly once")
    else:
        missing = {k: set(v) - set(counts.get(k, [])) for k, v in expected_counts.items()}
        assert not any(missing.values()), f"count results missing: {missing}"
        # A crash after a changelog was written but before the input offsets were
        # committed replays that input on top of restored state: counts can only grow.
        assert all(store_counts[k] >= v[-1] for k, v in expected_counts.items())
        duplicates = sum(len(v) for v in counts.values()) - len(inputs)
        print(f"\n{guarantee}: {kills} kills in {rounds} rounds over {len(inputs)} records, nothing missing, {duplicates} duplicate results")
