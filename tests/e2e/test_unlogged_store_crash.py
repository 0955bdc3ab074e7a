"""A store without a changelog survives a crash between the offset commit and its own
write (issue 19 item 6): it keeps, in the same RocksDB batch as its data, the input
offsets it reflects, and on restart the task replays the input from there to the
committed offsets with outputs muted. Checked with SIGKILL at the commit's crash points
and more input afterwards: every key's running count is exact.

The offsets a store records are exactly the input it reflects (issue 32): a store ahead
of the committed offsets (its last write's offsets never got committed) is rebuilt, not
fed that input again; one killed in the middle of a rebuild resumes from where the
rebuild had got to, not from the committed offsets it has not reached."""
from __future__ import annotations

import shutil
import textwrap
from collections import Counter
from pathlib import Path

import orjson
import pytest

from streamkit.broker import EmbeddedBroker
from streamkit.core.partitioner import partition_for_key

from .crashes import committed_records, run_worker

APP = textwrap.dedent("""
    import os
    import time
    from datetime import timedelta
    import streamkit as sk

    app = sk.App("unlogged", caching=False, commit_interval=timedelta(milliseconds=100))
    SLOW_RECORDS = os.environ.get("SLOW_RECORDS") == "1"
    events = app.topic("events", partitions=2)

    @app.processor(stores=[sk.stores.key_value("seen", changelog=False)])
    def running_count(ctx, key, value):
        if SLOW_RECORDS:
            time.sleep(0.002)
        seen = ctx.store("seen")
        n = (seen.get(key) or 0) + 1
        seen.put(key, n)
        ctx.forward(key, n)

    @app.topology
    def build(b):
        stream = b.stream(events)
        stream.process(running_count).to("counts-out")
        if WITH_CHANGELOGGED_STORE:
            stream.group_by_key().count(name="logged").to_stream().to("logged-out")
""")
KEYS = 30


def _produce(directory: Path, first: int, count: int) -> Counter:
    broker = EmbeddedBroker(directory)
    if broker.topic("events") is None:
        broker.create_topic("events", 2)
    keys = Counter()
    by_partition = {0: [], 1: []}
    for n in range(first, first + count):
        key = f"k{n % KEYS}"
        keys[key] += 1
        by_partition[partition_for_key(key.encode(), 2)].append((key.encode(), orjson.dumps({"n": n}), n, None))
    for partition, records in by_partition.items():
        broker.append("events", partition, records)
    broker.sync()
    broker.close()
    return keys


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
@pytest.mark.parametrize("crash_at", ["commit.after_transaction:1", "commit.after_persist:1",
                                      "commit.after_transaction:3"])
def test_an_unlogged_store_behind_the_committed_offsets_is_replayed(tmp_path: Path, guarantee: str,
                                                                    crash_at: str) -> None:
    """The first commit holds the input produced before the start: killed right after it
    (before the store's write) the store is behind; after its write, or at a later commit
    with nothing new, it is not."""
    (tmp_path / "unlogged_app.py").write_text("WITH_CHANGELOGGED_STORE = False\n" + APP)
    directory = tmp_path / "broker"
    expected = _produce(directory, 0, 3000)
    code, err = run_worker(tmp_path, directory, "unlogged_app", guarantee, crash_at, None)
    assert code == -9, err                       # killed after committing, before the store's write
    expected += _produce(directory, 3000, 1000)  # the commit the crash left behind, then more input
    code, err = run_worker(tmp_path, directory, "unlogged_app", guarantee, None, None)
    assert code == 0, err
    assert ("behind the committed offsets" in err) == (crash_at == "commit.after_transaction:1"), err
    expected += _produce(directory, 4000, 600)
    code, err = run_worker(tmp_path, directory, "unlogged_app", guarantee, None, None)
    assert code == 0, err
    latest = {k.decode(): orjson.loads(v) for k, v in committed_records(directory, "counts-out", 2)}
    assert latest == dict(expected)


def test_with_a_changelogged_store_beside_it_the_whole_task_is_rebuilt(tmp_path: Path) -> None:
    """Replaying input for the unlogged store would count it twice in the changelogged one
    (restored to the committed state): the task's stores are rebuilt from the start."""
    (tmp_path / "unlogged_app.py").write_text("WITH_CHANGELOGGED_STORE = True\n" + APP)
    directory = tmp_path / "broker"
    expected = _produce(directory, 0, 3000)
    code, err = run_worker(tmp_path, directory, "unlogged_app", "exactly_once", "commit.after_transaction:1", None)
    assert code == -9, err
    expected += _produce(directory, 3000, 1000)
    code, err = run_worker(tmp_path, directory, "unlogged_app", "exactly_once", None, None)
    assert code == 0, err
    assert "are behind the committed offsets: rebuilding the task's state from the start" in err
    for topic in ("counts-out", "logged-out"):
        latest = {k.decode(): orjson.loads(v) for k, v in committed_records(directory, topic, 2)}
        assert latest == dict(expected), topic


def _latest(directory: Path) -> dict:
    return {k.decode(): orjson.loads(v) for k, v in committed_records(directory, "counts-out", 2)}


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
def test_an_unlogged_store_ahead_of_the_committed_offsets_is_rebuilt(tmp_path: Path, cli, guarantee: str) -> None:
    """Offsets moved back below what the store reflects (here by ``groups reset-offsets``;
    in a group, a commit refused after the stores were written, see the crash matrix on
    Kafka): the input from there is processed again, so the store is rebuilt from the
    start of the input with outputs muted up to the committed offsets, and every running
    count from there on is exact (each record counted once)."""
    (tmp_path / "unlogged_app.py").write_text("WITH_CHANGELOGGED_STORE = False\n" + APP)
    directory = tmp_path / "broker"
    expected = _produce(directory, 0, 3000)
    code, err = run_worker(tmp_path, directory, "unlogged_app", guarantee, None, None)
    assert code == 0, err
    moved = cli("groups", "reset-offsets", "unlogged", "--topic", "events", "--shift-by", "-1000",
                "--execute")
    assert moved.returncode == 0, moved.stderr
    code, err = run_worker(tmp_path, directory, "unlogged_app", guarantee, None, None)
    assert code == 0, err
    assert "reflect input past the committed offsets" in err, err
    assert _latest(directory) == dict(expected)
    expected += _produce(directory, 3000, 600)
    code, err = run_worker(tmp_path, directory, "unlogged_app", guarantee, None, None)
    assert code == 0, err
    assert _latest(directory) == dict(expected)


def test_a_rebuild_killed_midway_resumes_where_it_had_got_to(tmp_path: Path, monkeypatch) -> None:
    """The store lost, its rebuild from the input is killed right after a commit that
    wrote it part-way (a round is cut after ROUND_LIMIT s: the slow records make the
    rebuild longer): the store records how far the rebuild got, not the committed offsets,
    so the next run replays the rest instead of starting at the committed offsets with
    the rest of the input missing from it."""
    (tmp_path / "unlogged_app.py").write_text("WITH_CHANGELOGGED_STORE = False\n" + APP)
    directory = tmp_path / "broker"
    expected = _produce(directory, 0, 4000)  # 8 s of slow records: longer than a round
    code, err = run_worker(tmp_path, directory, "unlogged_app", "at_least_once", None, None)
    assert code == 0, err
    shutil.rmtree(directory / "state")
    monkeypatch.setenv("SLOW_RECORDS", "1")
    code, err = run_worker(tmp_path, directory, "unlogged_app", "at_least_once", "commit.after_persist:1", None)
    assert code == -9, err
    monkeypatch.delenv("SLOW_RECORDS")
    assert "no local state: rebuilding" in err, err
    expected += _produce(directory, 4000, 600)  # counted on top of what the store holds
    code, err = run_worker(tmp_path, directory, "unlogged_app", "at_least_once", None, None)
    assert code == 0, err
    assert "are behind the committed offsets (a crash between the commit and their write): replaying" in err, err
    assert _latest(directory) == dict(expected)

