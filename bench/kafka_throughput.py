"""End-to-end throughput on a Kafka-protocol broker.

Pre-produces N JSON page-view events (the embedded bench's generator: deterministic
seed, 1,000 pages, keyed by page, 3 partitions) into a fresh topic, then runs one
consumer per scenario in a child process, verifies the output against the input and
prints events/s, the child's peak RSS and the ratio to the raw pass-through:

  raw         aiokafka only: getmany -> send every record (same key, value, partition)
              to an output topic in record batches -> await the acks -> commit. The limit.
  stateless   streamkit: filter(amount > 10) -> map_values -> to(topic)
  count       streamkit: group_by_key().count() on RocksDB, caching off (every update emitted)
  count-eos   count under exactly_once (needs transactions: skipped on Tansu)

What is timed: from the moment the first input records came out of the consumer's
getmany (so process start, group join, task start-up and restore are excluded) to the
moment the broker acknowledged the commit covering the last input record. Both
frameworks send their output (and streamkit its changelog) with acks=all and wait for
the acks before that commit, so the window covers consume, process, produce and
commit of all N events. events/s = N / window. Peak RSS is the child's VmHWM.

By default a fresh single-node Apache Kafka (the jars ``scripts/ensure-kafka`` fetches)
is started on a free port and stopped at the end; ``--broker host:port`` uses a running
broker instead, ``--broker tansu`` a fresh Tansu.

Usage: python -m bench kafka [--broker HOST:PORT] [--events 200000] [--reps 3]
                             [--only raw,stateless,count]
"""
from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from typing import TYPE_CHECKING, Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

# streamkit (and bench.embedded_throughput, which imports it) is imported where needed,
# so that the raw child's peak RSS is aiokafka's alone.
if TYPE_CHECKING:
    import streamkit as sk

log = logging.getLogger("bench.kafka")

Event = Tuple[bytes, bytes, int]
PARTITIONS = 3  # as bench.embedded_throughput.PARTITIONS
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "bench", "results", "kafka_throughput.json")
FLOOR = 0.6  # stateless must reach this fraction of the raw pass-through
FETCH_MAX_RECORDS = 10_000  # as streamkit's consumers
FETCH_TIMEOUT_MS = 100  # as streamkit's worker (FETCH_WAIT)
SAFETY_IDLE = 15.0  # s without input before a streamkit child gives up (it normally stops at N)
CHILD_TIMEOUT = 600.0  # s
CLIENT_ENV = {"STREAMKIT_KAFKA_SESSION_TIMEOUT_MS": "6000", "STREAMKIT_KAFKA_HEARTBEAT_INTERVAL_MS": "1000"}
"""Group settings for the children (defaults; the caller's environment wins). On Tansu a
group join takes about half the session timeout: ~3 s here, outside the timed window."""
WINDOWED_NA = "n/a (windowing arrives with issue 5)"


# -- scenarios ---------------------------------------------------------------------------
def stateless_app(app_id: str, source: str, sink: str) -> sk.App:
    """The embedded bench's filter-map topology, on the given topics."""
    import streamkit as sk

    app = sk.App(app_id)
    events = app.topic(source, partitions=PARTITIONS)

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        (b.stream(events)
           .filter(lambda k, v: v["amount"] > 10)
           .map_values(lambda v: {"user": v["user"], "page": v["page"], "cents": v["amount"] * 100})
           .to(sink))
    return app


def count_app(app_id: str, source: str, sink: str, guarantee: str = "at_least_once") -> sk.App:
    """Count per page on RocksDB with caching off: every update is emitted."""
    import streamkit as sk

    app = sk.App(app_id, store_backend="rocksdb", caching=False, processing_guarantee=guarantee)
    events = app.topic(source, partitions=PARTITIONS)

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        b.stream(events).group_by_key().count(name="counts").to_stream().to(sink)
    return app


def expected_passthrough(events: Sequence[Event]) -> Counter:
    return Counter((k, v) for k, v, _ in events)


def expected_stateless(events: Sequence[Event]) -> Counter:
    out: Counter = Counter()
    for key, value, _ in events:
        v = orjson.loads(value)
        if v["amount"] > 10:
            out[key, _canonical({"user": v["user"], "page": v["page"], "cents": v["amount"] * 100})] += 1
    return out


def expected_counts(events: Sequence[Event]) -> Dict[bytes, int]:
    return dict(Counter(k for k, _, _ in events))


def _canonical(value: Any) -> bytes:
    # right-sized: orjson's own result sits in a ~4 KiB allocation, one per output record
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode().encode()


Output = List[Tuple[int, Optional[bytes], Optional[bytes]]]  # (partition, key, value) in offset order


def verify_passthrough(output: Output, expected: Counter) -> None:
    got = Counter((k, v) for _, k, v in output)
    assert sum(got.values()) == sum(expected.values()), \
        f"raw wrote {sum(got.values())} records, expected {sum(expected.values())}"
    assert got == expected, "raw output differs from the input"


def verify_stateless(output: Output, expected: Counter) -> None:
    assert len(output) == sum(expected.values()), \
        f"stateless wrote {len(output)} records, expected {sum(expected.values())}"
    got = Counter((k, _canonical(orjson.loads(v))) for _, k, v in output)
    assert got == expected, "stateless output differs from filter+map of the input"


def verify_counts(output: Output, expected: Dict[bytes, int]) -> None:
    """Every update emitted, and each page's last update is its true count."""
    assert len(output) == sum(expected.values()), \
        f"count wrote {len(output)} updates, expected {sum(expected.values())}"
    final = {k: orjson.loads(v) for _, k, v in output}  # a key lives in one partition: last wins
    assert final == expected, "final counts differ from the input's"


class Scenario(NamedTuple):
    framework: str
    make_app: Optional[Callable[[str, str, str], sk.App]]  # None: the raw aiokafka loop
    expect: Callable[[Sequence[Event]], Any]
    verify: Callable[[Output, Any], None]
    transactions: bool = False


SCENARIOS: Dict[str, Scenario] = {
    "raw": Scenario("aiokafka", None, expected_passthrough, verify_passthrough),
    "stateless": Scenario("streamkit", stateless_app, expected_stateless, verify_stateless),
    "count": Scenario("streamkit", count_app, expected_counts, verify_counts),
    "count-eos": Scenario("streamkit", lambda i, s, o: count_app(i, s, o, "exactly_once"),
                          expected_counts, verify_counts, transactions=True),
}
DEFAULT_ONLY = ("raw", "stateless", "count", "count-eos")


# -- the child: one timed consumer ---------------------------------------------------
class Probe:
    """Times a consumer from the outside by wrapping methods of its classes.

    ``first_input``: when the first records of ``source`` came out of aiokafka's
    ``getmany``. ``done``: when the first commit that started after all ``expected``
    input records were fetched completed: it covers the last record, and the outputs
    were acknowledged before it (the raw loop awaits its sends; streamkit's commit
    flushes its producer, or commits the transactions under exactly_once).
    """

    def __init__(self, source: str, expected: int) -> None:
        self.source = source
        self.expected = expected
        self.fetched = 0
        self.first_input: Optional[float] = None
        self.done: Optional[float] = None
        self.cpu: List[float] = []  # this process's CPU time at first_input and at done
        self.on_all_fetched: Callable[[], None] = lambda: None

    def time_fetches(self) -> None:
        """Count the input records aiokafka hands out; note when the first came."""
        probe, getmany = self, AIOKafkaConsumer.getmany

        async def timed_getmany(consumer: AIOKafkaConsumer, *partitions: TopicPartition, timeout_ms: int = 0,
                                max_records: Optional[int] = None) -> dict:
            data = await getmany(consumer, *partitions, timeout_ms=timeout_ms, max_records=max_records)
            n = sum(len(records) for tp, records in data.items() if tp.topic == probe.source)
            if n:
                if probe.first_input is None:
                    probe.first_input = time.perf_counter()
                    probe.cpu.append(time.process_time())
                probe.fetched += n
                if probe.fetched >= probe.expected:
                    probe.on_all_fetched()
            return data

        AIOKafkaConsumer.getmany = timed_getmany  # type: ignore[method-assign]

    def time_commits(self, cls: type, name: str) -> None:
        """Wrap the coroutine method ``cls.name`` that commits: the window ends when the
        first call started after the last input record was fetched returns."""
        probe, commit = self, getattr(cls, name)

        async def timed_commit(*args: Any, **kwargs: Any) -> Any:
            covers_all = probe.fetched >= probe.expected
            result = await commit(*args, **kwargs)
            if covers_all and probe.done is None:
                probe.done = time.perf_counter()
                probe.cpu.append(time.process_time())
            return result

        setattr(cls, name, timed_commit)

    def figures(self, started: float) -> dict:
        if self.first_input is None or self.done is None:
            raise RuntimeError(f"fetched {self.fetched} of {self.expected} input records; no complete window")
        return {"seconds": self.done - self.first_input, "startup_seconds": self.first_input - started,
                "cpu_seconds": self.cpu[1] - self.cpu[0],
                "records": self.fetched, "peak_rss_mib": peak_rss_mib()}


def peak_rss_mib() -> float:
    """This process's peak RSS (VmHWM), as bench.embedded_throughput.peak_rss_mib, which
    the raw child cannot import without loading streamkit."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status: peak RSS needs Linux")


async def raw_passthrough(bootstrap: str, source: str, sink: str, group: str, expected: int) -> None:
    """Consume ``source`` in a group and copy every record to ``sink`` (same partition)."""
    consumer = AIOKafkaConsumer(source, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                                auto_offset_reset="earliest",
                                session_timeout_ms=int(os.environ["STREAMKIT_KAFKA_SESSION_TIMEOUT_MS"]),
                                heartbeat_interval_ms=int(os.environ["STREAMKIT_KAFKA_HEARTBEAT_INTERVAL_MS"]))
    # The producer settings streamkit uses (acks=all, 1 MiB batches).
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, max_batch_size=1 << 20)
    await consumer.start()
    await producer.start()
    try:
        consumed = 0
        while consumed < expected:
            data = await consumer.getmany(timeout_ms=FETCH_TIMEOUT_MS, max_records=FETCH_MAX_RECORDS)
            acks = []
            offsets = {}
            for tp, records in data.items():
                if not records:
                    continue
                builder = producer.create_batch()
                for r in records:
                    if builder.append(key=r.key, value=r.value, timestamp=r.timestamp, headers=[]) is None:
                        acks.append(await producer.send_batch(builder, sink, partition=tp.partition))
                        builder = producer.create_batch()
                        builder.append(key=r.key, value=r.value, timestamp=r.timestamp, headers=[])
                if builder.record_count():
                    acks.append(await producer.send_batch(builder, sink, partition=tp.partition))
                offsets[tp] = records[-1].offset + 1
                consumed += len(records)
            if acks:
                await asyncio.gather(*acks)
            if offsets:
                await consumer.commit(offsets)
    finally:
        await producer.stop()
        await consumer.stop()


def run_streamkit(spec: dict, probe: Probe) -> None:
    """Run the scenario's app as ``streamkit worker`` does (``run_worker``), stopping
    it once every input record was fetched: it then commits and leaves the group."""
    from streamkit.runtime.worker import Worker, tune_gc_for_streaming
    from streamkit.transport.factory import open_transport

    make_app = SCENARIOS[spec["scenario"]].make_app
    assert make_app is not None
    app = make_app(spec["app_id"], spec["source"], spec["sink"])
    tune_gc_for_streaming()
    transport = open_transport(f"kafka://{spec['bootstrap']}", kafka_config=app.kafka_config)
    worker = app.worker(transport, until_idle=SAFETY_IDLE, state_dir=spec["state_dir"])
    probe.time_commits(Worker, "_commit")  # one commit round: every task, flush or transactions
    probe.on_all_fetched = worker.stop
    try:
        asyncio.run(worker.run())
    finally:
        transport.close()


def child(spec: dict) -> None:
    """Entry point of the child process: print its figures as one JSON line."""
    started = time.perf_counter()
    logging.basicConfig(level=logging.INFO if spec.get("verbose") else logging.WARNING,
                        format="%(asctime)s child %(name)s %(levelname)s %(message)s")
    probe = Probe(spec["source"], spec["events"])
    probe.time_fetches()
    profiler = cProfile.Profile() if spec.get("profile") else None
    if profiler is not None:
        profiler.enable()
    if spec["scenario"] == "raw":
        # The GC settings of streamkit.runtime.worker.tune_gc_for_streaming (not imported: see above).
        gc.collect()
        gc.freeze()
        gc.set_threshold(50_000, 20, 100)
        probe.time_commits(AIOKafkaConsumer, "commit")
        asyncio.run(raw_passthrough(spec["bootstrap"], spec["source"], spec["sink"], spec["app_id"],
                                    spec["events"]))
    else:
        run_streamkit(spec, probe)
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(spec["profile"])
    figures = probe.figures(started)
    figures["imported_streamkit"] = "streamkit" in sys.modules
    print(json.dumps(figures))


# -- the parent: topics, input, verification -------------------------------------------
KEEP_FOREVER = {"retention.ms": "-1"}
"""The events' times are from 2023: a real broker's default 7-day time retention would
delete a run's input or output while it is being checked."""


async def create_topics(bootstrap: str, names: Sequence[str], partitions: int = PARTITIONS) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, 1, topic_configs=dict(KEEP_FOREVER))
                                   for name in names])
    finally:
        await admin.close()


async def delete_topics(bootstrap: str, prefix: str) -> None:
    """Delete every topic of a run (they share its prefix): Tansu keeps them in memory."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        names = [t for t in await admin.list_topics() if t.startswith(prefix)]
        if names:
            await admin.delete_topics(names)
    finally:
        await admin.close()


async def produce(bootstrap: str, topic: str, events: Sequence[Event], partitions: int = PARTITIONS) -> None:
    """Write the events in large record batches, partitioned as Kafka's default partitioner."""
    from streamkit.core.partitioner import partition_for_key

    per_partition: Dict[int, List[Event]] = {p: [] for p in range(partitions)}
    for event in events:
        per_partition[partition_for_key(event[0], partitions)].append(event)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", max_batch_size=1 << 20)
    await producer.start()
    try:
        acks = []
        for partition, records in per_partition.items():
            builder = producer.create_batch()
            for key, value, ts in records:
                if builder.append(key=key, value=value, timestamp=ts, headers=[]) is None:
                    acks.append(await producer.send_batch(builder, topic, partition=partition))
                    builder = producer.create_batch()
                    builder.append(key=key, value=value, timestamp=ts, headers=[])
            if builder.record_count():
                acks.append(await producer.send_batch(builder, topic, partition=partition))
        await asyncio.gather(*acks)
    finally:
        await producer.stop()


async def read_topic(bootstrap: str, topic: str, expected: int, settle: float = 1.0,
                     give_up: float = 20.0, partitions: int = PARTITIONS) -> Output:
    """Every record of ``topic`` in offset order per partition. Tansu under-reports end
    offsets, so this reads until ``expected`` records arrived and then nothing more for
    ``settle`` s (extra records would show), or nothing at all for ``give_up`` s."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                auto_offset_reset="earliest", isolation_level="read_committed")
    await consumer.start()
    out: Output = []
    try:
        assigned = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(assigned)
        await consumer.seek_to_beginning(*assigned)
        last = time.monotonic()
        while True:
            data = await consumer.getmany(timeout_ms=200, max_records=50_000)
            for tp, records in data.items():
                out.extend((tp.partition, r.key, r.value) for r in records)
            now = time.monotonic()
            if any(data.values()):
                last = now
            elif now - last >= (settle if len(out) >= expected else give_up):
                return out
    finally:
        await consumer.stop()


async def committed_total(bootstrap: str, group: str, topic: str, partitions: int = PARTITIONS) -> int:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return await committed_with(admin, group, topic, partitions)
    finally:
        await admin.close()


async def committed_with(admin: AIOKafkaAdminClient, group: str, topic: str, partitions: int = PARTITIONS) -> int:
    """The sum of ``group``'s committed offsets on ``topic`` (0 where none)."""
    # Explicit partitions: Tansu cannot answer the all-partitions form.
    offsets = await admin.list_consumer_group_offsets(
        group, partitions=[TopicPartition(topic, p) for p in range(partitions)])
    return sum(max(meta.offset, 0) for meta in offsets.values())


def run_child(spec: dict) -> dict:
    """Run one timed consumer in a child process; return its figures."""
    command = [sys.executable, "-m", "bench.kafka_throughput", "--child", json.dumps(spec)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    for key, value in CLIENT_ENV.items():
        env.setdefault(key, value)
    out = subprocess.run(command, capture_output=True, text=True, check=False, env=env, timeout=CHILD_TIMEOUT)
    if spec.get("verbose") and out.stderr:
        sys.stderr.write(out.stderr)
    if out.returncode != 0:
        raise RuntimeError(f"{spec['scenario']}: child process failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_once(name: str, bootstrap: str, events: Sequence[Event], expected: Any, *, verbose: bool = False,
             profile: Optional[str] = None) -> dict:
    """Fresh topics, pre-produced input, one timed child, verified output."""
    scenario = SCENARIOS[name]
    run_id = f"bench-{name}-{uuid.uuid4().hex[:8]}"
    source, sink = f"{run_id}-events", f"{run_id}-out"
    state_dir = tempfile.mkdtemp(prefix=f"sk-kafka-bench-{name}-")
    try:
        # Tansu auto-creates unknown topics with 4 partitions: create every topic we touch.
        asyncio.run(create_topics(bootstrap, [source] if scenario.make_app else [source, sink]))
        started = time.perf_counter()
        asyncio.run(produce(bootstrap, source, events))
        log.info("%s: produced %d events in %.1f s", name, len(events), time.perf_counter() - started)
        spec = {"scenario": name, "bootstrap": bootstrap, "app_id": run_id, "source": source, "sink": sink,
                "events": len(events), "state_dir": state_dir, "verbose": verbose, "profile": profile}
        figures = run_child(spec)
        assert figures["records"] == len(events), f"{name}: fetched {figures['records']} of {len(events)}"
        assert scenario.make_app or not figures["imported_streamkit"], "the raw child loaded streamkit"
        committed = asyncio.run(committed_total(bootstrap, run_id, source))
        assert committed == len(events), f"{name}: committed offsets cover {committed} of {len(events)}"
        scenario.verify(asyncio.run(read_topic(bootstrap, sink, sum(expected.values()))), expected)
        figures["events_per_second"] = len(events) / figures["seconds"]
        log.info("%s: %.0f events/s over %.2f s (child CPU %.0f%% of it; start-up and group join %.1f s, "
                 "not timed), peak RSS %.0f MiB", name, figures["events_per_second"], figures["seconds"],
                 100 * figures["cpu_seconds"] / figures["seconds"], figures["startup_seconds"],
                 figures["peak_rss_mib"])
        return figures
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)
        try:
            asyncio.run(delete_topics(bootstrap, run_id))
        except Exception as exc:  # noqa: BLE001 - cleanup best-effort
            log.warning("could not delete the topics of %s: %s", run_id, exc)


# -- broker ------------------------------------------------------------------------------
def open_broker(bootstrap: Optional[str]) -> Any:
    """A running broker handle: ``bootstrap`` if given (``"tansu"``: a fresh Tansu, the old
    default), else a fresh single-node Apache Kafka from the jars ``scripts/ensure-kafka``
    fetches (the broker streamkit's users run). ``.stop()`` ends what was started."""
    from tests.kafka.broker import external_broker, start_tansu  # no pytest involved

    if bootstrap == "tansu":
        broker = start_tansu()
        log.info("started Tansu (memory storage) on %s", broker.bootstrap)
        return broker
    if bootstrap:
        return external_broker(bootstrap)
    from tests.kafka.apache_kafka import start_apache_kafka

    cluster = start_apache_kafka(1, heap=BROKER_HEAP)
    log.info("started Apache Kafka %s (one KRaft node, heap %s) on %s", KAFKA_VERSION, BROKER_HEAP, cluster.bootstrap)
    return cluster.broker


def broker_description(bootstrap: Optional[str], scope: str = "fresh per scenario") -> str:
    """How the report names the broker :func:`open_broker` gives for ``bootstrap``."""
    if bootstrap == "tansu":
        return f"Tansu (memory storage), {scope}"
    if bootstrap:
        return f"{bootstrap} (external)"
    return f"Apache Kafka {KAFKA_VERSION} (one KRaft node, same machine), {scope}"


BROKER_HEAP = "1g"
KAFKA_VERSION = "4.1.1"


# -- measuring and reporting -------------------------------------------------------------
TIMED = ("from the first input records returned by getmany to the completion of the commit covering the "
         "last input record (outputs acknowledged with acks=all before it); process start, group join and "
         "task start-up excluded")


def measure(name: str, bootstrap: str, events: Sequence[Event], reps: int, *, verbose: bool = False,
            profile_dir: Optional[str] = None) -> dict:
    """``reps`` verified runs of one scenario: median events/s, highest peak RSS."""
    scenario = SCENARIOS[name]
    expected = scenario.expect(events)
    runs = []
    for rep in range(reps):
        profile = os.path.join(profile_dir, f"{name}-{rep}.prof") if profile_dir else None
        runs.append(run_once(name, bootstrap, events, expected, verbose=verbose, profile=profile))
    rates = [r["events_per_second"] for r in runs]
    cpu = [r["cpu_seconds"] / len(events) * 1e6 for r in runs]
    return {"framework": scenario.framework, "events_per_second": statistics.median(rates), "reps": rates,
            "seconds": [r["seconds"] for r in runs], "startup_seconds": [r["startup_seconds"] for r in runs],
            "cpu_us_per_event": statistics.median(cpu), "cpu_us_per_event_reps": cpu,
            "peak_rss_mib": max(r["peak_rss_mib"] for r in runs)}


def judge_floor(results: Dict[str, dict]) -> dict:
    rule = f"stateless >= {FLOOR:.0%} of raw"
    if "raw" not in results or "stateless" not in results:
        return {"rule": rule, "ratio": None, "verdict": "not measured (needs raw and stateless)"}
    ratio = results["stateless"]["events_per_second"] / results["raw"]["events_per_second"]
    return {"rule": rule, "ratio": ratio, "verdict": "PASS" if ratio >= FLOOR else "FAIL"}


def print_report(header: str, results: Dict[str, dict], skipped: Dict[str, str], floor: dict) -> None:
    print(f"\n{header}")
    print("timed: first input record fetched -> commit covering the last record acknowledged\n")
    print(f"  {'scenario':<16}{'framework':<11}{'events/s':>10}{'peak RSS MiB':>14}{'ratio to raw':>14}"
          f"{'CPU us/event':>14}  reps (events/s)")
    for name, f in results.items():
        ratio = f"{f['ratio_to_raw']:.0%}" if f["ratio_to_raw"] is not None else "n/a"
        print(f"  {name:<16}{f['framework']:<11}{f['events_per_second']:>10,.0f}{f['peak_rss_mib']:>14,.0f}"
              f"{ratio:>14}{f['cpu_us_per_event']:>14.1f}  {', '.join(f'{r:,.0f}' for r in f['reps'])}")
    for name, reason in skipped.items():
        print(f"  {name:<16}{'streamkit':<11}{reason}")
    ratio = f" ({floor['ratio']:.0%})" if floor["ratio"] is not None else ""
    print(f"\n  floor: stateless >= {FLOOR:.0%} of raw pass-through: {floor['verdict']}{ratio}")


def main(argv: Optional[List[str]] = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 2 and argv[0] == "--child":
        child(json.loads(argv[1]))
        return
    parser = argparse.ArgumentParser(prog="python -m bench kafka", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--broker", metavar="HOST:PORT", help="use this broker; 'tansu': start a Tansu (default: start an Apache Kafka)")
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--only", default=",".join(DEFAULT_ONLY), metavar="NAME[,NAME...]",
                        help=f"scenarios to run: {', '.join(SCENARIOS)} (default: all)")
    parser.add_argument("--profile", metavar="DIR", help="cProfile each child into DIR/<scenario>-<rep>.prof")
    parser.add_argument("--verbose", action="store_true", help="log the children's INFO lines")
    args = parser.parse_args(argv)
    only = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = set(only) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenario(s) {', '.join(sorted(unknown))}: use {', '.join(SCENARIOS)}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
    profile_dir = os.path.abspath(args.profile) if args.profile else None
    if profile_dir:
        os.makedirs(profile_dir, exist_ok=True)

    from bench.embedded_throughput import PARTITIONS as EMBEDDED_PARTITIONS, make_events

    assert PARTITIONS == EMBEDDED_PARTITIONS, "the two benches should use the same partition count"
    events = make_events(args.events)
    broker = open_broker(args.broker)
    broker_name = broker_description(args.broker, "started by the bench")
    results: Dict[str, dict] = {}
    skipped: Dict[str, str] = {"windowed-count": WINDOWED_NA}
    try:
        for name in [n for n in SCENARIOS if n in only]:
            if SCENARIOS[name].transactions and not broker.supports_transactions:
                why = broker.why_no_transactions if args.broker else \
                    "Tansu rejects InitProducerId: no transactions; use --broker with Apache Kafka"
                skipped[name] = f"skipped: exactly_once needs transactions ({why})"
                log.info("%s %s", name, skipped[name])
                continue
            results[name] = measure(name, broker.bootstrap, events, args.reps, verbose=args.verbose,
                                    profile_dir=profile_dir)
    finally:
        broker.stop()

    raw = results.get("raw", {}).get("events_per_second")
    for figures in results.values():
        figures["ratio_to_raw"] = figures["events_per_second"] / raw if raw else None
    floor = judge_floor(results)
    print_report(f"Kafka: {broker_name}; {args.events:,} JSON events, {PARTITIONS} partitions, 1 consumer "
                 f"process, median of {args.reps}, {os.cpu_count()} cores", results, skipped, floor)
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "w") as f:
        json.dump({"broker": broker_name, "events": args.events, "partitions": PARTITIONS, "reps": args.reps,
                   "cores": os.cpu_count(), "timed": TIMED, "scenarios": results, "skipped": skipped,
                   "floor": floor}, f, indent=2)
    print(f"  results written to {os.path.relpath(RESULTS)}")


if __name__ == "__main__":
    main()
