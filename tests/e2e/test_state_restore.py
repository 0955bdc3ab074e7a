"""Worker state across restarts: restore from the changelog (all of it, or only the tail
past the checkpoint), rebuilding corrupt state, and stores without a changelog."""
from __future__ import annotations

import os
import re
import shutil
import textwrap
from pathlib import Path

from streamkit.state.rocksdb import RocksDBBytesStore
from streamkit.broker import EmbeddedBroker

from tests.cli_processes import final_table

COUNT_APP = textwrap.dedent("""
    from datetime import timedelta
    import streamkit as sk

    app = sk.App("counter", commit_interval=timedelta(milliseconds=100))
    words = app.topic("words", key_serde=sk.serdes.Void(), value_serde=sk.serdes.String(), partitions=2)

    @app.processor(stores=[sk.stores.key_value("seen", changelog=False)])
    def remember(ctx, key, value):
        seen = ctx.store("seen")
        seen.put(value, (seen.get(value) or 0) + 1)
        ctx.forward(value, seen.get(value))

    @app.topology
    def build(b):
        keyed = b.stream(words).select_key(lambda k, v: v)
        keyed.group_by_key().count(name="counts").to_stream().to("counts-out")
        if WITH_UNLOGGED_STORE:
            keyed.process(remember).to("seen-out")
""")


def _setup(tmp_path: Path, cli, with_unlogged_store: bool = False) -> Path:
    (tmp_path / "counter_app.py").write_text(f"WITH_UNLOGGED_STORE = {with_unlogged_store}\n" + COUNT_APP)
    return tmp_path


def _produce_words(cli, words) -> None:
    result = cli("produce", "words", "--format", "text", stdin="".join(w + "\n" for w in words))
    assert result.returncode == 0, result.stderr


def _restored(stderr: str) -> int:
    return sum(int(n) for n in re.findall(r"restored (\d+) changelog record", stderr))


WORDS = [f"w{i % 40}" for i in range(2000)]


def _run(cli, workdir, *extra, env=None):
    return cli("worker", "counter_app", "--until-idle", "1", *extra, cwd=workdir, env=env)


def test_restore_from_the_changelog_alone(cli, tmp_path, broker_dir):
    workdir = _setup(tmp_path, cli)
    assert _run(cli, workdir).returncode == 0  # creates the topics
    _produce_words(cli, WORDS)
    first = _run(cli, workdir)
    assert first.returncode == 0, first.stderr
    shutil.rmtree(broker_dir / "state")
    _produce_words(cli, ["w0", "w1"])
    second = _run(cli, workdir)
    assert second.returncode == 0, second.stderr
    assert _restored(second.stderr) >= 40  # at least one changelog record per word
    counts = final_table(cli, "counts-out")
    assert counts["w0"] == 51 and counts["w1"] == 51 and counts["w2"] == 50
    described = cli("topics", "describe", "counter-counts-changelog")
    assert "cleanup.policy=compact" in described.stdout and "Partitions: 2" in described.stdout


def test_restore_from_the_checkpoint_replays_only_the_tail(cli, tmp_path, broker_dir):
    workdir = _setup(tmp_path, cli)
    assert _run(cli, workdir).returncode == 0
    _produce_words(cli, WORDS)
    assert _run(cli, workdir, "--guarantee", "exactly_once").returncode == 0  # state committed to RocksDB
    _produce_words(cli, [f"w{i}" for i in range(40)])
    # Commit 1 makes the repartitioned words visible, commit 2 holds the counts' changelog:
    # die after that transaction, before RocksDB got its writes.
    crashed = _run(cli, workdir, "--guarantee", "exactly_once",
                   env={"STREAMKIT_CRASH_AT": "commit.after_transaction:2"})
    assert crashed.returncode == -9
    broker = EmbeddedBroker(broker_dir)
    tail = total = 0
    for partition in range(2):
        store = RocksDBBytesStore(str(broker_dir / "state" / "counter" / f"1_{partition}" / "counts"))
        checkpoint = store.changelog_offset() or 0
        store.close()
        reader = broker.reader("counter-counts-changelog", partition)
        while True:
            records = reader.read(10_000)
            if not records:
                break
            total += len(records)
            tail += sum(1 for r in records if r[0] >= checkpoint)
    broker.close()
    assert 0 < tail < total
    resumed = _run(cli, workdir, "--guarantee", "exactly_once")
    assert resumed.returncode == 0, resumed.stderr
    assert _restored(resumed.stderr) == tail
    assert final_table(cli, "counts-out") == {f"w{i}": 51 for i in range(40)}


def test_corrupt_state_is_rebuilt_from_the_changelog(cli, tmp_path, broker_dir):
    workdir = _setup(tmp_path, cli)
    assert _run(cli, workdir).returncode == 0
    _produce_words(cli, WORDS)
    assert _run(cli, workdir).returncode == 0
    store_dir = broker_dir / "state" / "counter" / "1_0" / "counts"  # after the repartition
    for name in os.listdir(store_dir):
        if name.startswith(("CURRENT", "MANIFEST")):
            (store_dir / name).write_bytes(b"\x00garbage")
    _produce_words(cli, [f"w{i}" for i in range(40)])
    again = _run(cli, workdir)
    assert again.returncode == 0, again.stderr
    assert "could not be opened" in again.stderr and "rebuilding it from its changelog" in again.stderr
    assert final_table(cli, "counts-out") == {f"w{i}": 51 for i in range(40)}


def test_store_without_changelog_is_rebuilt_from_the_input(cli, tmp_path, broker_dir):
    workdir = _setup(tmp_path, cli, with_unlogged_store=True)
    assert _run(cli, workdir).returncode == 0
    _produce_words(cli, WORDS)
    assert _run(cli, workdir).returncode == 0
    assert "counter-seen-changelog" not in cli("topics", "list").stdout
    shutil.rmtree(broker_dir / "state")
    _produce_words(cli, ["w0"])
    again = _run(cli, workdir)
    assert again.returncode == 0, again.stderr
    assert "no changelog and no local state: rebuilding the task's state from the start" in again.stderr
    # The whole task was rebuilt from the input: nothing counted twice.
    assert final_table(cli, "seen-out")["w0"] == 51
    assert final_table(cli, "counts-out") == {**{f"w{i}": 50 for i in range(40)}, "w0": 51}
