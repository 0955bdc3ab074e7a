"""``sk.sinks.Database``: upserts into real SQLite and PostgreSQL, exactly once.

Most tests run against both databases (the ``db`` fixture); the PostgreSQL variant
uses a fresh schema of the session's server (``postgres_url``) and is skipped,
with the reason, when no server can be started. Nothing under test is mocked:
writers are driven either through the ``TopologyTestDriver`` (which commits, and so
delivers, after every piped record) or directly through the writer API the task
uses (``open``/``start``/``write``/``commit``).
"""
from __future__ import annotations

import json
import logging
import socket
import sqlite3
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable, Dict, Iterator, List, Sequence

import pytest

import streamkit as sk
from streamkit.errors import ConfigError, SerializationError, SinkError, TaskMigratedError
from streamkit.sinks import Database, RetryPolicy, SinkRecord, SinkTask
from streamkit.testing import TopologyTestDriver
from streamkit.transport.base import TopicPartition

TP = TopicPartition("in", 0)
FAST_RETRY = RetryPolicy(attempts=3, first_backoff=0.01, max_backoff=0.05)


# -- databases ---------------------------------------------------------------------------

class SQLiteDB:
    name = "sqlite"

    def __init__(self, path: Any) -> None:
        self.path = str(path)
        self.url = f"sqlite:///{self.path}"

    def query(self, sql: str, params: Sequence[Any] = ()) -> List[tuple]:
        connection = sqlite3.connect(self.path)
        try:
            return [tuple(row) for row in connection.execute(sql, tuple(params)).fetchall()]
        finally:
            connection.close()

    def execute(self, *statements: str) -> None:
        connection = sqlite3.connect(self.path, isolation_level=None)
        try:
            for statement in statements:
                connection.execute(statement)
        finally:
            connection.close()

    def table_exists(self, table: str) -> bool:
        return bool(self.query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)))

    def column_types(self, table: str) -> Dict[str, str]:
        return {row[1]: row[2].upper() for row in self.query(f'PRAGMA table_info("{table}")')}

    def install_audit(self) -> None:
        """Table ``rows(id, n)`` whose every insert, update and delete is logged in ``audit``."""
        self.execute(
            "CREATE TABLE rows (id INTEGER PRIMARY KEY, n INTEGER)",
            "CREATE TABLE audit (seq INTEGER PRIMARY KEY AUTOINCREMENT, op TEXT, id INTEGER, n INTEGER)",
            "CREATE TRIGGER rows_ins AFTER INSERT ON rows BEGIN "
            "INSERT INTO audit (op, id, n) VALUES ('insert', NEW.id, NEW.n); END",
            "CREATE TRIGGER rows_upd AFTER UPDATE ON rows BEGIN "
            "INSERT INTO audit (op, id, n) VALUES ('update', NEW.id, NEW.n); END",
            "CREATE TRIGGER rows_del AFTER DELETE ON rows BEGIN "
            "INSERT INTO audit (op, id, n) VALUES ('delete', OLD.id, OLD.n); END")


class PostgresDB:
    name = "postgresql"

    def __init__(self, url: str) -> None:
        self.url = url

    def url_named(self, application_name: str) -> str:
        """The URL, for connections that show as ``application_name`` in ``pg_stat_activity``."""
        return f"{self.url}&application_name={application_name}"

    def _connect(self) -> Any:
        import psycopg

        return psycopg.connect(self.url, autocommit=True)

    def query(self, sql: str, params: Sequence[Any] = ()) -> List[tuple]:
        with self._connect() as connection:
            return [tuple(row) for row in connection.execute(sql.replace("?", "%s"), tuple(params)).fetchall()]

    def execute(self, *statements: str) -> None:
        with self._connect() as connection:
            for statement in statements:
                connection.execute(statement)

    def table_exists(self, table: str) -> bool:
        return self.query("SELECT to_regclass(?)", (f'"{table}"',))[0][0] is not None

    def column_types(self, table: str) -> Dict[str, str]:
        return {name: kind.upper() for name, kind in self.query(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name = ?", (table,))}

    def install_audit(self) -> None:
        self.execute(
            "CREATE TABLE rows (id BIGINT PRIMARY KEY, n BIGINT)",
            "CREATE TABLE audit (seq BIGSERIAL PRIMARY KEY, op TEXT, id BIGINT, n BIGINT)",
            "CREATE FUNCTION rows_audit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "IF TG_OP = 'DELETE' THEN INSERT INTO audit (op, id, n) VALUES ('delete', OLD.id, OLD.n); RETURN OLD; "
            "END IF; INSERT INTO audit (op, id, n) VALUES (lower(TG_OP), NEW.id, NEW.n); RETURN NEW; END $$",
            "CREATE TRIGGER rows_audit AFTER INSERT OR UPDATE OR DELETE ON rows "
            "FOR EACH ROW EXECUTE FUNCTION rows_audit()")

    def wait_for_lock_waiters(self, application_name: str, count: int, timeout: float = 20.0) -> None:
        """Block until ``count`` sessions named ``application_name`` wait on a lock."""
        deadline = time.monotonic() + timeout
        while True:
            waiting = self.query("SELECT count(*) FROM pg_stat_activity WHERE application_name = ? "
                                 "AND wait_event_type = 'Lock'", (application_name,))[0][0]
            if waiting >= count:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"expected {count} session(s) of {application_name} waiting on a lock, "
                                   f"found {waiting}")
            time.sleep(0.02)

    def terminate(self, application_name: str, timeout: float = 20.0) -> int:
        """Kill the server sessions named ``application_name`` and wait until those are gone."""
        pids = [pid for (pid,) in self.query("SELECT pid FROM pg_stat_activity WHERE application_name = ?",
                                             (application_name,))]
        for pid in pids:
            self.query("SELECT pg_terminate_backend(?)", (pid,))
        deadline = time.monotonic() + timeout
        while self.query("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(?)", (pids,))[0][0]:
            if time.monotonic() > deadline:
                raise TimeoutError(f"sessions of {application_name} survived pg_terminate_backend")
            time.sleep(0.02)
        return len(pids)


def _fresh_postgres_database(base_url: str) -> Iterator[PostgresDB]:
    """A new, empty schema of the session's server, first on the search path of ``url``
    (cheaper than a database per test; the server is thrown away at the end of the session)."""
    import psycopg

    schema = f"sk_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(base_url, autocommit=True) as admin:
        admin.execute(f'CREATE SCHEMA "{schema}"')
    separator = "&" if "?" in base_url else "?"
    yield PostgresDB(f"{base_url}{separator}options=-csearch_path%3D{schema}")


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Any]:
    """An empty database: a SQLite file, or a fresh schema on the session's PostgreSQL."""
    if request.param == "sqlite":
        yield SQLiteDB(tmp_path / "db.sqlite")
        return
    yield from _fresh_postgres_database(request.getfixturevalue("postgres_url"))


@pytest.fixture
def pg(postgres_url: str) -> Iterator[PostgresDB]:
    """A fresh PostgreSQL schema (for PostgreSQL-only tests)."""
    yield from _fresh_postgres_database(postgres_url)


@pytest.fixture
def open_writer() -> Iterator[Callable[..., Any]]:
    """``open_writer(sink, partition=0, app="app", sink_name="s")``: a started writer, closed after the test."""
    writers: List[Any] = []

    def make(sink: Database, *, partition: int = 0, app: str = "app", sink_name: str = "s") -> Any:
        writer = sink.open(SinkTask(app, f"0_{partition}", sink_name, (TopicPartition("in", partition),)))
        writers.append(writer)
        writer.start()
        return writer
    yield make
    for writer in writers:
        writer.close()


def rec(key: Any, value: Any, offset: Any, *, partition: int = 0, timestamp: int = 0) -> SinkRecord:
    return SinkRecord(key, value, timestamp, "in", partition, offset)


def run_app(sink: Database, records: Sequence[tuple], *, app_id: str = "app", **settings: Any) -> Dict[str, int]:
    """Pipe ``(key, value)`` records into ``in`` of an app that sinks it into ``sink`` (node ``db``);
    return the driver's metrics."""
    app = sk.App(app_id, default_key_serde=sk.serdes.Json(), **settings)

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        b.stream("in").sink(sink, name="db")

    with TopologyTestDriver(app, deliver_external_sinks=True) as driver:
        topic = driver.input_topic("in")
        for i, (key, value) in enumerate(records):
            topic.pipe_input(key, value, timestamp=i)
        return driver.metrics()


def offsets(db: Any, app: str = "app") -> List[tuple]:
    return db.query('SELECT "sink", "topic", "partition", "next_offset" FROM streamkit_offsets '
                    'WHERE "group_id" = ? ORDER BY "sink", "topic", "partition"', (app,))


# -- rows ----------------------------------------------------------------------------------

def test_one_row_per_key_upserted_with_offsets_in_the_same_database(db: Any) -> None:
    sink = Database(db.url, "rows", key_columns=["id"])
    run_app(sink, [(1, {"n": 5}), (2, {"n": 7}), (1, {"n": 6}), (3, {"n": 0})])
    assert db.query("SELECT id, n FROM rows ORDER BY id") == [(1, 6), (2, 7), (3, 0)]
    assert offsets(db) == [("db", "in", 0, 4)]


def test_dict_key_fields_are_columns_and_value_fields_win(db: Any) -> None:
    sink = Database(db.url, "clicks", key_columns=["user", "day"])
    run_app(sink, [({"user": "ann", "day": 1, "label": "from-key"}, {"clicks": 3, "label": "from-value"}),
                   ({"user": "ann", "day": 2, "label": "k"}, {"clicks": 1}),
                   ({"user": "bob", "day": 1, "label": "k"}, {"clicks": 4}),
                   ({"user": "ann", "day": 1, "label": "k2"}, {"clicks": 5, "label": "v2"})])
    assert db.query('SELECT "user", day, clicks, label FROM clicks ORDER BY "user", day') == [
        ("ann", 1, 5, "v2"), ("ann", 2, 1, "k"), ("bob", 1, 4, "k")]


def test_scalar_values_go_to_the_value_column_and_nested_data_is_json_text(
        db: Any, open_writer: Callable[..., Any]) -> None:
    numbers = open_writer(Database(db.url, "numbers", key_columns=["name"]), sink_name="numbers")
    numbers.write(rec("a", 3, 0))
    numbers.write(rec("b", 4, 1))
    numbers.commit({TP: 2})
    assert db.query("SELECT name, value FROM numbers ORDER BY name") == [("a", 3), ("b", 4)]
    lists = open_writer(Database(db.url, "lists", key_columns=["name"]), sink_name="lists")
    lists.write(rec("tags", ["a", "b"], 0))
    lists.commit({TP: 1})
    [(tags,)] = db.query("SELECT value FROM lists")
    assert isinstance(tags, str) and json.loads(tags) == ["a", "b"]
    docs = open_writer(Database(db.url, "docs", key_columns=["name"]), sink_name="docs")
    docs.write(rec("d", {"meta": {"x": 1, "y": [1, 2]}, "items": [{"a": None}], "plain": "text"}, 0))
    docs.commit({TP: 1})
    [(meta, items, plain)] = db.query("SELECT meta, items, plain FROM docs")
    assert isinstance(meta, str) and json.loads(meta) == {"x": 1, "y": [1, 2]}
    assert isinstance(items, str) and json.loads(items) == [{"a": None}]
    assert plain == "text"


@dataclass(frozen=True)
class PageKey:
    site: str
    page: int


@dataclass(frozen=True)
class Geo:
    country: str


@dataclass(frozen=True)
class PageStats:
    views: int
    ratio: float
    geo: Geo


def test_dataclass_keys_and_values_become_columns(db: Any, open_writer: Callable[..., Any]) -> None:
    writer = open_writer(Database(db.url, "pages", key_columns=["site", "page"]))
    writer.write(rec(PageKey("a.org", 1), PageStats(10, 0.5, Geo("NO")), 0))
    writer.write(rec(PageKey("a.org", 2), PageStats(3, 0.25, Geo("SE")), 1))
    writer.write(rec(PageKey("a.org", 1), PageStats(11, 0.75, Geo("DK")), 2))
    writer.commit({TP: 3})
    rows = db.query("SELECT site, page, views, ratio, geo FROM pages ORDER BY page")
    assert [row[:4] for row in rows] == [("a.org", 1, 11, 0.75), ("a.org", 2, 3, 0.25)]
    assert [json.loads(row[4]) for row in rows] == [{"country": "DK"}, {"country": "SE"}]


def test_none_value_deletes_the_keys_row(db: Any) -> None:
    sink = Database(db.url, "rows", key_columns=["id"])
    run_app(sink, [(1, {"n": 1}), (2, {"n": 2}), (3, {"n": 3}), (1, None), (4, None), (3, {"n": 33})])
    assert db.query("SELECT id, n FROM rows ORDER BY id") == [(2, 2), (3, 33)]
    assert offsets(db) == [("db", "in", 0, 6)]


def test_row_function_builds_the_row_and_none_deletes(db: Any) -> None:
    def row(key: Any, value: Any) -> Any:
        if value.get("closed"):
            return None
        return {"account": key, "balance": value["credit"] - value["debit"], "raw": value}

    sink = Database(db.url, "balances", key_columns=["account"], row=row)
    run_app(sink, [("a", {"credit": 10, "debit": 3}), ("b", {"credit": 5, "debit": 0}),
                   ("c", {"credit": 1, "debit": 1}), ("b", {"closed": True}), ("a", {"credit": 20, "debit": 3})])
    rows = db.query("SELECT account, balance, raw FROM balances ORDER BY account")
    assert [(account, balance) for account, balance, _ in rows] == [("a", 17), ("c", 0)]
    assert json.loads(rows[0][2]) == {"credit": 20, "debit": 3}
    assert set(db.column_types("balances")) == {"account", "balance", "raw"}  # no key/value columns


def test_windowed_keys_become_key_and_window_columns(db: Any, open_writer: Callable[..., Any]) -> None:
    writer = open_writer(Database(db.url, "visits", key_columns=["user", "page", "window_start"]))
    writer.write(rec(sk.Windowed({"user": "u1", "page": "/"}, 0, 60_000), {"visits": 1}, 0))
    writer.write(rec(sk.Windowed({"user": "u1", "page": "/"}, 0, 60_000), {"visits": 2}, 1))
    writer.write(rec(sk.Windowed({"user": "u1", "page": "/"}, 60_000, 120_000), {"visits": 1}, 2))
    writer.write(rec(sk.Windowed({"user": "u2", "page": "/a"}, 0, 60_000), {"visits": 9}, 3))
    writer.commit({TP: 4})
    writer.write(rec(sk.Windowed({"user": "u2", "page": "/a"}, 0, 60_000), None, 4))  # deletes by the key alone
    writer.commit({TP: 5})
    assert db.query('SELECT "user", page, window_start, window_end, visits FROM visits '
                    'ORDER BY "user", window_start') == [("u1", "/", 0, 60_000, 2), ("u1", "/", 60_000, 120_000, 1)]


def test_windowed_count_through_the_dsl(db: Any) -> None:
    app = sk.App("views-app", default_key_serde=sk.serdes.Json())

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        (b.stream("views").group_by_key().windowed_by(sk.TumblingWindows(timedelta(minutes=1)))
         .count(name="per-minute").to_stream()
         .sink(Database(db.url, "per_minute", key_columns=["key", "window_start"])))

    with TopologyTestDriver(app, deliver_external_sinks=True) as driver:
        views = driver.input_topic("views")
        for user, ts in [("ann", 0), ("ann", 59_999), ("bob", 1_000), ("ann", 60_000), ("ann", 61_000),
                         ("bob", 125_000)]:
            views.pipe_input(user, {"page": "/"}, timestamp=ts)
    assert db.query("SELECT key, window_start, window_end, value FROM per_minute ORDER BY key, window_start") == [
        ("ann", 0, 60_000, 2), ("ann", 60_000, 120_000, 2), ("bob", 0, 60_000, 1), ("bob", 120_000, 180_000, 1)]
    assert [row[1:] for row in offsets(db, "views-app")] == [("views", 0, 6)]


EXPECTED_GUESSED_TYPES = {
    "sqlite": {"id": "INTEGER", "i": "INTEGER", "f": "REAL", "s": "TEXT", "b": "INTEGER", "j": "TEXT"},
    "postgresql": {"id": "BIGINT", "i": "BIGINT", "f": "DOUBLE PRECISION", "s": "TEXT", "b": "BOOLEAN",
                   "j": "TEXT"},
}


def test_table_created_on_first_write_with_types_guessed_from_the_first_row(
        db: Any, open_writer: Callable[..., Any]) -> None:
    writer = open_writer(Database(db.url, "typed", key_columns=["id"]))
    writer.commit({TP: 0})  # nothing written yet: no table
    assert not db.table_exists("typed")
    writer.write(rec(1, {"i": 7, "f": 1.5, "s": "x", "b": True, "j": {"deep": [1]}}, 0))
    writer.write(rec(2, {"i": 8, "f": 2.5, "s": "y", "b": False, "j": []}, 1))
    writer.commit({TP: 2})
    assert db.column_types("typed") == EXPECTED_GUESSED_TYPES[db.name]
    rows = db.query("SELECT id, i, f, s, b, j FROM typed ORDER BY id")
    assert [(r[0], r[1], r[2], r[3], bool(r[4])) for r in rows] == [(1, 7, 1.5, "x", True), (2, 8, 2.5, "y", False)]
    assert [json.loads(r[5]) for r in rows] == [{"deep": [1]}, []]


def test_columns_option_sets_the_table_types(db: Any, open_writer: Callable[..., Any]) -> None:
    columns = {"id": "BIGINT", "name": "VARCHAR(20)", "score": "REAL", "note": "TEXT"}
    writer = open_writer(Database(db.url, "scores", key_columns="id", columns=columns))
    writer.write(rec(1, {"name": "ann", "score": 2}, 0))
    writer.commit({TP: 1})
    types = db.column_types("scores")
    if db.name == "sqlite":
        assert types == {"id": "BIGINT", "name": "VARCHAR(20)", "score": "REAL", "note": "TEXT"}
    else:
        assert types == {"id": "BIGINT", "name": "CHARACTER VARYING", "score": "REAL", "note": "TEXT"}
    assert db.query("SELECT id, name, score, note FROM scores") == [(1, "ann", 2.0, None)]


def test_deletion_before_the_table_exists_is_a_no_op(db: Any, open_writer: Callable[..., Any]) -> None:
    writer = open_writer(Database(db.url, "late", key_columns=["id"]))
    writer.write(rec(1, None, 0))
    writer.commit({TP: 1})
    assert not db.table_exists("late")
    assert offsets(db) == [("s", "in", 0, 1)]
    writer.write(rec(1, {"n": 1}, 1))
    writer.write(rec(2, {"n": 2}, 2))
    writer.commit({TP: 3})
    writer.write(rec(2, None, 3))
    writer.commit({TP: 4})
    assert db.query("SELECT id, n FROM late") == [(1, 1)]
    assert offsets(db) == [("s", "in", 0, 4)]


def test_within_one_commit_only_the_latest_row_per_key_is_written(
        db: Any, open_writer: Callable[..., Any]) -> None:
    db.install_audit()
    writer = open_writer(Database(db.url, "rows", key_columns=["id"]))
    for offset, (key, value) in enumerate([(1, {"n": 1}), (2, {"n": 2}), (1, {"n": 3}), (3, {"n": 4}),
                                           (3, None), (1, {"n": 5})]):
        writer.write(rec(key, value, offset))
    writer.commit({TP: 6})
    assert db.query("SELECT id, n FROM rows ORDER BY id") == [(1, 5), (2, 2)]
    assert sorted(db.query("SELECT op, id, n FROM audit")) == [("insert", 1, 5), ("insert", 2, 2)]
    # delete then upsert: an update; upsert then delete: a delete
    for offset, (key, value) in enumerate([(2, None), (2, {"n": 7}), (1, {"n": 9}), (1, None)], start=6):
        writer.write(rec(key, value, offset))
    writer.commit({TP: 10})
    assert db.query("SELECT id, n FROM rows ORDER BY id") == [(2, 7)]
    assert sorted(db.query("SELECT op, id, n FROM audit WHERE seq > 2")) == [("delete", 1, 5), ("update", 2, 7)]


# -- offsets: exactly once across restarts, fencing ------------------------------------------

def test_replay_after_a_crash_following_the_database_commit_writes_each_record_once(
        db: Any, open_writer: Callable[..., Any]) -> None:
    db.install_audit()
    sink = Database(db.url, "rows", key_columns=["id"])
    first = open_writer(sink)
    for offset in range(10):
        first.write(rec(offset, {"n": offset * 10}, offset))
    first.commit({TP: 10})
    # the worker dies before the broker commits: the next one reprocesses from offset 5
    second = open_writer(sink)
    assert second.delivered_until == {("in", 0): 10}
    for offset in range(5, 15):
        second.write(rec(offset, {"n": offset * 10}, offset))
    assert second.skipped == 5
    second.commit({TP: 15})
    assert db.query("SELECT id, n FROM rows ORDER BY id") == [(i, i * 10) for i in range(15)]
    writes = db.query("SELECT id FROM audit ORDER BY seq")
    assert sorted(id_ for (id_,) in writes) == list(range(15))  # each record written exactly once
    assert offsets(db) == [("s", "in", 0, 15)]


def test_resume_reads_only_the_offsets_of_its_app_sink_and_partitions(
        db: Any, open_writer: Callable[..., Any]) -> None:
    sink = Database(db.url, "rows", key_columns=["id"])
    writer = open_writer(sink)
    writer.write(rec(1, {"n": 1}, 9))
    writer.commit({TP: 10})
    assert open_writer(sink).delivered_until == {("in", 0): 10}
    for other in (open_writer(sink, app="other-app"), open_writer(sink, sink_name="other-sink"),
                  open_writer(sink, partition=1)):
        assert other.delivered_until == {}
        other.write(rec(2, {"n": 2}, 3, partition=other.task.inputs[0].partition))
        assert other.skipped == 0 and len(other.pending) == 1


def test_records_without_an_origin_offset_are_never_skipped(db: Any, open_writer: Callable[..., Any]) -> None:
    sink = Database(db.url, "rows", key_columns=["id"])
    first = open_writer(sink)
    first.write(rec(1, {"n": 1}, 4))
    first.commit({TP: 5})
    second = open_writer(sink)
    second.write(rec(2, {"n": 2}, None))   # e.g. from a wall-clock punctuation before any input
    second.write(rec(3, {"n": 3}, 4))      # delivered before
    assert second.skipped == 1
    second.commit({})
    assert db.query("SELECT id, n FROM rows ORDER BY id") == [(1, 1), (2, 2)]
    assert offsets(db) == [("s", "in", 0, 5)]


def test_two_fresh_writers_the_second_to_commit_is_fenced_and_writes_nothing(
        db: Any, open_writer: Callable[..., Any]) -> None:
    sink = Database(db.url, "rows", key_columns=["id"])
    sink.retry = FAST_RETRY
    a, b = open_writer(sink), open_writer(sink)
    a.write(rec(1, {"n": 1}, 0))
    b.write(rec(1, {"n": 100}, 0))
    b.write(rec(2, {"n": 200}, 1))
    a.commit({TP: 1})
    with pytest.raises(TaskMigratedError, match=r"in\[0\]"):
        b.commit({TP: 2})
    assert db.query("SELECT id, n FROM rows ORDER BY id") == [(1, 1)]
    assert offsets(db) == [("s", "in", 0, 1)]


def test_writers_started_on_stored_offsets_the_second_to_commit_is_fenced(
        db: Any, open_writer: Callable[..., Any]) -> None:
    sink = Database(db.url, "rows", key_columns=["id"])
    sink.retry = FAST_RETRY
    earlier = open_writer(sink)
    earlier.write(rec(1, {"n": 1}, 4))
    earlier.commit({TP: 5})
    a, b = open_writer(sink), open_writer(sink)
    a.write(rec(1, {"n": 2}, 5))
    a.commit({TP: 6})
    b.write(rec(1, {"n": 3}, 5))
    b.write(rec(9, {"n": 9}, 6))
    with pytest.raises(TaskMigratedError):
        b.commit({TP: 7})
    assert db.query("SELECT id, n FROM rows ORDER BY id") == [(1, 2)]
    assert offsets(db) == [("s", "in", 0, 6)]
    # the abandoned first writer is fenced as well
    earlier.write(rec(5, {"n": 5}, 5))
    with pytest.raises(TaskMigratedError):
        earlier.commit({TP: 6})
    assert db.query("SELECT id, n FROM rows ORDER BY id") == [(1, 2)]


# -- errors ------------------------------------------------------------------------------------

def test_missing_key_column_raises_serialization_error_at_write(tmp_path: Any,
                                                                 open_writer: Callable[..., Any]) -> None:
    db = SQLiteDB(tmp_path / "db.sqlite")
    writer = open_writer(Database(db.url, "rows", key_columns=["user", "day"]))
    with pytest.raises(SerializationError, match=r"no key column\(s\) day") as failure:
        writer.write(rec({"user": "ann"}, {"n": 1}, 0))
    assert "sink 's'" in str(failure.value)
    with pytest.raises(SerializationError, match="user, day"):
        writer.write(rec("scalar-key-for-two-columns", None, 1))   # a deletion needs the key columns too
    assert writer.pending == []
    writer.commit({TP: 2})
    assert not db.table_exists("rows")


def test_missing_key_column_goes_to_the_records_error_handler(tmp_path: Any) -> None:
    db = SQLiteDB(tmp_path / "db.sqlite")
    sink = Database(db.url, "rows", key_columns=["id"])
    with pytest.raises(sk.errors.RecordError, match="offset 1") as failure:
        run_app(sink, [({"id": 1}, {"n": 1}), ({"no_id": 2}, {"n": 2})])
    assert isinstance(failure.value.cause, SerializationError)
    assert "key column(s) id" in str(failure.value)
    metrics = run_app(Database(db.url, "rows", key_columns=["id"]), [
        ({"id": 1}, {"n": 10}), ({"no_id": 2}, {"n": 2}), ({"id": 3}, {"n": 30})],
        app_id="skipper", processing_error_handler="log_and_skip")
    assert metrics["records_skipped"] == 1
    assert db.query("SELECT id, n FROM rows ORDER BY id") == [(1, 10), (3, 30)]
    assert offsets(db, "skipper") == [("db", "in", 0, 3)]


@pytest.mark.parametrize("make", [
    pytest.param(lambda: Database("mysql://host/db", "t", key_columns=["id"]), id="unsupported-scheme"),
    pytest.param(lambda: Database("sqlite://relative.db", "t", key_columns=["id"]), id="sqlite-without-path"),
    pytest.param(lambda: Database(42, "t", key_columns=["id"]), id="url-not-a-string"),
    pytest.param(lambda: Database("sqlite:///x.db", "t; DROP TABLE t", key_columns=["id"]), id="bad-table"),
    pytest.param(lambda: Database("sqlite:///x.db", "t", key_columns=["i-d"]), id="bad-key-column"),
    pytest.param(lambda: Database("sqlite:///x.db", "t", key_columns=["id"], columns={"id": "INT", "a b": "INT"}),
                 id="bad-column"),
    pytest.param(lambda: Database("sqlite:///x.db", "t", key_columns=["id"], offsets_table="off.sets"),
                 id="bad-offsets-table"),
    pytest.param(lambda: Database("sqlite:///x.db", "", key_columns=["id"]), id="empty-table"),
    pytest.param(lambda: Database("sqlite:///x.db", "t", key_columns=[]), id="no-key-columns"),
    pytest.param(lambda: Database("sqlite:///x.db", "t", key_columns=["id"], columns={"n": "INT"}),
                 id="key-column-not-in-columns"),
    pytest.param(lambda: Database("sqlite:///x.db", "t", key_columns=["id"], row={"id": 1}), id="row-not-callable"),
])
def test_bad_configuration_raises_config_error_at_construction(make: Callable[[], Database], tmp_path: Any,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="Database sink"):
        make()
    assert list(tmp_path.iterdir()) == []  # nothing created


def test_postgres_description_hides_the_password() -> None:
    pytest.importorskip("psycopg")
    sink = Database("postgresql://app:s3cret@db.example:5432/shop", "orders", key_columns=["id"])
    assert sink.describe() == "Database(db.example:5432/shop, table orders)"


def _stored_rows_then_a_failing_batch(db: Any, open_writer: Callable[..., Any], bad: SinkRecord) -> Any:
    """Offsets 0..2 committed; then offsets 3..7, one of them ``bad``, written to the same writer."""
    writer = open_writer(Database(db.url, "rows", key_columns=["id"]))
    for offset in range(3):
        writer.write(rec(offset, {"n": offset}, offset))
    writer.commit({TP: 3})
    writer.write(rec(0, {"n": 100}, 3))
    writer.write(rec(5, {"n": 5}, 4))
    writer.write(bad)
    writer.write(rec(7, {"n": 7}, 6))
    writer.write(rec(1, None, 7))
    return writer


@pytest.mark.parametrize("bad", [
    pytest.param(rec("not-a-number", {"n": 1}, 5), id="text-into-integer-primary-key"),
    pytest.param(rec(6, {"n": 6, "extra": 1}, 5), id="column-missing-from-the-table"),
])
def test_permanent_error_at_commit_names_sink_task_and_origin_and_commits_nothing(
        db: Any, open_writer: Callable[..., Any], bad: SinkRecord) -> None:
    writer = _stored_rows_then_a_failing_batch(db, open_writer, bad)
    with pytest.raises(SinkError) as failure:
        writer.commit({TP: 8})
    message = str(failure.value)
    assert "sink 's' (Database(" in message and "table rows" in message
    assert "of task 0_0" in message
    assert "5 record(s) from in[0] offsets 3..7" in message
    assert "permanent error" in message
    assert db.query("SELECT id, n FROM rows ORDER BY id") == [(0, 0), (1, 1), (2, 2)]
    assert offsets(db) == [("s", "in", 0, 3)]


def test_permanent_error_through_the_driver_stops_processing_with_a_sink_error(db: Any) -> None:
    db.execute("CREATE TABLE rows (id BIGINT PRIMARY KEY, n BIGINT)")
    sink = Database(db.url, "rows", key_columns=["id"])
    with pytest.raises(SinkError, match=r"sink 'db' .* of task 0_0: delivering 1 record\(s\) from in\[0\] "
                                        r"offsets 1\.\.1 failed \(permanent error\)"):
        run_app(sink, [(1, {"n": 1}), (2, {"n": 2, "surprise": "x"}), (3, {"n": 3})])
    assert db.query("SELECT id, n FROM rows") == [(1, 1)]
    assert offsets(db) == [("db", "in", 0, 1)]


def test_sqlite_write_lock_held_elsewhere_is_waited_out(tmp_path: Any, open_writer: Callable[..., Any]) -> None:
    db = SQLiteDB(tmp_path / "db.sqlite")
    sink = Database(db.url, "rows", key_columns=["id"])
    sink.retry = RetryPolicy(attempts=4, first_backoff=0.05)
    writer = open_writer(sink)
    writer.write(rec(1, {"n": 1}, 0))
    holder = sqlite3.connect(db.path, isolation_level=None, check_same_thread=False)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        holder.execute("CREATE TABLE holder_was_here (x INTEGER)")
        probe = sqlite3.connect(db.path, timeout=0, isolation_level=None)
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            probe.execute("BEGIN IMMEDIATE")   # the lock is really held
        probe.close()
        release = threading.Timer(0.5, lambda: holder.execute("COMMIT"))
        release.start()
        writer.commit({TP: 1})
        release.join()
    finally:
        holder.close()
    assert db.query("SELECT id, n FROM rows") == [(1, 1)]
    assert offsets(db) == [("s", "in", 0, 1)]
    assert db.table_exists("holder_was_here")


def test_sqlite_unopenable_database_is_a_permanent_error_at_start(tmp_path: Any) -> None:
    sink = Database(f"sqlite:///{tmp_path}", "rows", key_columns=["id"])   # a directory
    sink.retry = FAST_RETRY
    writer = sink.open(SinkTask("app", "0_0", "s", (TP,)))
    with pytest.raises(SinkError, match=r"sink 's' .* of task 0_0: opening failed \(permanent error\)"):
        writer.start()
    writer.close()


def test_unreachable_postgres_is_retried_within_the_bound(caplog: pytest.LogCaptureFixture) -> None:
    pytest.importorskip("psycopg")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]   # nothing listens there once closed
    sink = Database(f"postgresql://nobody@127.0.0.1:{port}/nowhere", "rows", key_columns=["id"])
    sink.retry = FAST_RETRY
    writer = sink.open(SinkTask("app", "0_0", "s", (TP,)))
    with caplog.at_level(logging.WARNING, logger="streamkit.sinks.base"):
        with pytest.raises(SinkError, match=r"opening failed \(after 3 attempts\): OperationalError"):
            writer.start()
    retries = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    assert len(retries) == 2 and "attempt 1 of 3" in retries[0]
    writer.close()


def test_postgres_broken_connection_is_retried_on_a_new_connection(
        pg: PostgresDB, open_writer: Callable[..., Any], caplog: pytest.LogCaptureFixture) -> None:
    sink = Database(pg.url_named("sk_victim"), "rows", key_columns=["id"])
    sink.retry = RetryPolicy(attempts=3, first_backoff=0.05)
    writer = open_writer(sink)
    writer.write(rec(1, {"n": 1}, 0))
    writer.commit({TP: 1})
    assert pg.terminate("sk_victim") == 1   # the writer's connection is now broken
    writer.write(rec(2, {"n": 2}, 1))
    with caplog.at_level(logging.WARNING, logger="streamkit.sinks.base"):
        writer.commit({TP: 2})
    assert any("attempt 1 of 3" in r.getMessage() for r in caplog.records)  # the retry path ran
    assert pg.query("SELECT id, n FROM rows ORDER BY id") == [(1, 1), (2, 2)]
    assert offsets(pg) == [("s", "in", 0, 2)]


def _commit_in_thread(writer: Any, positions: Dict[TopicPartition, int], results: Dict[str, Any],
                      label: str) -> threading.Thread:
    def run() -> None:
        try:
            writer.commit(positions)
            results[label] = "ok"
        except Exception as exc:  # noqa: BLE001 - reported by the test
            results[label] = exc
    thread = threading.Thread(target=run, name=f"commit-{label}")
    thread.start()
    return thread


def test_postgres_transient_error_in_the_first_transaction_does_not_lose_the_table(
        pg: PostgresDB, open_writer: Callable[..., Any]) -> None:
    import psycopg

    sink = Database(pg.url_named("sk_first"), "rows", key_columns=["id"])
    sink.retry = RetryPolicy(attempts=3, first_backoff=0.05)
    writer = open_writer(sink)
    writer.write(rec(1, {"n": 1}, 0))
    results: Dict[str, Any] = {}
    with psycopg.connect(pg.url) as locker:
        # hold the first transaction (CREATE TABLE done) at its offsets insert, then break its connection
        locker.execute("LOCK TABLE streamkit_offsets IN EXCLUSIVE MODE")
        thread = _commit_in_thread(writer, {TP: 1}, results, "writer")
        pg.wait_for_lock_waiters("sk_first", 1)
        assert pg.terminate("sk_first") == 1
        locker.rollback()
    thread.join(30)
    assert results.get("writer") == "ok", results.get("writer")
    assert pg.query("SELECT id, n FROM rows") == [(1, 1)]
    assert offsets(pg) == [("s", "in", 0, 1)]


def test_postgres_two_tasks_creating_the_table_at_once_both_deliver(
        pg: PostgresDB, open_writer: Callable[..., Any]) -> None:
    import psycopg

    sink = Database(pg.url_named("sk_pair"), "rows", key_columns=["id"])
    sink.retry = RetryPolicy(attempts=3, first_backoff=0.05)
    writers = [open_writer(sink, partition=p) for p in (0, 1)]
    for p, writer in enumerate(writers):
        writer.write(rec(p, {"n": p}, 0, partition=p))
    results: Dict[str, Any] = {}
    with psycopg.connect(pg.url) as locker:
        # keep task 0's transaction open after its CREATE TABLE, so task 1's CREATE TABLE overlaps it
        locker.execute("LOCK TABLE streamkit_offsets IN EXCLUSIVE MODE")
        first = _commit_in_thread(writers[0], {TopicPartition("in", 0): 1}, results, "0_0")
        pg.wait_for_lock_waiters("sk_pair", 1)
        second = _commit_in_thread(writers[1], {TopicPartition("in", 1): 1}, results, "0_1")
        pg.wait_for_lock_waiters("sk_pair", 2)
        locker.rollback()
    first.join(30)
    second.join(30)
    assert results == {"0_0": "ok", "0_1": "ok"}, results
    assert pg.query("SELECT id, n FROM rows ORDER BY id") == [(0, 0), (1, 1)]


def test_invalid_column_name_from_a_value_is_rejected_at_write(tmp_path: Any) -> None:
    db = SQLiteDB(tmp_path / "db.sqlite")
    metrics = run_app(Database(db.url, "rows", key_columns=["id"]),
                      [(1, {"n": 1}), (2, {"n": 2, "bad name": 1}), (3, {"n": 3})],
                      processing_error_handler="log_and_skip")
    assert metrics["records_skipped"] == 1
    assert db.query("SELECT id, n FROM rows ORDER BY id") == [(1, 1), (3, 3)]
