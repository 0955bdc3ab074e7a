"""``apps/archive.py`` on the real worker: the pageviews topic archived to Parquet exactly
once, and replayed from the archive by a second app as the same records."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import orjson
import pyarrow.parquet as pq

from tests.cli_processes import REPO

VIEWS = 900


def produce_views(cli) -> list:
    assert cli("topics", "create", "pageviews", "--partitions", "3").returncode == 0
    views = [{"user": f"u{i % 37}", "page": f"p{i % 11}", "ts": 1_700_000_000_000 + i * 500, "amount": i % 50}
             for i in range(VIEWS)]
    stdin = "".join(orjson.dumps(view).decode() + "\n" for view in views)
    assert cli("produce", "pageviews", "--key-field", "user", stdin=stdin).returncode == 0
    return views


def test_archive_app_writes_each_view_once_and_a_replay_reads_them_back(cli, tmp_path: Path) -> None:
    views = produce_views(cli)
    archive = tmp_path / "archive"
    env = {"PAGEVIEWS_ARCHIVE": str(archive)}
    run = cli("worker", "apps.archive", "--until-idle", "1", env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    files = sorted(archive.glob("*.parquet"))
    rows = [row for path in files for row in pq.read_table(path).to_pylist()]
    assert sorted(orjson.loads(row["value"])["ts"] for row in rows) == [view["ts"] for view in views]
    assert len({(row["partition"], row["offset"]) for row in rows}) == VIEWS
    for path in files:  # <topic>+<partition>+<first>-<last>.parquet
        offsets = [row["offset"] for row in pq.read_table(path).to_pylist()]
        assert path.name == f"pageviews+{rows_partition(path)}+{min(offsets)}-{max(offsets)}.parquet"
    assert all(orjson.loads(row["key"]) == orjson.loads(row["value"])["user"] for row in rows)

    # A second run finds nothing new: no file is added.
    again = cli("worker", "apps.archive", "--until-idle", "1", env=env, timeout=120)
    assert again.returncode == 0, again.stderr
    assert sorted(archive.glob("*.parquet")) == files

    # The archive replayed on the streaming runtime: the per-page counts of apps.pageviews' filter.
    (tmp_path / "replay.py").write_text(
        "import streamkit as sk\n"
        "app = sk.App('archive-replay')\n"
        "@app.topology\n"
        "def build(b):\n"
        f"    (b.stream(sk.sources.ParquetArchive({str(archive)!r}))\n"
        "      .filter(lambda k, v: v['amount'] > 10)\n"
        "      .group_by(lambda k, v: v['page']).count(name='c').to_stream()\n"
        "      .sink(sk.sinks.Database('sqlite:///replay.db', 'counts', key_columns=['page'])))\n")
    replay = cli("worker", "replay", "--until-idle", "1", cwd=tmp_path,
                 env={"PYTHONPATH": f"{tmp_path}:{REPO}"}, timeout=120)
    assert replay.returncode == 0, replay.stderr
    with sqlite3.connect(tmp_path / "replay.db") as connection:
        counts = dict(connection.execute("SELECT page, value FROM counts").fetchall())
    expected: dict = {}
    for view in views:
        if view["amount"] > 10:
            expected[view["page"]] = expected.get(view["page"], 0) + 1
    assert counts == expected


def rows_partition(path: Path) -> int:
    return int(path.name.split("+")[1])
