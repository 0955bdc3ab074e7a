"""Every stream app in ``apps/``: the live embedded worker and a Spark replay over the same
input give the same results.

Each test writes a modest, multi-partition input into a fresh embedded broker directory,
runs the real worker in-process until idle, then replays the app from the same directory
(its input topics only: the output topics, changelogs and repartition topics the live run
wrote there must not be read) and compares per key:

- table outputs (``count().to_stream()``): with the apps' default caching on, the live run
  forwards only some of the updates, so the last value per key must be equal and the live
  updates must be a subsequence of the replay's (the replay forwards every update);
- stream outputs and suppressed final results: the full per-key sequence.
"""
from __future__ import annotations

import importlib
import json
import os
import random
import sqlite3
from collections import Counter
from typing import Any, Dict, List, Sequence, Tuple

import pyarrow.parquet as pq
import pytest

import streamkit as sk
from streamkit.runtime.ordering.repartition_stamps import strip_markers
from streamkit.spark import ReplayRefusedError
from streamkit.broker.broker import EmbeddedBroker

from .harness import per_key, replay_outputs, worker_outputs, write_inputs

pytestmark = pytest.mark.spark

START_MS = 1_700_000_000_000


# -- helpers --------------------------------------------------------------------------------------

@pytest.fixture
def reload_with_env(monkeypatch):
    """Re-import an app module with environment variables set (the apps read them at import
    time); the module is re-imported again, with the old environment, afterwards."""
    reloaded = []

    def load(module_name: str, **env: str) -> Any:
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        module = importlib.reload(importlib.import_module(module_name))
        reloaded.append(module)
        return module

    yield load
    monkeypatch.undo()
    for module in reloaded:
        importlib.reload(module)


def read_broker_topic(app: Any, directory: str, topic: str) -> List[Tuple[Any, Any, int]]:
    """A topic of the broker in ``directory``, decoded with the app's serdes, in (partition, offset) order."""
    spec = app.build().topics[topic]
    out = []
    with EmbeddedBroker(directory) as broker:
        meta = broker.topic(topic)
        assert meta is not None, f"the live run wrote no topic {topic}"
        for partition in range(meta.partitions):
            reader = broker.reader(topic, partition)
            while batch := reader.read(10_000):
                out.extend((spec.key_serde.deserialize(k), spec.value_serde.deserialize(v), ts)
                           for _o, ts, k, v, _h in batch)
            reader.close()
    return out


def replay_metadata(output: str) -> Dict[str, Any]:
    with open(os.path.join(output, "_replay.json")) as f:
        return json.load(f)


def is_subsequence(short: Sequence[Any], long: Sequence[Any]) -> bool:
    it = iter(long)
    return all(any(item == candidate for candidate in it) for item in short)


def assert_table_parity(app: Any, topic: str, live: List[Any], replayed: List[Any]) -> None:
    """A table's changelog: the same final value per key; with caching on, the live updates
    are some of the replay's, in the same order."""
    live_keys, replay_keys = per_key(live), per_key(replayed)
    assert live_keys, f"the live run wrote nothing to {topic}"
    if not app.caching:
        assert replay_keys == live_keys, topic
        return
    assert {k: v[-1] for k, v in replay_keys.items()} == {k: v[-1] for k, v in live_keys.items()}, topic
    for key, updates in live_keys.items():
        assert is_subsequence(updates, replay_keys[key]), (topic, key, updates, replay_keys[key])


def assert_stream_parity(topic: str, live: List[Any], replayed: List[Any]) -> None:
    """A stream (or final results): every record per key, in order."""
    assert live, f"the live run wrote nothing to {topic}"
    assert per_key(replayed) == per_key(live), topic


def pageview_records(count: int, *, seed: int, late_share: float = 0.0, mean_gap_ms: float = 100.0
                     ) -> List[Tuple[str, str, dict, int]]:
    """``count`` generated page views (``apps.generate_pageviews``) keyed by user, with
    ``late_share`` of them moved 20-120 s back in event time; record time = event time."""
    from apps.generate_pageviews import pageviews

    views = pageviews(seed=seed, pages=12, users=40, start_ms=START_MS, mean_gap_ms=mean_gap_ms)
    rng = random.Random(seed)
    records = []
    for _ in range(count):
        view = next(views)
        if rng.random() < late_share:
            view = {**view, "ts": view["ts"] - rng.randrange(20_000, 120_000)}
        records.append(("pageviews", view["user"], view, view["ts"]))
    return records


def sqlite_rows(url: str, table: str) -> List[tuple]:
    path = url[len("sqlite:///"):]
    with sqlite3.connect(path) as connection:
        return sorted(connection.execute(f"SELECT * FROM {table}").fetchall())


# -- apps/pageviews -------------------------------------------------------------------------------

def test_pageviews_replay_equals_live_run(spark, tmp_path, reload_with_env):
    db = f"sqlite:///{tmp_path}/pageviews.db"
    pageviews = reload_with_env("apps.pageviews", PAGEVIEWS_DB=db)
    app = pageviews.app
    assert pageviews.DATABASE == db
    broker, out = str(tmp_path / "broker"), str(tmp_path / "out")
    records = pageview_records(3000, seed=3, late_share=0.03)  # ~5 minutes of event time
    write_inputs(app, broker, records, partitions={"pageviews": 3})

    live = worker_outputs(app, broker)
    live_late = read_broker_topic(app, broker, "pageviews-late")
    live_db = sqlite_rows(db, "page_counts_per_minute")

    replayed = replay_outputs(spark, app, broker, out, output_stores=False)

    assert set(replayed) == {"page-counts", "page-counts-per-minute", "pageviews-late"}
    assert replay_metadata(out)["input_records"] == len(records)  # the input topic only
    assert_table_parity(app, "page-counts", live["page-counts"], replayed["page-counts"])
    # the live table: the filtered views per lower-cased page
    expected_counts = Counter(v["page"].lower() for _t, _k, v, _ts in records if v["amount"] > 10)
    assert {k: v[-1][0] for k, v in per_key(replayed["page-counts"]).items()} == \
        {repr(page): n for page, n in expected_counts.items()}
    assert_stream_parity("page-counts-per-minute", live["page-counts-per-minute"],
                         replayed["page-counts-per-minute"])
    assert len(live["page-counts-per-minute"]) > 12  # several closed minutes
    # records behind the closed windows went to the late topic, the same ones
    assert len(live_late) > 0
    assert_stream_parity("pageviews-late", live_late, replayed["pageviews-late"])

    # The Database sink: the replay writes what it would have upserted as Parquet ...
    sink_rows = pq.read_table(os.path.join(out, "sinks", "minutes-to-sqlite")).to_pylist()
    sink_rows.sort(key=lambda r: (r["partition"], r["sequence"]))
    upserts: Dict[tuple, tuple] = {}
    for row in sink_rows:
        key = json.loads(row["key"])
        upserts[(key["key"], key["start"])] = (key["key"], key["start"], key["end"], json.loads(row["value"]))
    assert len(sink_rows) == len(replayed["page-counts-per-minute"])
    assert sorted(upserts.values()) == live_db  # ... the rows the live run upserted
    assert len(live_db) == len(live["page-counts-per-minute"])
    # ... and leaves the database alone: no row added, doubled or changed
    assert sqlite_rows(db, "page_counts_per_minute") == live_db


# -- apps/archive ---------------------------------------------------------------------------------

def archive_rows(directory: str) -> List[dict]:
    rows = [row for name in sorted(os.listdir(directory)) if name.endswith(".parquet")
            for row in pq.read_table(os.path.join(directory, name)).to_pylist()]
    return rows


def test_archive_replay_collects_exactly_the_archived_records(spark, tmp_path, reload_with_env):
    archive_dir = str(tmp_path / "archive")
    archive = reload_with_env("apps.archive", PAGEVIEWS_ARCHIVE=archive_dir)
    app = archive.app
    assert archive.ARCHIVE == archive_dir
    broker, out = str(tmp_path / "broker"), str(tmp_path / "out")
    records = pageview_records(1500, seed=11, late_share=0.02)
    write_inputs(app, broker, records, partitions={"pageviews": 3})

    assert worker_outputs(app, broker) == {}  # no output topic: an external sink only
    live = archive_rows(archive_dir)
    assert len(live) == len(records)
    before = {name: os.stat(os.path.join(archive_dir, name)).st_mtime_ns for name in os.listdir(archive_dir)}

    result = sk.spark.replay(app, inputs={"pageviews": broker}, output=out, spark=spark, output_stores=False)

    assert result.input_records == len(records)
    assert [(o.kind, o.name, o.records) for o in result.outputs] == [("sink", "archive", len(records))]
    replayed = pq.read_table(os.path.join(out, "sinks", "archive")).to_pylist()

    def by_partition(rows: List[dict], order: str) -> Dict[int, list]:
        grouped: Dict[int, list] = {}
        for row in sorted(rows, key=lambda r: (r["partition"], r[order])):
            grouped.setdefault(row["partition"], []).append(
                (json.loads(row["key"]), json.loads(row["value"]), row["timestamp"]))
        return grouped

    assert by_partition(replayed, "sequence") == by_partition(live, "offset")
    assert len(by_partition(live, "offset")) == 3
    # the replay did not write to the live archive
    assert {name: os.stat(os.path.join(archive_dir, name)).st_mtime_ns
            for name in os.listdir(archive_dir)} == before


# -- apps/orders ----------------------------------------------------------------------------------

def test_orders_replay_equals_live_run(spark, tmp_path):
    from apps.orders import app, produce_sample

    broker, out = str(tmp_path / "broker"), str(tmp_path / "out")
    # 1500 orders, 400 ms apart: ten minutes of event time, so the first unpaid orders'
    # join windows (5 min + 30 s grace) close and go to orders-unpaid
    written = produce_sample(f"embedded://{broker}", 1500, seed=4)

    live = worker_outputs(app, broker)
    replayed = replay_outputs(spark, app, broker, out, output_stores=False)

    # the input topics only (the global table's topic is read by each task itself, and
    # counted or not): no output, changelog or repartition topic of the live run
    stream_inputs = written["orders"] + written["payments"] + written["customers"]
    assert stream_inputs <= replay_metadata(out)["input_records"] <= sum(written.values())
    assert set(live) == {"orders-enriched", "orders-unpaid"}
    assert set(replayed) == set(live)
    assert_stream_parity("orders-enriched", live["orders-enriched"], replayed["orders-enriched"])
    assert_stream_parity("orders-unpaid", live["orders-unpaid"], replayed["orders-unpaid"])
    assert len(live["orders-enriched"]) > 1000
    assert all(order["region"] and order["customer"] for _k, order, _ts in replayed["orders-enriched"])



# -- apps/avro_orders -----------------------------------------------------------------------------

def test_avro_orders_replay_equals_live_run(spark, tmp_path):
    """The Avro app: inputs, outputs and state in Confluent's wire format, the schemas in
    a `streamkit registry serve` process on the broker directory (an http:// registry:
    the worker here, the Spark executors and the reads below all reach it)."""
    from apps.avro_orders import avro_orders_app, produce_sample
    from tests.schemas.registry_servers import RegistryProcess

    broker, out = str(tmp_path / "broker"), str(tmp_path / "out")
    registry = RegistryProcess(f"embedded://{broker}", tmp_path / "registry.log")
    try:
        app = avro_orders_app(registry=registry.url)
        written = produce_sample(f"embedded://{broker}", 1500, seed=4, registry=registry.url)

        live = worker_outputs(app, broker)
        replayed = replay_outputs(spark, app, broker, out, output_stores=False)
    finally:
        assert registry.stop() == 0, registry.log()

    assert replay_metadata(out)["input_records"] == sum(written.values())
    assert set(live) == {"avro-orders-enriched", "avro-customer-totals"}
    assert set(replayed) == set(live)
    assert_stream_parity("avro-orders-enriched", live["avro-orders-enriched"], replayed["avro-orders-enriched"])
    assert_table_parity(app, "avro-customer-totals", live["avro-customer-totals"], replayed["avro-customer-totals"])
    assert len(live["avro-orders-enriched"]) > 1000


# -- apps/user_sessions ---------------------------------------------------------------------------

def click_records(users: int = 30, clicks: int = 50, seed: int = 2) -> List[Tuple[str, str, dict, int]]:
    """Clicks per user, mostly seconds apart, sometimes minutes (a new session), a few
    of them out of order (late, some within the sessions' grace)."""
    rng = random.Random(seed)
    times = []
    for user in range(users):
        ts = START_MS + rng.randrange(0, 60_000)
        for _ in range(clicks):
            ts += rng.randrange(5_000, 90_000) if rng.random() < 0.85 else rng.randrange(6 * 60_000, 30 * 60_000)
            times.append((ts, f"u{user}"))
    times.sort()
    records = []
    for ts, user in times:
        if rng.random() < 0.05:
            ts -= rng.randrange(60_000, 200_000)
        records.append(("clicks", user, {"page": f"/p{rng.randrange(8)}", "ts": ts}, ts))
    return records


def test_user_sessions_replay_is_refused_then_equals_live_run_when_approximate(spark, tmp_path):
    from apps.user_sessions import app

    broker, out = str(tmp_path / "broker"), str(tmp_path / "out")
    records = click_records()
    write_inputs(app, broker, records, partitions={"clicks": 3})

    # the worker stops after 1 s idle: long before close_idle_windows_after (1 minute) could
    # close a window, so the live sessions are the ones stream time closed
    live = worker_outputs(app, broker)

    with pytest.raises(ReplayRefusedError, match="node 'sessions'.*close_idle_windows_after"):
        sk.spark.replay(app, inputs={"clicks": broker}, output=str(tmp_path / "refused"), spark=spark)

    replayed = replay_outputs(spark, app, broker, out, allow_approximate=True, output_stores=False)
    assert any("sessions" in note for note in replay_metadata(out)["approximations"])
    assert replay_metadata(out)["input_records"] == len(records)
    assert set(replayed) == {"user-sessions"}
    assert_stream_parity("user-sessions", live["user-sessions"], replayed["user-sessions"])
    assert len(live["user-sessions"]) > 50
    assert sum(s["clicks"] for _u, s, _ts in live["user-sessions"]) < len(records)  # open sessions stay open


# -- apps/wordcount -------------------------------------------------------------------------------

def test_wordcount_replay_equals_live_run(spark, tmp_path):
    from apps.wordcount import app

    broker, out = str(tmp_path / "broker"), str(tmp_path / "out")
    rng = random.Random(7)
    vocabulary = [f"w{i}" for i in range(40)] + ["The", "the", "it's", "Cat", "cat"]
    lines = [" ".join(rng.choice(vocabulary) for _ in range(rng.randrange(1, 9))) for _ in range(1200)]
    spec = app.build().topics["lines"]
    # keyless lines, spread over the topic's 3 partitions; 30 lines a second, so the partitions
    # have many equal timestamps (the tasks' merge order breaks the ties)
    with EmbeddedBroker(broker) as b:
        b.create_topic("lines", 3, exist_ok=True)
        for i, line in enumerate(lines):
            b.append("lines", i % 3, [(None, spec.value_serde.serialize(line), START_MS + (i // 30) * 1000, None)])

    live = worker_outputs(app, broker)
    replayed = replay_outputs(spark, app, broker, out)

    assert replay_metadata(out)["input_records"] == len(lines)
    assert set(replayed) == set(live) == {"word-counts"}
    assert_table_parity(app, "word-counts", live["word-counts"], replayed["word-counts"])
    expected = Counter(word for line in lines for word in line.lower().split())
    assert {k: v[-1][0] for k, v in per_key(replayed["word-counts"]).items()} == \
        {repr(word): n for word, n in expected.items()}
    # the final store: the live table, each word in the partition its repartition topic gave it
    store = pq.read_table(os.path.join(out, "stores", "word-counts")).to_pylist()
    assert {json.loads(row["key"]): json.loads(row["value"]) for row in store} == dict(expected)
    assert len(store) == len(expected)
    repartition = app.build().topics["wordcount-word-counts-repartition"]
    live_partition = {}
    with EmbeddedBroker(broker) as b:
        for partition in range(b.topic(repartition.name).partitions):
            reader = b.reader(repartition.name, partition)
            while batch := reader.read(10_000):
                live_partition.update((repartition.key_serde.deserialize(k), partition)
                                      for _o, _ts, k, _v, _h in strip_markers(batch))  # markers: no key
            reader.close()
    assert {json.loads(row["key"]): row["partition"] for row in store} == live_partition


def test_every_stream_app_has_a_parity_test():
    """A new app in apps/ needs a test here."""
    here = open(__file__).read()
    apps_dir = os.path.join(os.path.dirname(__file__), "..", "..", "apps")
    for name in sorted(os.listdir(apps_dir)):
        if not name.endswith(".py") or name == "__init__.py":
            continue
        module = importlib.import_module(f"apps.{name[:-3]}")
        if isinstance(getattr(module, "app", None), sk.App):
            assert f"def test_{name[:-3].replace('.', '_')}_" in here, name
