"""Sink throughput on the embedded broker: records delivered to ``sk.sinks`` per second.

Like ``python -m bench`` (bench/embedded_throughput.py) and ``python -m bench joins``:
pre-produces --events N (default 1,000,000) deterministic JSON page views (seed 42,
keyed by one of 10,000 pages ``page-<i>``, value {"user", "page", "ts", "amount"},
record timestamp = event time) into a fresh embedded broker directory, topic
``events`` with 3 partitions; runs one worker per scenario in a child process
(``Worker(..., until_idle=0.3)``, as ``streamkit worker --until-idle`` runs it) until
the input is consumed and committed; checks that every input record was processed
and every input offset committed; verifies the sink's output against the input
before any figure is printed; and reports input events/s (median of --reps) and the
worker's peak RSS (VmHWM). Events/s is timed from the worker's start until it has
stopped, less the idle wait: that covers its last commit and, for the file sinks,
the roll of the rows still staged when the task closes (part of delivering them).
All scenarios: at_least_once, RocksDB store backend, record cache at its default (on),
default commit interval (1 s under at_least_once), every scenario reads the same input.

  archive-parquet     b.stream("events").sink(sk.sinks.ParquetArchive(<dir>, roll_records=100_000)):
                      each partition's records staged at every commit (fsynced) and rolled into
                      events+<partition>+<first-offset>-<last-offset>.parquet files of at most
                      100,000 rows, the rest rolled when the worker stops cleanly.
                      Verified: reading every rolled file (pyarrow) plus every row still staged in
                      <dir>/_staging (none expected after the clean stop, which rolls) gives each
                      input (partition, offset) exactly once, with the input's key (JSON text),
                      value (JSON text, equal to the input's JSON) and timestamp; in each file
                      the partition column is the name's partition, rows are in offset order and
                      the smallest/largest offsets are the name's first/last; no file exceeds
                      roll_records; no temporary file is left; each staging file's last marker
                      is the partition's end offset.
  archive-jsonlines   the same with sk.sinks.JsonLines(<dir>, roll_records=100_000): .jsonl files
                      of {"key", "value", "timestamp", "partition", "offset"} lines (key and value
                      as JSON values). Verified exactly as archive-parquet.
  sqlite-upsert       b.stream("events").group_by_key().count(name="c").to_stream()
                      .sink(sk.sinks.Database("sqlite:///<dir>/out.db", "counts", key_columns=["key"])):
                      a per-page count over the 10,000 pages (RocksDB store, cached, so each
                      commit forwards the latest count per changed page), upserted into SQLite
                      (WAL, synchronous=FULL) in one transaction per task and commit, with the
                      task's next offsets in streamkit_offsets. The scalar key goes to column
                      "key", the count to column "value".
                      Verified: table counts holds exactly the input's pages, each with the count
                      of its events computed directly from the input; streamkit_offsets holds,
                      for this app and sink, each partition's end offset.
  stateless-baseline  b.stream("events").map_values(lambda v: v).to("out"): the same records
                      written to a topic instead, for the ratio column (a scenario's events/s
                      over the baseline's). Verified: `out` holds exactly the input's
                      (key, value) records, as a multiset.

The ratio uses the baseline of the same run, or, if --only left it out, the baseline in
bench/results/sink_throughput.json measured with the same --events (else none).
Results are merged into that file per scenario (other scenarios' results are kept).

Usage: python -m bench sinks [--events 1000000] [--reps 1] [--only SCENARIO[,SCENARIO...]]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import Counter
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

import orjson

import streamkit as sk
from bench.embedded_throughput import (PARTITIONS, ROOT, make_events, produce, read_topic,
                                      run_worker_process, time_worker)
from streamkit.transport.base import TopicPartition
from streamkit.transport.embedded.transport import EmbeddedTransport
from streamkit.core.partitioner import partition_for_key

KEYS = 10_000
ROLL_RECORDS = 100_000
TOPIC = "events"
BASELINE = "stateless-baseline"
RESULTS = os.path.join(ROOT, "bench", "results", "sink_throughput.json")

Record = Tuple[bytes, bytes, int]
"""(key, value, timestamp) as produced."""


class Expected(NamedTuple):
    partitions: List[List[Record]]
    """Per partition, its records in offset order (the topic is fresh: offset = index)."""
    counts: Dict[str, int]
    """Events per key."""


def expected_of(events: List[Record]) -> Expected:
    partitions: List[List[Record]] = [[] for _ in range(PARTITIONS)]
    for record in events:
        partitions[partition_for_key(record[0], PARTITIONS)].append(record)
    return Expected(partitions, dict(Counter(k.decode() for k, _, _ in events)))


def sink_dir(directory: str) -> str:
    """Where the scenario's sink writes: inside the broker directory, removed with it."""
    return os.path.join(directory, "sink-output")


# -- apps -------------------------------------------------------------------------------

def new_app(name: str) -> sk.App:
    app = sk.App(f"bench-sink-{name}", store_backend="rocksdb", processing_guarantee="at_least_once")
    app.topic(TOPIC, partitions=PARTITIONS)
    return app


def archive_app(name: str, directory: str, sink_class: Callable[..., sk.sinks.Sink]) -> sk.App:
    app = new_app(name)

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        b.stream(TOPIC).sink(sink_class(sink_dir(directory), roll_records=ROLL_RECORDS))
    return app


def sqlite_app(directory: str) -> sk.App:
    app = new_app("sqlite-upsert")

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        (b.stream(TOPIC).group_by_key().count(name="c").to_stream()
          .sink(sk.sinks.Database(f"sqlite:///{database_path(directory)}", "counts", key_columns=["key"])))
    return app


def database_path(directory: str) -> str:
    return os.path.join(sink_dir(directory), "out.db")


def baseline_app(directory: str) -> sk.App:
    app = new_app(BASELINE)

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        b.stream(TOPIC).map_values(lambda v: v).to("out")
    return app


# -- verification -------------------------------------------------------------------------

class ArchiveRows:
    """Checks rows read back from an archive against the input, one (partition, offset) at a time."""

    def __init__(self, expected: Expected) -> None:
        self.expected = expected
        self.seen = [bytearray(len(p)) for p in expected.partitions]
        self.problems: List[str] = []
        self.problem_count = 0
        self.rows = 0

    def problem(self, text: str) -> None:
        self.problem_count += 1
        if len(self.problems) < 5:
            self.problems.append(text)

    def check(self, where: str, partition: int, offset: int, key: Any, value: Any, timestamp: int,
              value_is_text: bool) -> None:
        """``key``: the archived key as JSON text (value_is_text) or as a JSON value; same for ``value``."""
        self.rows += 1
        if not 0 <= partition < PARTITIONS or not 0 <= offset < len(self.expected.partitions[partition]):
            self.problem(f"{where}: ({partition}, {offset}) is not an input record")
            return
        if self.seen[partition][offset] < 255:
            self.seen[partition][offset] += 1
        in_key, in_value, in_ts = self.expected.partitions[partition][offset]
        got_key = orjson.loads(key) if value_is_text and key is not None else key
        if got_key != in_key.decode():
            self.problem(f"{where}: ({partition}, {offset}) has key {got_key!r}, the input {in_key.decode()!r}")
        if value_is_text:
            same = value is not None and (value.encode() == in_value or orjson.loads(value) == orjson.loads(in_value))
        else:
            same = orjson.dumps(value) == in_value or value == orjson.loads(in_value)
        if not same:
            self.problem(f"{where}: ({partition}, {offset}) has value {str(value)[:80]}, the input {in_value[:80]!r}")
        if timestamp != in_ts:
            self.problem(f"{where}: ({partition}, {offset}) has timestamp {timestamp}, the input {in_ts}")

    def exactly_once(self) -> None:
        for p, seen in enumerate(self.seen):
            missing = seen.count(0)
            repeated = len(seen) - missing - seen.count(1)
            if missing or repeated:
                first = next(i for i, c in enumerate(seen) if c != 1)
                self.problem(f"partition {p}: {missing:,} input offsets missing, {repeated:,} archived more than "
                             f"once (first: offset {first}, {seen[first]} time(s))")


def verify_archive(directory: str, expected: Expected, extension: str) -> str:
    root = sink_dir(directory)
    pattern = re.compile(r"^" + re.escape(TOPIC) + r"\+(\d+)\+(\d+)-(\d+)\." + extension + "$")
    rows = ArchiveRows(expected)
    files = 0
    largest = 0
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if name == "_staging":
            continue
        match = pattern.match(name)
        if not match:
            rows.problem(f"unexpected entry {name!r} in the archive directory")
            continue
        files += 1
        partition, first, last = (int(g) for g in match.groups())
        if extension == "parquet":
            import pyarrow.parquet as pq

            table = pq.read_table(path)
            want = ["key", "value", "timestamp", "partition", "offset"]
            if table.column_names != want:
                rows.problem(f"{name}: columns {table.column_names}, expected {want}")
                continue
            data = table.to_pydict()
            items = zip(data["partition"], data["offset"], data["key"], data["value"], data["timestamp"])
            text = True
        else:
            with open(path, "rb") as f:
                lines = [orjson.loads(line) for line in f]
            items = ((r["partition"], r["offset"], r["key"], r["value"], r["timestamp"]) for r in lines)
            text = False
        offsets = []
        for part, offset, key, value, ts in items:
            if part != partition:
                rows.problem(f"{name}: a row of partition {part}")
            rows.check(name, part, offset, key, value, ts, text)
            offsets.append(offset)
        largest = max(largest, len(offsets))
        if not offsets:
            rows.problem(f"{name}: empty")
            continue
        if offsets != sorted(offsets):
            rows.problem(f"{name}: rows not in offset order")
        if (min(offsets), max(offsets)) != (first, last):
            rows.problem(f"{name}: offsets {min(offsets)}..{max(offsets)}, the name says {first}..{last}")
        if len(offsets) > ROLL_RECORDS:
            rows.problem(f"{name}: {len(offsets):,} rows, more than roll_records={ROLL_RECORDS:,}")
    staged = 0
    staging = os.path.join(root, "_staging")
    for name in sorted(os.listdir(staging)) if os.path.isdir(staging) else []:
        match = re.match(r"^" + re.escape(TOPIC) + r"\+(\d+)\.jsonl$", name)
        if not match:
            rows.problem(f"unexpected entry _staging/{name}")
            continue
        partition = int(match.group(1))
        marker = None
        with open(os.path.join(staging, name), "rb") as f:
            for line in f:
                item = orjson.loads(line)
                if isinstance(item, dict):
                    marker = item.get("next")
                    continue
                offset, ts, key, value = item
                staged += 1
                rows.check(f"_staging/{name}", partition, offset, key, value, ts, False)
        if marker != len(expected.partitions[partition]):
            rows.problem(f"_staging/{name}: last marker next={marker}, the partition ends at "
                         f"{len(expected.partitions[partition])}")
    rows.exactly_once()
    if staged:
        rows.problem(f"{staged:,} row(s) still staged after the clean stop")
    assert not rows.problem_count, f"{rows.problem_count:,} problem(s): " + "; ".join(rows.problems)
    total = sum(len(p) for p in expected.partitions)
    return (f"ok: {total:,} input (partition, offset) exactly once with their key, value and timestamp, "
            f"in {files} .{extension} files (largest {largest:,} rows) named by their min/max offsets; "
            f"{staged} staged")


def verify_sqlite(directory: str, expected: Expected) -> str:
    connection = sqlite3.connect(database_path(directory))
    try:
        columns = [row[1] for row in connection.execute('PRAGMA table_info("counts")')]
        assert columns == ["key", "value"], f"table counts has columns {columns}, expected ['key', 'value']"
        got = dict(connection.execute('SELECT "key", "value" FROM "counts"'))
        offsets = {(topic, partition): next_offset for group, sink, topic, partition, next_offset in connection.execute(
            'SELECT "group_id", "sink", "topic", "partition", "next_offset" FROM "streamkit_offsets"')
            if group == new_app("sqlite-upsert").id}
    finally:
        connection.close()
    want = expected.counts
    if got != want:
        missing = [k for k in want if k not in got]
        extra = [k for k in got if k not in want]
        wrong = [(k, got[k], want[k]) for k in want if k in got and got[k] != want[k]]
        raise AssertionError(f"counts: {len(got):,} rows for {len(want):,} pages: {len(missing)} missing "
                             f"{missing[:3]}, {len(extra)} unexpected {extra[:3]}, {len(wrong)} wrong "
                             f"(key, got, expected) {wrong[:3]}")
    ends = {(TOPIC, p): len(records) for p, records in enumerate(expected.partitions)}
    assert offsets == ends, f"streamkit_offsets holds {offsets}, the partitions end at {ends}"
    return (f"ok: all {len(got):,} pages' counts equal the direct count of the input "
            f"({sum(got.values()):,} events); stored offsets = partition ends")


def verify_baseline(directory: str, expected: Expected) -> str:
    transport = EmbeddedTransport(directory)
    try:
        got = Counter(read_topic(transport, "out"))
    finally:
        transport.close()
    want = Counter((k, v) for records in expected.partitions for k, v, _ in records)
    if got != want:
        raise AssertionError(f"out: {sum(got.values()):,} records, expected {sum(want.values()):,}: "
                             f"{sum((want - got).values()):,} missing, {sum((got - want).values()):,} unexpected")
    return f"ok: `out` holds exactly the {sum(got.values()):,} input records"


# -- running ----------------------------------------------------------------------------

class Scenario(NamedTuple):
    make_app: Callable[[str], sk.App]
    """(broker directory) → the app"""
    verify: Callable[[str, Expected], str]
    """(broker directory, expected) → the verification line; raises AssertionError."""


SCENARIOS: Dict[str, Scenario] = {
    "archive-parquet": Scenario(lambda d: archive_app("archive-parquet", d, sk.sinks.ParquetArchive),
                                lambda d, e: verify_archive(d, e, "parquet")),
    "archive-jsonlines": Scenario(lambda d: archive_app("archive-jsonlines", d, sk.sinks.JsonLines),
                                  lambda d, e: verify_archive(d, e, "jsonl")),
    "sqlite-upsert": Scenario(sqlite_app, verify_sqlite),
    BASELINE: Scenario(baseline_app, verify_baseline),
}


def child(name: str, directory: str) -> None:
    time_worker(SCENARIOS[name].make_app(directory), directory)


def run_once(name: str, events: List[Record], expected: Expected) -> dict:
    """Produce the input into a fresh broker directory, run the worker, check every input
    record was processed and committed, verify the sink's output; return the figures."""
    scenario = SCENARIOS[name]
    n = len(events)
    directory = tempfile.mkdtemp(prefix=f"sk-bench-{name}-")
    try:
        transport = EmbeddedTransport(directory)
        produce(transport, events)
        transport.close()
        figures = run_worker_process(name, directory, "bench.sink_throughput")
        assert figures["records"] == n, f"{name}: processed {figures['records']} of {n}"
        transport = EmbeddedTransport(directory)
        committed = transport.admin.committed_offsets(scenario.make_app(directory).id)
        transport.close()
        for p, records in enumerate(expected.partitions):
            done = committed.get(TopicPartition(TOPIC, p), 0)
            assert done == len(records), f"{name}: committed {done} of {len(records)} offsets of {TOPIC}[{p}]"
        try:
            verification = scenario.verify(directory, expected)
        except AssertionError as exc:
            verification = f"FAILED: {exc}"
        except Exception as exc:  # noqa: BLE001 - an unreadable output fails verification too
            verification = f"FAILED: {type(exc).__name__}: {exc}"
        return {"seconds": figures["seconds"], "events_per_second": n / figures["seconds"],
                "peak_rss_mib": figures["peak_rss_mib"], "verification": verification}
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def load_results() -> dict:
    try:
        with open(RESULTS) as f:
            existing = json.load(f)
    except (FileNotFoundError, ValueError):
        return {}
    return existing if isinstance(existing, dict) and isinstance(existing.get("scenarios"), dict) else {}


def main(argv: Optional[List[str]] = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 3 and argv[0] == "--child":
        child(argv[1], argv[2])
        return
    parser = argparse.ArgumentParser(prog="python -m bench sinks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--only", default=None, metavar="NAME[,NAME...]",
                        help=f"run only these: {', '.join(SCENARIOS)}")
    args = parser.parse_args(argv)
    if args.events < 1 or args.reps < 1:
        parser.error("--events and --reps must be positive")
    only = args.only.split(",") if args.only else list(SCENARIOS)
    unknown = set(only) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenario(s) {', '.join(sorted(unknown))}")
    print(f"embedded broker, sinks, {args.events:,} JSON events over {KEYS:,} keys, {PARTITIONS} partitions, "
          f"1 worker process, at_least_once, RocksDB, caching on, {os.cpu_count()} cores, {args.reps} rep(s)")
    events = make_events(args.events, keys=KEYS)
    expected = expected_of(events)
    results: Dict[str, dict] = {}
    for name in [n for n in SCENARIOS if n in only]:
        runs = [run_once(name, events, expected) for _ in range(args.reps)]
        rates = [r["events_per_second"] for r in runs]
        failed = [r["verification"] for r in runs if r["verification"].startswith("FAILED")]
        results[name] = {"events": args.events, "events_per_second": statistics.median(rates), "reps": rates,
                         "worker_peak_rss_mib": max(r["peak_rss_mib"] for r in runs),
                         "verification": failed[0] if failed else runs[0]["verification"],
                         "measured": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        r = results[name]
        print(f"  {name:<20} {r['events_per_second']:>9,.0f} events/s  peak RSS {r['worker_peak_rss_mib']:>5,.0f} MiB"
              f"  (reps: {', '.join(f'{x:,.0f}' for x in rates)})  {r['verification'][:160]}")
    existing = load_results()
    baseline, baseline_from = results.get(BASELINE), "this run"
    if baseline is None:
        stored = existing.get("scenarios", {}).get(BASELINE)
        if stored and stored.get("events") == args.events and "events_per_second" in stored:
            baseline, baseline_from = stored, f"an earlier run, {stored.get('measured', 'date unknown')}"
    for r in results.values():
        r["ratio_to_stateless_baseline"] = (r["events_per_second"] / baseline["events_per_second"]
                                            if baseline else None)
        r["ratio_baseline_measured"] = baseline.get("measured") if baseline else None
    print()
    print(f"  {'scenario':<20} {'events/s':>10} {'ratio':>6} {'peak RSS MiB':>12}  verification")
    for name, r in results.items():
        ratio = r["ratio_to_stateless_baseline"]
        print(f"  {name:<20} {r['events_per_second']:>10,.0f} {'-' if ratio is None else f'{ratio:.2f}':>6} "
              f"{r['worker_peak_rss_mib']:>12,.0f}  {r['verification'][:200]}")
    print(f"  ratio: events/s over {BASELINE}'s ({baseline_from})" if baseline else
          f"  ratio: no {BASELINE} with --events {args.events:,} in this run or {RESULTS}")
    merged = {"partitions": PARTITIONS, "keys": KEYS, "roll_records": ROLL_RECORDS,
              "scenarios": {**existing.get("scenarios", {}), **results}}
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    temporary = RESULTS + ".tmp"
    with open(temporary, "w") as f:
        json.dump(merged, f, indent=2)
    os.replace(temporary, RESULTS)
    print(f"  results merged into {RESULTS}")
    if any(r["verification"].startswith("FAILED") for r in results.values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
