"""Spark replay vs the streaming runtime, over the same page views in an embedded broker.

``python -m bench spark``: pre-produces --events N (default 5,000,000) deterministic
JSON page views (seed 42) into a fresh embedded broker directory, topic ``events``
(3 partitions, retention.ms=-1), keyed by user (one of 10,000), value {"user", "page",
"ts", "amount"} with one of 1,000 pages, record timestamp = ``ts``. Event time advances
1 ms per event; 1% of the events are 1-5 s out of order (inside the 10 s grace:
counted), and 0.1% (after the first 10,000) are 120-600 s late (past any open window:
dropped). Event i's user is one whose key hashes to partition i % 3, so the three
partitions advance through event time together (--random-users: any user, see
make_events). Producing is not timed. The app (bench/apps_spark_replay.py):

    group_by(page) → windowed_by(TumblingWindows(60 s, grace=10 s)) → count
      → suppress(until_window_closes) → to_stream → to("page-counts-per-minute")

(a) streaming: one embedded worker in a child process (``Worker(..., until_idle=0.3)``,
    as ``streamkit worker --until-idle`` runs it; RocksDB, record cache on,
    at_least_once) until every input record is processed and committed. Seconds from
    the worker's start until it has stopped, less the idle wait (bench/embedded_throughput.py's
    time_worker); peak RSS: the worker process's VmHWM.
(b) Spark: ``streamkit.spark.replay(app, inputs={"events": <broker dir>}, output=<dir>,
    spark=session)`` on ``get_session("local[2]", spark.ui.enabled=false)``, reading
    the same broker directory after (a). Seconds: the wall time of the replay() call
    (stages, output Parquet and final stores written); the SparkSession's start-up is
    timed and reported apart. Per stage (each sub-topology, or cycle of them) and per
    output written: its wall seconds as the replay reports them (ReplayResult.stages and
    .outputs), printed and recorded, and the rest of the replay's wall time (planning,
    between stages). The Spark process tree (the JVM, the Python daemon and workers) is
    sampled with psutil every 0.2 s during the replay: the peak of its summed RSS (see
    TreeUsage) and its CPU seconds; and the JVM's own peak RSS (VmHWM).
    The session is streamkit's own (get_session's SESSION_DEFAULTS: 1 GiB driver heap).

Both figures are input events/s: N / seconds. Ratio: Spark's over the streaming run's.

Verified (any failure is printed with the figures, recorded in the results and gives
exit status 1):
- the worker committed every input offset, processed every event twice (the group_by's
  task, then the count's through the repartition topic), dropped as late exactly the
  events made late and skipped none; the replay read N records;
- the live output topic and the replay's (Parquet, OUTPUT/topics/page-counts-per-minute)
  each hold exactly the expected final counts, one record per (page, window): computed
  directly from the input, every window whose end + grace is at most the final stream
  time of its task (the largest timestamp of its pages' events), counting the events
  that were not late; so the counts' total equals the non-late events in closed windows;
- ``streamkit.spark.compare_topic(..., mode="records")`` of the two is equal and non-empty.

Results go to bench/results/spark_replay.json (overwritten), with the machine's 1-minute
load average before and after each side (other processes share the cores).

``--bulk`` replays with ``bulk=True`` (the windowed count's stage as a bulk Spark SQL plan)
instead of the library default (``bulk=False``: every stage through the task runner).

Usage: python -m bench spark [--events 5000000] [--bulk] [--random-users]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from typing import Dict, List, Optional, Tuple

import orjson

from bench.apps_spark_replay import GRACE_MS, KEEP, OUTPUT, PARTITIONS, TOPIC, WINDOW_MS, app
from bench.embedded_throughput import ROOT, read_topic, run_worker_process, time_worker
from bench.join_throughput import produce_to
from streamkit.serdes import compact_json
from streamkit.transport.base import TopicPartition
from streamkit.transport.embedded.transport import EmbeddedTransport
from streamkit.core.partitioner import partition_for_key

PAGES = 1000
USERS = 10_000
OUT_OF_ORDER = 0.01
"""Share of events 1-5 s behind event time (inside the grace)."""
LATE = 0.001
"""Share of events 120-600 s behind (late: their windows are closed)."""
LATE_AFTER = 10_000
"""No late event before this index (stream time must be well past them)."""
MASTER = "local[2]"
RESULTS = os.path.join(ROOT, "bench", "results", "spark_replay.json")
SESSION_KEYS = ("spark.driver.memory", "spark.driver.extraJavaOptions", "spark.sql.adaptive.enabled",
                "spark.python.worker.reuse", "spark.sql.execution.arrow.maxRecordsPerBatch")
"""Session settings recorded with the figures."""
START = 1_700_000_000_000

Record = Tuple[bytes, bytes, int]


# -- input and expectation ------------------------------------------------------------------

def make_events(n: int, seed: int = 42, random_users: bool = False) -> Tuple[List[Record], int]:
    """``n`` page views keyed by user, generated as bench/embedded_throughput.py's
    make_windowed_events does; returns them and how many are late by construction.

    Event ``i`` goes to partition ``i % 3``: its user is drawn from the users whose key
    hashes there, so the partitions advance through event time together. With
    ``random_users``, any user: partitions then differ by a few percent in size (10,000
    keys), and a worker, which fetches the same number of records from each, runs the
    denser partitions further and further behind in event time.

    The values go through compact_json (orjson.dumps in a right-sized object: a bare
    orjson result holds a ~4 KiB allocation, 20 GiB for 5,000,000 events)."""
    rng = random.Random(seed)
    users = [f"user-{u}" for u in range(USERS)]
    by_partition: List[List[str]] = [[] for _ in range(PARTITIONS)]
    for user in users:
        by_partition[partition_for_key(user.encode(), PARTITIONS)].append(user)
    out = []
    late = 0
    for i in range(n):
        pool = users if random_users else by_partition[i % PARTITIONS]
        user = pool[rng.randrange(len(pool))]
        page = f"page-{rng.randrange(PAGES)}"
        draw = rng.random()
        ts = START + i
        if draw < OUT_OF_ORDER:
            ts -= rng.randrange(1_000, 5_000)
        elif draw < OUT_OF_ORDER + LATE and i >= LATE_AFTER:
            ts -= rng.randrange(120_000, 600_000)
            late += 1
        value = {"user": user, "page": page, "ts": ts, "amount": rng.randrange(100)}
        out.append((user.encode(), compact_json(value), ts))
    return out, late


def produce(directory: str, events: List[Record]) -> List[int]:
    """bench/embedded_throughput.py's produce, into a topic created with retention.ms=-1:
    under the default retention the broker deletes sealed segments of 2023 event times
    (a worker then skips them, as a Kafka consumer whose offset fell off the log).
    Returns the partitions' sizes."""
    transport = EmbeddedTransport(directory)
    try:
        return produce_to(transport, TOPIC, events, config=KEEP)
    finally:
        transport.close()


def is_late(i: int, ts: int) -> bool:
    return ts < START + i - 60_000


class Expected:
    """The final counts the app must emit, computed from the input."""

    def __init__(self, events: List[Record]) -> None:
        counts: Counter = Counter()
        stream_time = [-1] * PARTITIONS  # per task of the count: the largest timestamp of its pages
        page_partition: Dict[str, int] = {}
        self.late = 0
        for i, (_user, value, ts) in enumerate(events):
            page = orjson.loads(value)["page"]
            p = page_partition.get(page)
            if p is None:
                p = page_partition[page] = partition_for_key(page.encode(), PARTITIONS)
            if ts > stream_time[p]:
                stream_time[p] = ts
            if is_late(i, ts):
                self.late += 1
                continue
            counts[(page, ts - ts % WINDOW_MS)] += 1
        self.non_late = sum(counts.values())
        self.counts = {(page, start): c for (page, start), c in counts.items()
                       if start + WINDOW_MS + GRACE_MS <= stream_time[page_partition[page]]}
        self.closed_events = sum(self.counts.values())

    def check(self, side: str, got: List[Tuple[str, int, int, int]]) -> str:
        """``got``: (page, start, end, count) records of one side; "ok: ..." or "FAILED: ..."."""
        final: Dict[Tuple[str, int], int] = {}
        repeated = 0
        bad_end = 0
        for page, start, end, count in got:
            if (page, start) in final:
                repeated += 1
            if end != start + WINDOW_MS:
                bad_end += 1
            final[(page, start)] = count
        want = self.counts
        total = sum(final.values())
        if final != want or repeated or bad_end:
            missing = [k for k in want if k not in final]
            extra = [k for k in final if k not in want]
            wrong = [(k, final[k], want[k]) for k in want if k in final and final[k] != want[k]]
            return (f"FAILED: {side}: {len(got):,} records (total count {total:,}) for {len(want):,} expected "
                    f"windows (total {self.closed_events:,}): {repeated:,} repeated, {bad_end:,} with a wrong end, "
                    f"{len(missing):,} missing {missing[:3]}, {len(extra):,} unexpected {extra[:3]}, "
                    f"{len(wrong):,} wrong (window, got, expected) {wrong[:3]}")
        return (f"ok: {side}: {len(final):,} (page, window) final counts, one record each, equal to the input's; "
                f"total {total:,} = the non-late events in closed windows")


def live_output(directory: str) -> List[Tuple[str, int, int, int]]:
    spec = app.build().topics[OUTPUT]
    transport = EmbeddedTransport(directory)
    try:
        records = read_topic(transport, OUTPUT)
    finally:
        transport.close()
    out = []
    for k, v in records:
        key = spec.key_serde.deserialize(k)
        out.append((key.key, key.start, key.end, spec.value_serde.deserialize(v)))
    return out


def replay_output(path: str) -> List[Tuple[str, int, int, int]]:
    import pyarrow.parquet as pq

    if not os.path.isdir(path):
        return []
    spec = app.build().topics[OUTPUT]
    table = pq.read_table(path, columns=["key_bytes", "value_bytes", "partition", "offset"])
    out = []
    for k, v in zip(table.column("key_bytes").to_pylist(), table.column("value_bytes").to_pylist()):
        key = spec.key_serde.deserialize(k)
        out.append((key.key, key.start, key.end, spec.value_serde.deserialize(v)))
    return out


# -- memory and CPU of the Spark process tree ------------------------------------------------

class TreeUsage:
    """Samples a process and its descendants (psutil) every ``interval`` seconds until
    stopped: the peak of their summed RSS, and the CPU seconds each used, as last seen.

    A child the JVM is starting shares the JVM's memory until it runs its program (Java
    starts processes with posix_spawn): such a clone (the JVM's command line) is not
    counted, or a Python daemon's start would count the JVM twice. Spark's Python workers
    are forked from one daemon and share some of its pages: the sum counts those once per
    worker (reading each process's PSS instead costs 0.1 s per process and sample here)."""

    def __init__(self, root: int, interval: float = 0.2) -> None:
        import psutil

        self.root = psutil.Process(root)
        self.root_command = self.root.cmdline()
        self.interval = interval
        self.peak_rss = 0
        self.cpu: Dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> None:
        import psutil

        try:
            processes = [self.root] + self.root.children(recursive=True)
        except psutil.Error:
            return
        rss = 0
        for process in processes:
            try:
                if process is not self.root and process.cmdline() == self.root_command:
                    continue
                memory = process.memory_info()
                times = process.cpu_times()
            except psutil.Error:  # gone between listing and reading
                continue
            rss += memory.rss
            self.cpu[process.pid] = times.user + times.system
        self.peak_rss = max(self.peak_rss, rss)

    @property
    def cpu_seconds(self) -> float:
        return sum(self.cpu.values())

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def __enter__(self) -> "TreeUsage":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


# -- the two runs ---------------------------------------------------------------------------

COUNTERS = ("late_records_dropped", "records_skipped", "records_dead_lettered")


def child(directory: str) -> None:
    time_worker(app, directory, COUNTERS)


def run_streaming(directory: str, n: int, late: int) -> Tuple[dict, List[str]]:
    """The worker's figures and the checks of its run ("ok: ..." / "FAILED: ...")."""
    load = os.getloadavg()[0]
    figures = run_worker_process("spark-replay", directory, "bench.spark_replay")
    figures["load_average_1m"] = [load, os.getloadavg()[0]]
    figures["events_per_second"] = n / figures["seconds"]
    transport = EmbeddedTransport(directory)
    try:
        committed = transport.admin.committed_offsets(app.id)
    finally:
        transport.close()
    done = sum(committed.get(TopicPartition(TOPIC, p), 0) for p in range(PARTITIONS))
    problems = []
    if done != n:
        problems.append(f"committed {done:,} of {n:,} input offsets")
    # each event runs twice: in the group_by's task and, through the repartition topic, in the count's
    if figures["records"] != 2 * n:
        problems.append(f"processed {figures['records']:,} records, expected {2 * n:,} (each event twice)")
    if figures["late_records_dropped"] != late:
        problems.append(f"dropped {figures['late_records_dropped']:,} records as late, expected {late:,}")
    if figures["records_skipped"] or figures["records_dead_lettered"]:
        problems.append(f"skipped {figures['records_skipped']:,}, dead-lettered {figures['records_dead_lettered']:,}")
    if problems:
        return figures, ["FAILED: streaming run: " + "; ".join(problems)]
    return figures, [f"ok: streaming run: all {n:,} input offsets committed, {2 * n:,} records processed, "
                     f"{late:,} dropped as late (the late ones by construction)"]


def _peak_rss_mib(pid: int) -> float:
    """The process's own peak RSS (VmHWM), in MiB."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def run_spark(directory: str, output: str, n: int, bulk: bool) -> Tuple[dict, List[str], object]:
    """The replay's figures, its checks and the session (to compare with, then stop)."""
    from streamkit.spark import get_session, replay

    started = time.perf_counter()
    spark = get_session(MASTER, **{"spark.ui.enabled": "false"})
    startup = time.perf_counter() - started
    spark.sparkContext.setLogLevel("ERROR")
    jvm_pid = spark.sparkContext._gateway.proc.pid
    load = os.getloadavg()[0]
    with TreeUsage(jvm_pid) as tree:
        started = time.perf_counter()
        result = replay(app, inputs={TOPIC: directory}, output=output, spark=spark, bulk=bulk)
        seconds = time.perf_counter() - started
    written = {o.name: o.records for o in result.outputs if o.kind == "topic"}
    stages = [{"name": s.name, "how": s.how, "reads": s.reads, "input_records": s.input_records, "sent": s.sent,
               "slices": s.slices, "seconds": s.seconds} for s in result.stages]
    outputs = [{"kind": o.kind, "name": o.name, "records": o.records, "seconds": o.seconds} for o in result.outputs]
    between = seconds - sum(s.seconds for s in result.stages) - sum(o.seconds for o in result.outputs)
    figures = {"seconds": seconds, "events_per_second": n / seconds, "session_startup_seconds": startup,
               "replay_reported_seconds": result.seconds, "planning_and_between_stages_seconds": between,
               "input_records": result.input_records, "stages": stages, "outputs": outputs,
               "stage_seconds": result.stage_seconds(), "output_records": written.get(OUTPUT),
               "peak_rss_mib": tree.peak_rss / 2**20,
               "tree_cpu_seconds": tree.cpu_seconds, "jvm_peak_rss_mib": _peak_rss_mib(jvm_pid),
               "session_config": {key: spark.conf.get(key, None) for key in SESSION_KEYS},
               "master": MASTER, "bulk": bulk, "spark_version": spark.version,
               "load_average_1m": [load, os.getloadavg()[0]]}
    if result.input_records != n:
        return figures, [f"FAILED: replay: read {result.input_records:,} of {n:,} input records"], spark
    return figures, [f"ok: replay: read all {n:,} input records"], spark


def compare(spark: object, output: str, directory: str) -> Tuple[str, dict]:
    from streamkit.spark import compare_topic

    spec = app.build().topics[OUTPUT]
    started = time.perf_counter()
    report = compare_topic(spark, output, OUTPUT, directory, key_serde=spec.key_serde,
                           value_serde=spec.value_serde, mode="records")
    info = {"equal": report.equal, "live_keys": report.live_keys, "replay_keys": report.replay_keys,
            "differing": report.differing, "seconds": time.perf_counter() - started,
            "examples": [list(map(str, e)) for e in report.examples[:5]]}
    if not report.equal or report.live_keys == 0:
        return "FAILED: " + report.render().replace("\n", ";"), info
    return f"ok: compare_topic (records): equal, {report.live_keys:,} keys on both sides", info


# -- main -----------------------------------------------------------------------------------

def main(argv: Optional[List[str]] = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 3 and argv[0] == "--child":
        child(argv[2])
        return
    parser = argparse.ArgumentParser(prog="python -m bench spark", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=5_000_000)
    parser.add_argument("--results", default=RESULTS, help="where to write the JSON (a small trial run: elsewhere)")
    parser.add_argument("--bulk", action="store_true",
                        help="replay(..., bulk=True): the windowed count as a bulk Spark SQL plan")
    parser.add_argument("--random-users", action="store_true",
                        help="any user for any event: partitions of unequal size (see make_events)")
    args = parser.parse_args(argv)
    if args.events < 1:
        parser.error("--events must be positive")
    n = args.events
    print(f"Spark replay vs streaming runtime: {n:,} JSON page views keyed by user "
          f"({'any user' if args.random_users else 'event i in partition i % 3'}), {PAGES:,} pages, "
          f"{PARTITIONS} partitions; group_by page → 60 s tumbling count (grace 10 s) → suppress "
          f"until_window_closes; {os.cpu_count()} cores; replay bulk={args.bulk}", flush=True)
    directory = tempfile.mkdtemp(prefix="sk-bench-spark-")
    output = tempfile.mkdtemp(prefix="sk-bench-spark-out-")
    spark = None
    try:
        started = time.perf_counter()
        events, late = make_events(n, random_users=args.random_users)
        expected = Expected(events)
        assert expected.late == late, f"{expected.late} events late by time, {late} made late"
        sizes = produce(directory, events)
        del events
        print(f"  input: {n:,} events produced in {time.perf_counter() - started:.1f} s (not timed), partitions "
              f"{'/'.join(f'{s:,}' for s in sizes)}: {expected.late:,} late, {expected.non_late:,} not; "
              f"{len(expected.counts):,} windows close by the end ({expected.closed_events:,} events), "
              "the rest stay open", flush=True)

        live, verification = run_streaming(directory, n, expected.late)
        print(f"  streaming  {live['seconds']:>8.1f} s  {live['events_per_second']:>9,.0f} events/s  "
              f"worker peak RSS {live['peak_rss_mib']:,.0f} MiB", flush=True)
        verification.append(expected.check("live output", live_output(directory)))
        for v in verification:
            print(f"    {v[:600]}", flush=True)

        sparkf: dict = {}
        compared: dict = {}
        ratio = None
        try:
            sparkf, checks, spark = run_spark(directory, output, n, args.bulk)
        except Exception as exc:  # noqa: BLE001 - reported with the streaming figures
            checks = [f"FAILED: replay raised {type(exc).__name__}: {exc}"]
            traceback.print_exc()
        else:
            ratio = sparkf["events_per_second"] / live["events_per_second"]
            print(f"\n  spark      {sparkf['seconds']:>8.1f} s  {sparkf['events_per_second']:>9,.0f} events/s  "
                  f"session start-up {sparkf['session_startup_seconds']:.1f} s (not counted), planning and "
                  f"between stages {sparkf['planning_and_between_stages_seconds']:.1f} s", flush=True)
            print(f"    Spark process tree (JVM + Python daemon and workers): peak RSS summed "
                  f"{sparkf['peak_rss_mib']:,.0f} MiB (JVM alone: peak RSS {sparkf['jvm_peak_rss_mib']:,.0f} MiB); "
                  f"{sparkf['tree_cpu_seconds']:.1f} CPU s", flush=True)
            for stage in sparkf["stages"]:
                how = stage["how"] + (f" in {stage['slices']} slices" if stage["slices"] else "")
                print(f"    stage {stage['name']} ({how}, reads {', '.join(stage['reads'])}): "
                      f"{stage['seconds']:.1f} s, {stage['input_records']:,} replayed record(s) read, "
                      f"{stage['sent']:,} sent", flush=True)
            for written in sparkf["outputs"]:
                print(f"    write {written['kind']} {written['name']}: {written['seconds']:.1f} s, "
                      f"{written['records']:,} record(s)", flush=True)
            print(f"    load average (1 min) before/after: streaming "
                  f"{live['load_average_1m'][0]:.2f}/{live['load_average_1m'][1]:.2f}, spark "
                  f"{sparkf['load_average_1m'][0]:.2f}/{sparkf['load_average_1m'][1]:.2f}", flush=True)
            checks.append(expected.check("replay output", replay_output(os.path.join(output, "topics", OUTPUT))))
            line, compared = compare(spark, output, directory)
            checks.append(line)
        verification += checks
        print()
        for v in checks:
            print(f"    {v[:600]}")
        if ratio is not None:
            print(f"  ratio spark / streaming (events/s): {ratio:.2f}")
        failed = any(v.startswith("FAILED") for v in verification)
        results = {"events": n, "partitions": PARTITIONS, "partition_sizes": sizes, "pages": PAGES,
                   "users": USERS, "random_users": args.random_users, "window_ms": WINDOW_MS,
                   "grace_ms": GRACE_MS, "late_events": expected.late, "windows_emitted": len(expected.counts),
                   "cores": os.cpu_count(), "streaming": live, "spark": sparkf, "ratio_spark_to_streaming": ratio,
                   "compare_topic": compared, "verification": verification, "verified": not failed,
                   "measured": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        os.makedirs(os.path.dirname(os.path.abspath(args.results)), exist_ok=True)
        temporary = args.results + ".tmp"
        with open(temporary, "w") as f:
            json.dump(results, f, indent=2)
        os.replace(temporary, args.results)
        print(f"  results written to {args.results}")
        if failed:
            sys.exit(1)
    finally:
        if spark is not None:
            spark.stop()
        shutil.rmtree(directory, ignore_errors=True)
        shutil.rmtree(output, ignore_errors=True)


if __name__ == "__main__":
    main()
