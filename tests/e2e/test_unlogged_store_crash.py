"""A store without a changelog survives a crash between the offset commit and its own
write (issue 19 item 6): it keeps, in the same RocksDB batch as its data, the input
offsets it reflects, and on restart the task replays the input from there to the
committed offsets with outputs muted. Checked with SIGKILL at the commit's crash points
and more input afterwards: every key's running count is exact."""
from __future__ import annotations

import textwrap
from collections import Counter
from pathlib import Path

import orjson
import pytest

from streamkit.transport.embedded import EmbeddedBroker
from streamkit.transport.partitioner import partition_for_key

from .crashes import committed_records, run_worker

APP = textwrap.dedent("""
    from datetime import timedelta
    import streamkit as sk

    app = sk.App("unlogged", caching=False, commit_interval=timedelta(milliseconds=100))
    events = app.topic("events", partitions=2)

    @app.processor(stores=[sk.stores.key_value("seen", changelog=False)])
    def running_count(ctx, key, value):
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
