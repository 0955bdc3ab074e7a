"""External sinks hold every input record exactly once across kill -9.

Real ``streamkit worker`` processes on the embedded broker, SIGKILLed at random moments
and at the named commit crash points (``STREAMKIT_CRASH_AT``) while the input keeps
arriving, then one uninterrupted run with ``--until-idle``; what the sinks hold is then
compared with the input record by record. ``ParquetArchive``, ``Database`` on SQLite
and (when a server can be started) on PostgreSQL; under at_least_once too, where the
sinks' own offsets keep them exactly once. Plus targets that refuse records (an archive
directory that cannot be created, a table that rejects rows): the worker fails clearly,
commits nothing past them, and a rerun with the target fixed stores everything once.
"""
from __future__ import annotations

import glob
import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import orjson
import pytest

from streamkit.broker import EmbeddedBroker
from streamkit.core.partitioner import partition_for_key

from tests.cli_processes import REPO

PARTITIONS = 3
USERS = 97
TOPIC = "views"
ARCHIVE_RECORDS = 20_000
DB_RECORDS = 12_000
FEED_SECONDS = 9.0  # the input arrives over about this long, while the kill rounds run
ROUND_TIMEOUT = 120.0  # s: a worker round that takes longer is stuck

# One kill per entry: "time" = SIGKILL a random 0.4-1.6 s after the start (start-up and
# recovery included); "progress" = SIGKILL a random 0-0.6 s after the worker's first
# commit that moved the offsets; anything else is a STREAMKIT_CRASH_AT spec.
ARCHIVE_PLAN = ["progress", "commit.after_sinks:2", "time", "commit.after_send:3", "progress",
                "commit.after_transaction:2"]
DB_PLAN = ["progress", "commit.after_sinks:2", "time", "commit.after_send:2", "progress",
           "commit.after_transaction:3"]
DB_PLAN_STATEFUL = ["progress", "commit.after_sinks:2", "commit.after_send:3", "progress",
                    "commit.after_transaction:2", "commit.after_persist:2"]

Input = Tuple[int, int, str, dict, int]
"""(partition, offset, key, value, timestamp) of one input record."""


# -- input ----------------------------------------------------------------------------------

def _inputs(count: int) -> List[Input]:
    """Record i goes to partition i % 3 at offset i // 3 (appended in order), with a unique id
    and a key the default partitioner puts in that partition (as a keyed producer would)."""
    keys: Dict[int, List[str]] = {p: [] for p in range(PARTITIONS)}
    for user in range(USERS):
        keys[partition_for_key(f"u{user}".encode(), PARTITIONS)].append(f"u{user}")
    return [(i % PARTITIONS, i // PARTITIONS, keys[i % PARTITIONS][(i // PARTITIONS) % len(keys[i % PARTITIONS])],
             {"id": i, "page": f"/p/{i % 13}", "n": i}, 1_700_000_000_000 + i) for i in range(count)]


def _produce(broker_dir: Path, records: List[Input]) -> None:
    broker = EmbeddedBroker(broker_dir)
    try:
        if broker.topic(TOPIC) is None:
            broker.create_topic(TOPIC, PARTITIONS)
        _append(broker, records)
        broker.sync()
    finally:
        broker.close()


def _append(broker: EmbeddedBroker, records: List[Input]) -> None:
    """Append ``records`` to their partitions; each must land at its planned offset."""
    for partition in range(PARTITIONS):
        batch = [(key.encode(), orjson.dumps(value), ts, None) for p, _, key, value, ts in records if p == partition]
        if not batch:
            continue
        first = broker.append(TOPIC, partition, batch)
        expected_first = next(offset for p, offset, *_ in records if p == partition)
        assert first == expected_first, f"partition {partition} started at {first}, not {expected_first}"


def _ends(records: List[Input]) -> Dict[int, int]:
    ends = {p: 0 for p in range(PARTITIONS)}
    for partition, offset, *_ in records:
        ends[partition] = max(ends[partition], offset + 1)
    return ends


def _committed(broker: EmbeddedBroker, group: str) -> Dict[int, int]:
    return {tp.partition: offset for tp, offset in broker.committed_offsets(group).items() if tp.topic == TOPIC}


# -- workers --------------------------------------------------------------------------------

def _start(workdir: Path, broker_dir: Path, module: str, guarantee: str,
           crash_at: Optional[str] = None) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": f"{workdir}{os.pathsep}{REPO}"}
    env.pop("STREAMKIT_CRASH_AT", None)
    if crash_at:
        env["STREAMKIT_CRASH_AT"] = crash_at
    return subprocess.Popen([sys.executable, "-m", "streamkit", "--log-level", "WARNING", "worker", module,
                             "--broker", f"embedded://{broker_dir}", "--guarantee", guarantee,
                             "--until-idle", "1"], cwd=workdir, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen) -> Tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=ROUND_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate(timeout=30)
        raise AssertionError(f"worker still running after {ROUND_TIMEOUT} s; stderr: {err[-2000:]}")
    return proc.returncode, err


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)


class Feeder:
    """Appends the input from a thread at a steady pace (by the clock), so workers are
    killed while records keep arriving and each run commits many times."""

    def __init__(self, broker_dir: Path, records: List[Input], seconds: float) -> None:
        self.broker_dir, self.records, self.seconds = broker_dir, records, seconds
        self.fed = 0
        self.error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._run, name="feeder", daemon=True)

    def start(self) -> "Feeder":
        _produce(self.broker_dir, [])  # the topic exists before the first worker starts
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            broker = EmbeddedBroker(self.broker_dir)
            try:
                started = time.monotonic()
                while self.fed < len(self.records):
                    due = min(len(self.records),
                              int(len(self.records) * (time.monotonic() - started) / self.seconds) + 1)
                    if due > self.fed:
                        _append(broker, self.records[self.fed:due])
                        self.fed = due
                    time.sleep(0.01)
                broker.sync()
            finally:
                broker.close()
        except BaseException as exc:  # noqa: BLE001 - re-raised by join()
            self.error = exc

    def join(self) -> None:
        self._thread.join(timeout=ROUND_TIMEOUT)
        assert not self._thread.is_alive(), "the feeder is stuck"
        if self.error is not None:
            raise self.error
        assert self.fed == len(self.records)


class Crasher:
    """Runs one app's workers round after round against one broker, killing them as planned."""

    def __init__(self, workdir: Path, broker_dir: Path, module: str, group: str, guarantee: str,
                 total: int, seed: int, sink_positions: Callable[[], Dict[int, int]]) -> None:
        self.workdir, self.broker_dir, self.module, self.group = workdir, broker_dir, module, group
        self.guarantee, self.total = guarantee, total
        self.sink_positions = sink_positions
        """Per input partition, the first offset the sink(s) have not stored yet."""
        self.rng = random.Random(seed)
        self.feeder: Optional[Feeder] = None
        self.kills = 0
        self.mid_run_kills = 0
        """Kills that left input the worker had been given uncommitted (the next run redoes it)."""
        self.sink_ahead_kills = 0
        """Kills that left a sink holding records whose input offsets were not committed:
        the next run processes them again and the sink must not store them twice."""
        self.rounds: List[str] = []

    def committed(self) -> Dict[int, int]:
        broker = EmbeddedBroker(self.broker_dir)
        try:
            return _committed(broker, self.group)
        finally:
            broker.close()

    def committed_total(self) -> int:
        return sum(self.committed().values())

    def fed(self) -> int:
        return self.feeder.fed if self.feeder is not None else self.total

    def round(self, how: str) -> None:
        """One worker run, killed as ``how`` says; it may also finish on its own first."""
        crash_at = None if how in ("time", "progress") else how
        proc = _start(self.workdir, self.broker_dir, self.module, self.guarantee, crash_at)
        try:
            if how == "time":
                try:
                    proc.wait(timeout=self.rng.uniform(0.4, 1.6))
                except subprocess.TimeoutExpired:
                    _kill(proc)
            elif how == "progress":
                self._kill_after_progress(proc)
            code, err = _finish(proc)
        finally:
            _kill(proc)
        if code == -signal.SIGKILL:
            fed = self.fed()
            self.kills += 1
            committed = self.committed()
            left = fed - sum(committed.values())
            self.mid_run_kills += left > 0
            ahead = {p: n - committed.get(p, 0) for p, n in self.sink_positions().items() if n > committed.get(p, 0)}
            self.sink_ahead_kills += bool(ahead)
            self.rounds.append(f"{how}: killed with {left} of {fed} record(s) uncommitted"
                               + (f", sink ahead by {sum(ahead.values())}" if ahead else ""))
        else:
            assert code == 0, f"round {how!r}: worker exited with {code}: {err[-3000:]}"
            self.rounds.append(f"{how}: finished")

    def _kill_after_progress(self, proc: subprocess.Popen) -> None:
        """Kill a random moment after the worker's first commit that moved the offsets."""
        broker = EmbeddedBroker(self.broker_dir)
        try:
            start = sum(_committed(broker, self.group).values())
            deadline = time.monotonic() + 5.0
            while proc.poll() is None and time.monotonic() < deadline:
                if sum(_committed(broker, self.group).values()) > start:
                    break
                time.sleep(0.005)
        finally:
            broker.close()
        try:
            proc.wait(timeout=self.rng.uniform(0.0, 0.6))
        except subprocess.TimeoutExpired:
            _kill(proc)

    def run(self, plan: List[str], records: List[Input], feed_seconds: float) -> None:
        """The kill rounds while ``records`` are appended over ``feed_seconds``, then one
        uninterrupted run once they all are."""
        self.feeder = Feeder(self.broker_dir, records, feed_seconds).start()
        try:
            for how in plan:
                self.round(how)
        finally:
            self.feeder.join()
        self.final()

    def final(self) -> None:
        proc = _start(self.workdir, self.broker_dir, self.module, self.guarantee)
        try:
            code, err = _finish(proc)
        finally:
            _kill(proc)
        assert code == 0, f"the uninterrupted run failed with {code}: {err[-3000:]}"
        assert self.committed_total() == self.total, "the uninterrupted run did not commit the whole input"
        self.rounds.append("final: finished")

    def summary(self) -> str:
        return (f"{self.kills} kill(s), {self.mid_run_kills} with input uncommitted, {self.sink_ahead_kills} "
                f"with the sink ahead of the committed offsets: " + "; ".join(self.rounds))


# -- ParquetArchive -----------------------------------------------------------------------------

ARCHIVE_APP = """
from datetime import timedelta
import streamkit as sk

app = sk.App("archiver", commit_interval=timedelta(milliseconds=100))
views = app.topic("views", partitions=3)


@app.topology
def build(b):
    b.stream(views).sink(sk.sinks.ParquetArchive({path!r}, roll_records=500), name="archive")
"""

_ARCHIVE_NAME = re.compile(r"^views\+(\d+)\+(\d+)-(\d+)\.parquet$")


def _archived_rows(archive: Path) -> Tuple[List[tuple], List[tuple], List[str]]:
    """(rows of the rolled files, rows still staged, problems with file names): rows are
    (partition, offset, timestamp, key JSON, value JSON)."""
    import pyarrow.parquet as pq

    rolled, problems = [], []
    for path in sorted(glob.glob(str(archive / "*.parquet"))):
        name = os.path.basename(path)
        match = _ARCHIVE_NAME.match(name)
        if not match:
            problems.append(f"unexpected file name {name}")
            continue
        partition, first, last = (int(g) for g in match.groups())
        table = pq.read_table(path).to_pydict()
        offsets = table["offset"]
        if not offsets:
            problems.append(f"{name} is empty")
            continue
        if (min(offsets), max(offsets)) != (first, last):
            problems.append(f"{name} holds offsets {min(offsets)}..{max(offsets)}")
        if set(table["partition"]) != {partition}:
            problems.append(f"{name} holds partitions {sorted(set(table['partition']))}")
        rolled.extend(zip(table["partition"], offsets, table["timestamp"], table["key"], table["value"]))
    return rolled, _staged_rows(archive), problems


def _staged_rows(archive: Path) -> List[tuple]:
    """Rows of committed blocks of the staging files (a torn last block never was committed)."""
    staged = []
    for path in sorted(glob.glob(str(archive / "_staging" / "*.jsonl"))):
        partition = int(re.match(r"^views\+(\d+)\.jsonl$", os.path.basename(path)).group(1))
        block = []
        with open(path, "rb") as f:
            for line in f:
                if not line.endswith(b"\n"):
                    break  # a torn block: never committed
                item = orjson.loads(line)
                if isinstance(item, dict):
                    staged.extend(block)
                    block = []
                else:
                    offset, ts, key, value = item
                    block.append((partition, offset, ts, json.dumps(key), json.dumps(value)))
    return staged


def _archive_positions(archive: Path) -> Dict[int, int]:
    """Per partition, the offset after the last record the archive holds (rolled or staged)."""
    positions: Dict[int, int] = {}
    if not archive.is_dir():
        return positions
    for name in os.listdir(archive):
        match = _ARCHIVE_NAME.match(name)
        if match:
            partition, last = int(match.group(1)), int(match.group(3))
            positions[partition] = max(positions.get(partition, 0), last + 1)
    for partition, offset, *_ in _staged_rows(archive):
        positions[partition] = max(positions.get(partition, 0), offset + 1)
    return positions


def _check_archive(archive: Path, records: List[Input]) -> int:
    rolled, staged, problems = _archived_rows(archive)
    assert not problems, problems[:5]
    assert not staged, f"{len(staged)} record(s) still staged after a clean stop (roll on close)"
    expected = {(p, o): (ts, key, value) for p, o, key, value, ts in records}
    seen = Counter((p, o) for p, o, *_ in rolled)
    duplicated = sorted(k for k, n in seen.items() if n > 1)
    missing = sorted(set(expected) - set(seen))
    extra = sorted(set(seen) - set(expected))
    assert not duplicated, f"{len(duplicated)} input record(s) archived more than once, e.g. {duplicated[:5]}"
    assert not missing, f"{len(missing)} input record(s) missing from the archive, e.g. {missing[:5]}"
    assert not extra, f"{len(extra)} archived record(s) not in the input, e.g. {extra[:5]}"
    wrong = [(p, o) for p, o, ts, key, value in rolled
             if (ts, orjson.loads(key), orjson.loads(value)) != expected[(p, o)]]
    assert not wrong, f"{len(wrong)} archived record(s) differ from the input, e.g. {wrong[:5]}"
    return len(rolled)


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
def test_parquet_archive_exactly_once_across_kill_minus_9(tmp_path: Path, guarantee: str) -> None:
    (tmp_path / "archive_app.py").write_text(ARCHIVE_APP.format(path="archive"))
    broker_dir = tmp_path / "broker"
    records = _inputs(ARCHIVE_RECORDS)
    crasher = Crasher(tmp_path, broker_dir, "archive_app", "archiver", guarantee, len(records),
                      seed=11 if guarantee == "exactly_once" else 12,
                      sink_positions=lambda: _archive_positions(tmp_path / "archive"))
    crasher.run(ARCHIVE_PLAN, records, FEED_SECONDS)
    assert crasher.kills >= len(ARCHIVE_PLAN) - 1, crasher.summary()
    assert crasher.mid_run_kills >= 1, crasher.summary()
    assert crasher.sink_ahead_kills >= 1, f"no kill left the archive ahead of the offsets: {crasher.summary()}"

    archived = _check_archive(tmp_path / "archive", records)
    files = len(glob.glob(str(tmp_path / "archive" / "*.parquet")))
    assert files >= len(records) // 500, f"only {files} file(s) for {len(records)} records rolled every 500"
    print(f"\n{guarantee}: {crasher.summary()}\n{archived} records in {files} files, each exactly once")


# -- Database -------------------------------------------------------------------------------

DB_APP = """
import os
from datetime import timedelta
import streamkit as sk

URL = {url!r}
RUN = os.getpid()  # one value per worker process: a record delivered by two runs makes two rows

app = sk.App("dbsink", commit_interval=timedelta(milliseconds=100))
views = app.topic("views", partitions=3)


@app.processor()
def tag_origin(ctx, key, value):
    ctx.forward(value["id"], {{"id": value["id"], "run": RUN, "origin_partition": ctx.partition,
                              "origin_offset": ctx.offset}})


@app.topology
def build(b):
    stream = b.stream(views)
    (stream.map(lambda key, value: (value["id"], {{"id": value["id"], "user": key,
                                                  "page": value["page"].upper(), "n": value["n"] * 2}}))
           .sink(sk.sinks.Database(URL, "events", key_columns=["id"]), name="events"))
    stream.process(tag_origin).sink(sk.sinks.Database(URL, "deliveries", key_columns=["id", "run"]),
                                    name="deliveries")
    if {stateful!r}:
        (stream.group_by_key().count(name="counts").to_stream()
               .sink(sk.sinks.Database(URL, "counts", key_columns=["user"]), name="counts-db"))
"""


def _database_positions(query) -> Dict[int, int]:
    """Per partition, the largest next offset any of the app's Database sinks stored."""
    try:
        rows = query('SELECT "partition", MAX("next_offset") FROM "streamkit_offsets" '
                     'WHERE "group_id" = \'dbsink\' GROUP BY "partition"')
    except Exception:  # noqa: BLE001 - no sink delivered yet: no table
        return {}
    return {int(partition): int(offset) for partition, offset in rows}


def _check_database(query, records: List[Input], stateful: bool) -> int:
    """``query(sql)`` -> rows. Returns how many worker processes delivered rows."""
    events = query('SELECT "id", "user", "page", "n" FROM "events"')
    expected = {value["id"]: (key, value["page"].upper(), value["n"] * 2) for _, _, key, value, _ in records}
    got = {row[0]: tuple(row[1:]) for row in events}
    assert len(events) == len(got)
    missing = sorted(set(expected) - set(got))
    extra = sorted(set(got) - set(expected))
    assert not missing, f"{len(missing)} id(s) missing from events, e.g. {missing[:5]}"
    assert not extra, f"{len(extra)} unexpected id(s) in events, e.g. {extra[:5]}"
    wrong = sorted(i for i in expected if got[i] != expected[i])
    assert not wrong, f"{len(wrong)} event row(s) with wrong values, e.g. {[(i, got[i]) for i in wrong[:3]]}"

    deliveries = query('SELECT "id", "run", "origin_partition", "origin_offset" FROM "deliveries"')
    per_id = Counter(row[0] for row in deliveries)
    twice = sorted(i for i, n in per_id.items() if n > 1)
    assert not twice, (f"{len(twice)} record(s) delivered by more than one worker run, e.g. "
                       f"{[r for r in deliveries if r[0] in set(twice[:3])]}")
    origin = {value["id"]: (p, o) for p, o, _, value, _ in records}
    assert set(per_id) == set(origin), \
        f"deliveries: {len(set(origin) - set(per_id))} missing, {len(set(per_id) - set(origin))} extra"
    misplaced = [row for row in deliveries if (row[2], row[3]) != origin[row[0]]]
    assert not misplaced, f"{len(misplaced)} row(s) with the wrong origin, e.g. {misplaced[:3]}"

    ends = _ends(records)
    sinks = ["deliveries", "events"] + (["counts-db"] if stateful else [])
    stored = {(row[0], row[1]): int(row[2]) for row in query(
        'SELECT "sink", "partition", "next_offset" FROM "streamkit_offsets" WHERE "group_id" = \'dbsink\'')}
    assert stored == {(sink, p): ends[p] for sink in sinks for p in range(PARTITIONS)}, stored

    if stateful:
        counts = dict(query('SELECT "user", "value" FROM "counts"'))
        truth = Counter(key for _, _, key, _, _ in records)
        assert counts == dict(truth), {k: (counts.get(k), truth.get(k)) for k in set(counts) | set(truth)
                                       if counts.get(k) != truth.get(k)}
    return len({row[1] for row in deliveries})


def _run_database_scenario(tmp_path: Path, url: str, query, guarantee: str, seed: int) -> None:
    stateful = guarantee == "exactly_once"
    (tmp_path / "db_app.py").write_text(DB_APP.format(url=url, stateful=stateful))
    broker_dir = tmp_path / "broker"
    records = _inputs(DB_RECORDS)
    plan = DB_PLAN_STATEFUL if stateful else DB_PLAN
    crasher = Crasher(tmp_path, broker_dir, "db_app", "dbsink", guarantee, len(records), seed,
                      sink_positions=lambda: _database_positions(query))
    crasher.run(plan, records, FEED_SECONDS)
    assert crasher.kills >= len(plan) - 1, crasher.summary()
    assert crasher.mid_run_kills >= 1, crasher.summary()
    assert crasher.sink_ahead_kills >= 1, f"no kill left the database ahead of the offsets: {crasher.summary()}"
    runs = _check_database(query, records, stateful)
    assert runs >= 2, f"all rows came from {runs} worker run: no crash interrupted the delivery"
    print(f"\n{guarantee}: {crasher.summary()}\n{len(records)} rows exactly once, delivered by {runs} runs")


def _sqlite_query(path: Path):
    def query(sql: str) -> list:
        if not path.exists():  # not created by the test: the sink creates it
            raise FileNotFoundError(path)
        connection = sqlite3.connect(path)
        try:
            return [tuple(row) for row in connection.execute(sql).fetchall()]
        finally:
            connection.close()
    return query


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
def test_sqlite_database_exactly_once_across_kill_minus_9(tmp_path: Path, guarantee: str) -> None:
    _run_database_scenario(tmp_path, "sqlite:///out.db", _sqlite_query(tmp_path / "out.db"), guarantee,
                           seed=21 if guarantee == "exactly_once" else 22)


@pytest.fixture(scope="module")
def postgres_server():
    from tests.postgres_server import start_postgres

    url, stop, reason = start_postgres()
    if url is None:
        pytest.skip(f"PostgreSQL sink crash tests skipped: {reason}")
    try:
        yield url
    finally:
        stop()


@pytest.fixture
def postgres_database(postgres_server: str):
    """A fresh database on the module's server: its URL."""
    import psycopg

    name = f"crash_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres_server, autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    yield postgres_server.rsplit("/", 1)[0] + "/" + name
    with psycopg.connect(postgres_server, autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
def test_postgres_database_exactly_once_across_kill_minus_9(tmp_path: Path, postgres_database: str,
                                                            guarantee: str) -> None:
    import psycopg

    def query(sql: str) -> list:
        with psycopg.connect(postgres_database) as connection:
            return [tuple(row) for row in connection.execute(sql).fetchall()]

    _run_database_scenario(tmp_path, postgres_database, query, guarantee,
                           seed=31 if guarantee == "exactly_once" else 32)


# -- a target that cannot be created ----------------------------------------------------------

def test_unwritable_archive_fails_clearly_without_committing_then_recovers(tmp_path: Path) -> None:
    broker_dir = tmp_path / "broker"
    records = _inputs(6_000)
    half = 3_000  # a multiple of the partition count: offsets stay i // 3
    module = tmp_path / "archive_app.py"

    # A clean first half, so that "did not advance" is measured against real offsets.
    module.write_text(ARCHIVE_APP.format(path="archive"))
    _produce(broker_dir, records[:half])
    code, err = _finish(_start(tmp_path, broker_dir, "archive_app", "at_least_once"))
    assert code == 0, err
    with EmbeddedBroker(broker_dir) as broker:
        before = _committed(broker, "archiver")
    assert before == _ends(records[:half])

    # The second half, to an archive whose parent directory is a regular file.
    _produce(broker_dir, records[half:])
    (tmp_path / "blocker").write_text("a file where a directory should be\n")
    bad = tmp_path / "blocker" / "archive"
    module.write_text(ARCHIVE_APP.format(path=str(bad)))
    code, err = _finish(_start(tmp_path, broker_dir, "archive_app", "at_least_once"))
    assert code not in (0, -signal.SIGKILL), f"exit code {code}: {err}"
    assert "sink 'archive'" in err and f"ParquetArchive({bad})" in err, err
    assert "NotADirectoryError" in err or "Not a directory" in err, err
    assert "Traceback" not in err, err
    print(f"\nthe worker's error: {err.strip()}")
    with EmbeddedBroker(broker_dir) as broker:
        assert _committed(broker, "archiver") == before, "offsets advanced past records the sink never took"
    assert not bad.exists()

    # Fixed: the rerun archives the second half; all of it is there exactly once.
    module.write_text(ARCHIVE_APP.format(path="archive"))
    code, err = _finish(_start(tmp_path, broker_dir, "archive_app", "at_least_once"))
    assert code == 0, err
    with EmbeddedBroker(broker_dir) as broker:
        assert _committed(broker, "archiver") == _ends(records)
    assert _check_archive(tmp_path / "archive", records) == len(records)


def test_database_rejecting_rows_fails_clearly_without_committing_then_recovers(tmp_path: Path) -> None:
    """A permanent error at delivery time (the table rejects rows mid-stream): the worker
    stops with an error naming the sink, the records and the cause; the broker's offsets
    and the sink's own stay before the rejected records; once the table is fixed a rerun
    stores every record exactly once."""
    broker_dir = tmp_path / "broker"
    records = _inputs(3_000)
    accepted = 2_000  # rows with n = 2 * id < 4000 pass the table's CHECK
    database = tmp_path / "out.db"
    connection = sqlite3.connect(database)
    connection.execute('CREATE TABLE "events" ("id" INTEGER, "user" TEXT, "page" TEXT, '
                       '"n" INTEGER CHECK ("n" < 4000), PRIMARY KEY ("id"))')
    connection.commit()
    connection.close()
    query = _sqlite_query(database)
    (tmp_path / "db_app.py").write_text(DB_APP.format(url="sqlite:///out.db", stateful=False))

    _produce(broker_dir, records[:accepted])
    code, err = _finish(_start(tmp_path, broker_dir, "db_app", "exactly_once"))
    assert code == 0, err
    with EmbeddedBroker(broker_dir) as broker:
        before = _committed(broker, "dbsink")
    assert before == _ends(records[:accepted])

    _produce(broker_dir, records[accepted:])
    code, err = _finish(_start(tmp_path, broker_dir, "db_app", "exactly_once"))
    assert code not in (0, -signal.SIGKILL), f"exit code {code}: {err}"
    assert "sink 'events'" in err and "Database(sqlite:///out.db, table events)" in err, err
    assert "IntegrityError" in err and "CHECK constraint failed" in err, err
    assert re.search(r"views\[\d\] offsets \d+\.\.\d+", err), f"the error does not name the records: {err}"
    assert "Traceback" not in err, err
    print(f"\nthe worker's error: {err.strip()}")
    with EmbeddedBroker(broker_dir) as broker:
        assert _committed(broker, "dbsink") == before, "offsets advanced past records the sink never took"
    stored = {row[0]: row[1] for row in query('SELECT "partition", "next_offset" FROM "streamkit_offsets" '
                                              'WHERE "sink" = \'events\'')}
    assert stored == before, f"the events sink stored offsets past the rejected rows: {stored}"
    assert query('SELECT MAX("id") FROM "events"') == [(accepted - 1,)]

    # Fixed: the same table without the CHECK; the rerun stores the rest exactly once.
    connection = sqlite3.connect(database)
    connection.executescript('''
        BEGIN;
        CREATE TABLE "events_fixed" ("id" INTEGER, "user" TEXT, "page" TEXT, "n" INTEGER, PRIMARY KEY ("id"));
        INSERT INTO "events_fixed" SELECT "id", "user", "page", "n" FROM "events";
        DROP TABLE "events";
        ALTER TABLE "events_fixed" RENAME TO "events";
        COMMIT;
    ''')
    connection.close()
    code, err = _finish(_start(tmp_path, broker_dir, "db_app", "exactly_once"))
    assert code == 0, err
    with EmbeddedBroker(broker_dir) as broker:
        assert _committed(broker, "dbsink") == _ends(records)
    _check_database(query, records, stateful=False)
