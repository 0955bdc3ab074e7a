"""End-to-end throughput on the embedded broker.

Pre-produces N JSON page-view events (deterministic seed, 3 partitions, keyed
by page), then runs one in-process worker per scenario until the input is
consumed and committed, verifies the output against a result computed directly
from the input, and prints events/s (from worker start to its last commit):

  filter-map          filter(amount > 10) → map_values → to(topic)
  filter-map-avro     filter-map with Avro values in and out (sk.serdes.Avro, Confluent's wire format,
                      the embedded registry on the benchmark's broker): the same events as Avro
                      records of the same shape; every output decoded and checked against the input
  count               group_by_key().count() over 1,000 pages, in-memory store, every update emitted
  count-memory-100k   count over 100,000 keys, in-memory store (like for like with the RocksDB runs)
  count-rocksdb       the same over 100,000 keys on RocksDB, every update emitted (caching off)
  count-rocksdb-eos   count-rocksdb under exactly_once
  count-rocksdb-cache count-rocksdb with the record cache on (the default: fewer, coalesced outputs)
  tumbling-rocksdb    60 s tumbling-window count per page (1,000 pages), RocksDB, every update emitted;
                      event time advancing, 1% of the events out of order within the 10 s grace
  tumbling-rocksdb-eos  tumbling-rocksdb under exactly_once
  tumbling-repartitioned-skewed  a skewed backfill (40/33/27 % of the events in partitions
                      0/1/2, keyed by user) re-keyed by page through a repartition topic, then
                      the tumbling count: what the event-time ordering costs, and the worker's
                      peak memory on skewed input (every on-time record must count)
  tumbling-repartitioned-skewed-eos  the same under exactly_once
  session-rocksdb     session-window count per page (500 ms inactivity gap), RocksDB, every update emitted
  sliding-rocksdb     sliding-window count per page (2 s time difference, 10 s grace), RocksDB, every
                      update emitted (each event updates every window it falls in: ~4 per event here)
  session-rocksdb-eos session-rocksdb under exactly_once

Usage: python -m bench embedded [--events 1000000] [--reps 1] [--only SCENARIO] [--interleave]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import timedelta
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

import orjson

import streamkit as sk
from bench import restore_throughput
from bench.peers.workload import make_events as peer_events
from streamkit.runtime.worker import tune_gc_for_streaming
from streamkit.serdes import compact_json
from streamkit.transport.base import TopicPartition
from streamkit.transport.embedded.transport import EmbeddedTransport
from streamkit.core.partitioner import partition_for_key

PARTITIONS = 3
PAGES = 1000
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IDLE_EXIT = 0.3  # s of no input before the worker stops; subtracted from the timing


def make_events(n: int, seed: int = 42, keys: int = PAGES) -> List[Tuple[bytes, bytes, int]]:
    """Page views keyed by page (``keys`` distinct pages)."""
    rng = random.Random(seed)
    start = 1_700_000_000_000
    out = []
    for i in range(n):
        page = f"page-{rng.randrange(keys)}"
        value = {"user": f"user-{rng.randrange(10_000)}", "page": page, "ts": start + i, "amount": rng.randrange(100)}
        out.append((page.encode(), compact_json(value), start + i))
    return out


def filter_map_app() -> sk.App:
    app = sk.App("bench-filter-map")
    events = app.topic("events", partitions=PARTITIONS)

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        (b.stream(events)
           .filter(lambda k, v: v["amount"] > 10)
           .map_values(lambda v: {"user": v["user"], "page": v["page"], "cents": v["amount"] * 100})
           .to("filtered"))
    return app


PAGE_VIEW_AVRO = {
    "type": "record", "name": "PageView", "namespace": "bench",
    "fields": [{"name": "user", "type": "string"}, {"name": "page", "type": "string"},
               {"name": "ts", "type": "long"}, {"name": "amount", "type": "int"}]}
"""The JSON events' shape (:func:`make_events`) as an Avro record."""
FILTERED_VIEW_AVRO = {
    "type": "record", "name": "FilteredView", "namespace": "bench",
    "fields": [{"name": "user", "type": "string"}, {"name": "page", "type": "string"},
               {"name": "cents", "type": "int"}]}
"""filter-map's output values as an Avro record."""


def filter_map_avro_app() -> sk.App:
    """filter-map with Avro values: read ``PageView`` records, write ``FilteredView`` ones
    (keys stay plain strings), schemas in the embedded registry on the worker's broker."""
    app = sk.App("bench-filter-map-avro")
    text = sk.serdes.String()
    events = app.topic("events", key_serde=text, value_serde=sk.serdes.Avro(PAGE_VIEW_AVRO, registry="embedded"),
                       partitions=PARTITIONS)
    filtered = sk.serdes.Avro(FILTERED_VIEW_AVRO, registry="embedded")

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        (b.stream(events)
           .filter(lambda k, v: v["amount"] > 10)
           .map_values(lambda v: {"user": v["user"], "page": v["page"], "cents": v["amount"] * 100})
           .to("filtered", key_serde=text, value_serde=filtered))
    return app


def encode_avro_events(broker: str, events: List[Tuple[bytes, bytes, int]]) -> List[Tuple[bytes, bytes, int]]:
    """The JSON events with their values re-encoded as ``PageView`` Avro records in
    Confluent's wire format (the schema registered under ``events-value`` in the embedded
    registry on ``broker``, where the worker finds it)."""
    serde = sk.serdes.Avro(PAGE_VIEW_AVRO, registry="embedded").for_topic("events", False, broker=broker)
    serialize, loads = serde.serialize, orjson.loads
    return [(key, serialize(loads(value)), ts) for key, value, ts in events]


def expected_filter_map_avro(events) -> Counter:
    """Every output filter-map must write, as (key, user, page, cents), with its multiplicity."""
    out: Counter = Counter()
    for key, value, _ts in events:
        event = orjson.loads(value)
        if event["amount"] > 10:
            out[(key.decode(), event["user"], event["page"], event["amount"] * 100)] += 1
    return out


def verify_filter_map_avro(transport: EmbeddedTransport, expected: Counter) -> None:
    """Every output is ``[0][id][FilteredView]`` with the id the registry holds for
    ``filtered-value`` (that very schema), and the outputs are exactly the expected ones."""
    import io

    from fastavro import parse_schema, schemaless_reader

    from streamkit.schemas.registry.broker_log import registry_on_broker

    registry = registry_on_broker(transport.url)
    try:
        registered = registry.latest_version("filtered-value")
    finally:
        registry.close()
    assert json.loads(registered.schema.schema_str) == FILTERED_VIEW_AVRO, "filtered-value holds another schema"
    header = b"\x00" + registered.schema_id.to_bytes(4, "big")
    parsed = parse_schema(FILTERED_VIEW_AVRO)
    got: Counter = Counter()
    for key, value in read_topic(transport, "filtered"):
        assert value[:5] == header, f"not written with schema id {registered.schema_id}: {value[:8]!r}"
        buffer = io.BytesIO(value)
        buffer.seek(5)
        view = schemaless_reader(buffer, parsed)
        assert buffer.tell() == len(value), "bytes left over after the Avro value"
        got[(key.decode(), view["user"], view["page"], view["cents"])] += 1
    assert sum(got.values()) == sum(expected.values()), \
        f"filter-map-avro wrote {sum(got.values())} records, expected {sum(expected.values())}"
    assert got == expected, "filter-map-avro's outputs differ from the input's"


def count_app(store_backend: str = "memory", guarantee: str = "at_least_once", caching: bool = False) -> sk.App:
    app = sk.App("bench-count", store_backend=store_backend, processing_guarantee=guarantee, caching=caching)
    events = app.topic("events", partitions=PARTITIONS)

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        b.stream(events).group_by_key().count(name="counts").to_stream().to("counts")
    return app


WINDOW = 60_000
GRACE = 10_000
SESSION_GAP = 500
SLIDING_DIFFERENCE = 2_000


def make_windowed_events(n: int, seed: int = 42, keys: int = PAGES) -> List[Tuple[bytes, bytes, int]]:
    """Page views with event time advancing 1 ms per event; 1% are up to 5 s late (inside the
    windows' grace, so none is dropped). The record timestamp is the event time. The peer
    benchmark's events (``bench.peers.workload.make_events``)."""
    return peer_events(n, seed, keys)


def windowed_count_app(guarantee: str = "at_least_once") -> sk.App:
    return _windowed_counts("bench-tumbling", "window-counts", guarantee,
                            sk.TumblingWindows(timedelta(milliseconds=WINDOW), grace=timedelta(milliseconds=GRACE)))


def _windowed_counts(app_id: str, store: str, guarantee: str, windows: object) -> sk.App:
    """Events counted per page in ``windows`` on RocksDB, every update emitted to "counts"."""
    app = sk.App(app_id, store_backend="rocksdb", processing_guarantee=guarantee, caching=False)
    events = app.topic("events", partitions=PARTITIONS)

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        b.stream(events).group_by_key().windowed_by(windows).count(name=store).to_stream().to("counts")
    return app


SKEW = (0.40, 0.33, 0.27)
"""Share of the events in each partition in the skewed backfill."""


def make_skewed_user_events(n: int, seed: int = 42, keys: int = PAGES) -> List[Tuple[bytes, bytes, int]]:
    """A skewed backfill: page views keyed by user, 40/33/27 % of them in partitions 0/1/2
    (users chosen by Kafka's partitioner), event time advancing 3 ms per event across the
    whole input, 1% up to 5 s out of order (inside the grace: none may be dropped). Today's
    peers fetch a fixed number of records per partition per round, so the sparse
    partitions run ahead in event time and a downstream task drops on-time records."""
    rng = random.Random(seed)
    pools: List[List[str]] = [[] for _ in range(PARTITIONS)]
    user = 0
    while min(len(pool) for pool in pools) < 200:
        name = f"user-{user}"
        pools[partition_for_key(name.encode(), PARTITIONS)].append(name)
        user += 1
    start = 1_700_000_000_000
    out = []
    for i in range(n):
        roll, partition = rng.random(), 0
        while partition < PARTITIONS - 1 and roll >= sum(SKEW[:partition + 1]):
            partition += 1
        name = rng.choice(pools[partition])
        ts = start + 3 * i - (rng.randrange(1, 5_000) if rng.random() < 0.01 else 0)
        value = {"user": name, "page": f"page-{rng.randrange(keys)}", "ts": ts}
        out.append((name.encode(), compact_json(value), ts))
    return out


def repartitioned_count_app(guarantee: str = "at_least_once") -> sk.App:
    """Views keyed by user, re-keyed by page (a repartition topic), counted per page per minute."""
    app = sk.App("bench-repartitioned", store_backend="rocksdb", processing_guarantee=guarantee, caching=False)
    events = app.topic("events", partitions=PARTITIONS)

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        (b.stream(events).group_by(lambda key, value: value["page"])
          .windowed_by(sk.TumblingWindows(timedelta(milliseconds=WINDOW), grace=timedelta(milliseconds=GRACE)))
          .count(name="window-counts").to_stream().to("counts"))
    return app


def expected_page_window_counts(events) -> Dict[Tuple[str, int], int]:
    return dict(Counter((orjson.loads(v)["page"], ts - ts % WINDOW) for _k, v, ts in events))


def session_count_app(guarantee: str = "at_least_once") -> sk.App:
    return _windowed_counts("bench-sessions", "session-counts", guarantee,
                            sk.SessionWindows(timedelta(milliseconds=SESSION_GAP), grace=timedelta(milliseconds=GRACE)))


def sliding_count_app(guarantee: str = "at_least_once") -> sk.App:
    return _windowed_counts("bench-sliding", "sliding-counts", guarantee,
                            sk.SlidingWindows(timedelta(milliseconds=SLIDING_DIFFERENCE),
                                              grace=timedelta(milliseconds=GRACE)))


def expected_sliding_counts(events) -> Dict[Tuple[str, int, int], int]:
    """Kafka Streams' sliding windows (KIP-450), computed from each page's event times
    (no event is late): for every distinct time t the left window [t - d, t], and the
    right window [t + 1, t + 1 + d] when the next distinct time is at most t + d; each
    counts the events in it (both ends inclusive)."""
    import bisect

    d = SLIDING_DIFFERENCE
    times: Dict[str, List[int]] = {}
    for k, _, ts in events:
        times.setdefault(k.decode(), []).append(ts)
    windows: Dict[Tuple[str, int, int], int] = {}
    for page, stamps in times.items():
        stamps.sort()
        distinct = sorted(set(stamps))

        def inside(start: int, end: int) -> int:
            return bisect.bisect_right(stamps, end) - bisect.bisect_left(stamps, start)

        for i, t in enumerate(distinct):
            windows[(page, t - d, t)] = inside(t - d, t)
            if i + 1 < len(distinct) and distinct[i + 1] <= t + d:
                windows[(page, t + 1, t + 1 + d)] = inside(t + 1, t + 1 + d)
    return windows


def expected_window_counts(events) -> Dict[Tuple[str, int], int]:
    return dict(Counter((k.decode(), ts - ts % WINDOW) for k, _, ts in events))


def verify_window_counts(transport: EmbeddedTransport, expected: Dict[Tuple[str, int], int]) -> None:
    final = {}
    got = read_topic(transport, "counts")
    for k, v in got:
        key = orjson.loads(k)
        final[(key["key"], key["start"])] = orjson.loads(v)
    assert final == expected, "final window counts differ from the input's"
    assert len(got) == sum(expected.values()), f"wrote {len(got)} updates, expected {sum(expected.values())}"


def expected_session_counts(events) -> Dict[Tuple[str, int, int], int]:
    """Sessionize each page's event times (sorted: no event is late) with the gap."""
    times: Dict[str, List[int]] = {}
    for k, _, ts in events:
        times.setdefault(k.decode(), []).append(ts)
    sessions = {}
    for page, stamps in times.items():
        stamps.sort()
        first = last = stamps[0]
        count = 0
        for ts in stamps:
            if ts - last > SESSION_GAP:
                sessions[(page, first, last)] = count
                first, count = ts, 0
            last = ts
            count += 1
        sessions[(page, first, last)] = count
    return sessions


def verify_session_counts(transport: EmbeddedTransport, expected: Dict[Tuple[str, int, int], int]) -> None:
    """Each (page, start, end)'s last update is its count; a merged-away session's last is a tombstone."""
    final: Dict[Tuple[str, int, int], int] = {}
    for k, v in read_topic(transport, "counts"):
        key = orjson.loads(k)
        window = (key["key"], key["start"], key["end"])
        if v is None:
            final.pop(window, None)
        else:
            final[window] = orjson.loads(v)
    assert final == expected, f"final windows differ from the input's: {_window_differences(final, expected)}"


def _window_differences(got: Dict, expected: Dict, limit: int = 3) -> str:
    missing = [(w, n) for w, n in expected.items() if got.get(w) != n][:limit]
    extra = [(w, n) for w, n in got.items() if w not in expected][:limit]
    return f"expected but not written {missing}, written but not expected {extra}"


def produce(transport: EmbeddedTransport, events: List[Tuple[bytes, bytes, int]]) -> None:
    transport.admin.create_topic("events", PARTITIONS)
    per_partition: Dict[int, list] = {p: [] for p in range(PARTITIONS)}
    for key, value, ts in events:
        per_partition[partition_for_key(key, PARTITIONS)].append((key, value, ts, None))
    for p, records in per_partition.items():
        for i in range(0, len(records), 5000):
            transport.broker.append("events", p, records[i:i + 5000])
    transport.broker.sync()


def read_topic(transport: EmbeddedTransport, topic: str) -> List[Tuple[bytes, bytes]]:
    out = []
    for p in range(transport.admin.topic(topic).partitions):
        reader = transport.broker.reader(topic, p)
        while True:
            records = reader.read(50_000)
            if not records:
                break
            out.extend((r[2], r[3]) for r in records)
        reader.close()
    return out


def expected_filter_map(events) -> int:
    return sum(1 for _, v, _ in events if orjson.loads(v)["amount"] > 10)


def verify_filter_map(transport: EmbeddedTransport, expected: int) -> None:
    got = read_topic(transport, "filtered")
    assert len(got) == expected, f"filter-map wrote {len(got)} records, expected {expected}"


def expected_count(events) -> Dict[str, int]:
    return dict(Counter(k.decode() for k, _, _ in events))


def verify_count(transport: EmbeddedTransport, expected: Dict[str, int]) -> None:
    """Every update emitted, in order, and the final counts right."""
    got = _verify_final_counts(transport, expected)
    assert len(got) == sum(expected.values()), f"count wrote {len(got)} updates, expected {sum(expected.values())}"


def verify_cached_count(transport: EmbeddedTransport, expected: Dict[str, int]) -> None:
    """Coalesced updates (at most one per key per commit), final counts right."""
    got = _verify_final_counts(transport, expected)
    assert len(got) <= sum(expected.values())


def _verify_final_counts(transport: EmbeddedTransport, expected: Dict[str, int]) -> list:
    final: Dict[str, int] = {}
    got = read_topic(transport, "counts")
    for k, v in got:
        final[k.decode()] = orjson.loads(v)
    assert final == expected, "final counts differ from the input's"
    return got


class Scenario(NamedTuple):
    make_app: Callable[[], sk.App]
    expect: Callable
    verify: Callable
    keys: int = PAGES
    floor: Optional[str] = None
    """How the figure is judged: "<events/s>" or "<fraction>:<other scenario>"."""
    make_events: Callable[..., List[Tuple[bytes, bytes, int]]] = make_events
    stages: int = 1
    """Sub-topologies each event goes through (a repartition adds one): records processed per event."""
    encode: Optional[Callable[[str, List[Tuple[bytes, bytes, int]]], List[Tuple[bytes, bytes, int]]]] = None
    """Re-encodes the JSON events before they are produced (given the broker URL); ``expect``
    still sees the JSON events."""


SCENARIOS: Dict[str, Scenario] = {
    "filter-map": Scenario(filter_map_app, expected_filter_map, verify_filter_map, floor="150000"),
    "filter-map-avro": Scenario(filter_map_avro_app, expected_filter_map_avro, verify_filter_map_avro,
                                encode=encode_avro_events),
    "count": Scenario(count_app, expected_count, verify_count, floor="100000"),
    "count-memory-100k": Scenario(count_app, expected_count, verify_count, 100_000),
    "count-rocksdb": Scenario(lambda: count_app("rocksdb"), expected_count, verify_count, 100_000),
    "count-rocksdb-eos": Scenario(lambda: count_app("rocksdb", "exactly_once"), expected_count, verify_count,
                                  100_000, floor="0.7:count-rocksdb"),
    "count-rocksdb-cache": Scenario(lambda: count_app("rocksdb", caching=True), expected_count,
                                    verify_cached_count, 100_000, floor="0.6:count"),
    "tumbling-rocksdb": Scenario(windowed_count_app, expected_window_counts, verify_window_counts,
                                 floor="0.5:count-rocksdb", make_events=make_windowed_events),
    "tumbling-rocksdb-eos": Scenario(lambda: windowed_count_app("exactly_once"), expected_window_counts,
                                     verify_window_counts, floor="0.5:count-rocksdb",
                                     make_events=make_windowed_events),
    "tumbling-repartitioned-skewed": Scenario(repartitioned_count_app, expected_page_window_counts,
                                              verify_window_counts,
                                              make_events=make_skewed_user_events, stages=2),
    "tumbling-repartitioned-skewed-eos": Scenario(lambda: repartitioned_count_app("exactly_once"),
                                                  expected_page_window_counts, verify_window_counts,
                                                  floor="0.7:tumbling-repartitioned-skewed",
                                                  make_events=make_skewed_user_events, stages=2),
    "session-rocksdb": Scenario(session_count_app, expected_session_counts, verify_session_counts,
                                make_events=make_windowed_events),
    "sliding-rocksdb": Scenario(sliding_count_app, expected_sliding_counts, verify_session_counts,
                                make_events=make_windowed_events),
    "session-rocksdb-eos": Scenario(lambda: session_count_app("exactly_once"), expected_session_counts,
                                    verify_session_counts, floor="0.7:session-rocksdb",
                                    make_events=make_windowed_events),
}


def run_worker_process(name: str, directory: str, module: str = "bench.embedded_throughput",
                       http: bool = False) -> dict:
    """Run ``module``'s child for scenario ``name`` in a process of its own (as `streamkit
    worker` runs) and return its own figures (see :func:`time_worker`); ``http``: with
    the worker's HTTP endpoints on and scraped."""
    command = [sys.executable, "-m", module, "--child", name, directory]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    env.pop(HTTP_ON, None)
    if http:
        env[HTTP_ON] = "1"
    out = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{name}: worker process failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def time_worker(app: sk.App, directory: str, counters: Tuple[str, ...] = (), until_idle: float = IDLE_EXIT) -> None:
    """The child's work: run one worker over the pre-produced input until idle and print,
    as JSON, its seconds from start to its last commit (and the wall-clock time it
    started), records processed, peak RSS and the named ``counters`` of its totals."""
    transport = EmbeddedTransport(directory)
    worker = app.worker(transport, until_idle=until_idle)
    if os.environ.get(HTTP_ON):
        import streamkit.operations.http_server  # noqa: F401 - loaded before the clock starts, as a worker would
        import streamkit.operations.lag_endpoint  # noqa: F401
    tune_gc_for_streaming()  # as `streamkit worker` does
    started_at = time.time()
    started, cpu_started = time.perf_counter(), time.process_time()
    if os.environ.get(HTTP_ON):
        asyncio.run(run_with_http(worker))
    else:
        asyncio.run(worker.run())
    elapsed = time.perf_counter() - started - until_idle
    cpu = time.process_time() - cpu_started
    transport.close()
    figures = {"seconds": elapsed, "started_at": started_at, "cpu_seconds": cpu,
               "records": worker.totals.records_processed,
               "peak_rss_mib": peak_rss_mib()}
    figures.update((name, getattr(worker.totals, name)) for name in counters)
    print(json.dumps(figures))


HTTP_ON = "STREAMKIT_BENCH_HTTP"
"""Set in a child's environment: its worker serves --http and is scraped every second."""
SCRAPE_EVERY_S = 1.0


async def run_with_http(worker) -> None:  # noqa: ANN001 - a streamkit Worker
    """``worker.run()`` with its HTTP endpoints on, and /metrics scraped every second by
    another process (as Prometheus would, more often than its 15 s default)."""
    from streamkit.operations.http_server import HttpEndpoints

    endpoints = HttpEndpoints("127.0.0.1:0")
    await endpoints.start(worker)
    scraper = subprocess.Popen([sys.executable, "-c", (
        "import sys, time, urllib.request\n"
        "while True:\n"
        "    try: urllib.request.urlopen(sys.argv[1] + '/metrics', timeout=5).read()\n"
        "    except OSError: pass\n"
        f"    time.sleep({SCRAPE_EVERY_S})\n"), worker.endpoint], stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    try:
        await worker.run()
    finally:
        scraper.kill()
        scraper.wait()
        await endpoints.stop()


def child(name: str, directory: str) -> None:
    """Entry point of the child: time one worker over the pre-produced input."""
    time_worker(SCENARIOS[name].make_app(), directory)


def peak_rss_mib() -> float:
    """This process's peak RSS. Not ru_maxrss: Linux carries it over fork and exec, so a
    child would report its parent's peak."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_once(name: str, n_events: int, http: bool = False) -> dict:
    """Produce, run the worker process, verify its output; return its figures."""
    make_app, expect, verify, keys, _floor, make, stages, encode = SCENARIOS[name]
    directory = tempfile.mkdtemp(prefix=f"sk-bench-{name}-")
    try:
        transport = EmbeddedTransport(directory)
        events = make(n_events, keys=keys)
        expected = expect(events)
        if encode is not None:
            events = encode(transport.url, events)
        produce(transport, events)
        del events
        figures = run_worker_process(name, directory, http=http)
        assert figures["records"] == n_events * stages, \
            f"{name}: processed {figures['records']} records for {n_events} events in {stages} stage(s)"
        committed = transport.admin.committed_offsets(make_app().id)
        assert sum(committed.get(TopicPartition("events", p), 0) for p in range(PARTITIONS)) == n_events
        verify(transport, expected)
        transport.close()
        figures["events_per_second"] = n_events / figures["seconds"]
        return figures
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def judge(name: str, results: Dict[str, dict]) -> str:
    floor = SCENARIOS[name].floor
    if floor is None:
        return "(no floor)"
    rate = results[name]["events_per_second"]
    if ":" not in floor:
        return f"floor {int(floor):,}: {'ok' if rate >= int(floor) else 'BELOW FLOOR'}"
    fraction, other = floor.split(":")
    if other not in results:
        return f"floor {float(fraction):.0%} of {other}: not measured in this run"
    ratio = rate / results[other]["events_per_second"]
    verdict = "ok" if ratio >= float(fraction) else "BELOW FLOOR"
    return f"{ratio:.0%} of {other} (floor {float(fraction):.0%}: {verdict})"


def measure_http_cost(names: List[str], n_events: int, reps: int) -> None:
    """Each scenario with --http off and on, interleaved rep by rep; the median of each and
    the cost of the endpoints (1 - on / off)."""
    print(f"embedded broker, {n_events:,} events: the HTTP endpoints' cost (scraped every {SCRAPE_EVERY_S:g} s), "
          f"median of {reps}")
    for name in names:
        off, on = [], []
        for _ in range(reps):
            off.append(run_once(name, n_events)["events_per_second"])
            on.append(run_once(name, n_events, http=True)["events_per_second"])
        a, b = statistics.median(off), statistics.median(on)
        print(f"  {name:<20} off {a:>10,.0f} events/s   on {b:>10,.0f} events/s   cost {1 - b / a:+.1%}  "
              f"(off: {', '.join(f'{r:,.0f}' for r in off)}; on: {', '.join(f'{r:,.0f}' for r in on)})")


def main(argv: Optional[List[str]] = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 3 and argv[0] == "--child":
        child(argv[1], argv[2])
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--only", default=None, metavar="NAME[,NAME...]",
                        help=f"run only these: {', '.join([*SCENARIOS, 'restore'])}")
    parser.add_argument("--interleave", action="store_true",
                        help="run the reps round-robin over the scenarios (a, b, a, b, ...) rather than each "
                        "scenario's reps in a row: on a shared machine, load changes hit every scenario alike")
    parser.add_argument("--http", action="store_true", help="run each scenario with the worker's HTTP endpoints "
                        "off and on (scraped every second), reps interleaved, and print what they cost")
    args = parser.parse_args(argv)
    if args.http:
        measure_http_cost(args.only.split(",") if args.only else ["filter-map", "count"], args.events, args.reps)
        return
    results: Dict[str, dict] = {}
    print(f"embedded broker, {args.events:,} JSON events, {PARTITIONS} partitions, 1 worker process, "
          f"{os.cpu_count()} cores")
    only = args.only.split(",") if args.only else [*SCENARIOS, "restore"]
    unknown = set(only) - {*SCENARIOS, "restore"}
    if unknown:
        parser.error(f"unknown scenario(s) {', '.join(sorted(unknown))}")
    names = [n for n in SCENARIOS if n in only]
    runs_of: Dict[str, List[dict]] = {name: [] for name in names}
    if args.interleave:
        for _ in range(args.reps):
            for name in names:
                runs_of[name].append(run_once(name, args.events))
    for name in names:
        runs = runs_of[name] or [run_once(name, args.events) for _ in range(args.reps)]
        rates = [r["events_per_second"] for r in runs]
        rate = statistics.median(rates)
        peak = max(r["peak_rss_mib"] for r in runs)
        results[name] = {"events_per_second": rate, "reps": rates, "worker_peak_rss_mib": peak}
        print(f"  {name:<20} {rate:>10,.0f} events/s  worker peak RSS {peak:>5,.0f} MiB  "
              f"{judge(name, results)}  (reps: {', '.join(f'{r:,.0f}' for r in rates)})")
    for a, b in (("filter-map-avro", "filter-map"), ("count-rocksdb", "count-memory-100k"), ("count-rocksdb", "count"),
                 ("tumbling-repartitioned-skewed", "tumbling-rocksdb")):
        if a in results and b in results:
            print(f"  ratio {a} / {b}: {results[a]['events_per_second'] / results[b]['events_per_second']:.0%}")
    if "restore" in only:
        restore_rate = restore_throughput.measure(1_000_000)
        results["restore"] = {"records_per_second": restore_rate, "seconds_for_1m": 1_000_000 / restore_rate}
        print(f"  {'restore':<20} {restore_rate:>10,.0f} records/s  1,000,000 changelog records into RocksDB "
              f"in {1_000_000 / restore_rate:.1f} s")
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    path = os.path.join(ROOT, "bench", "results", "embedded_throughput.json")
    try:  # scenarios not run this time keep their last figures (at the same event count)
        with open(path) as f:
            previous = json.load(f)
        if previous.get("events") == args.events:
            results = {**previous.get("scenarios", {}), **results}
    except (OSError, ValueError):
        pass
    with open(path, "w") as f:
        json.dump({"events": args.events, "partitions": PARTITIONS, "scenarios": results}, f, indent=2)
    print(f"  results written to {path}")


if __name__ == "__main__":
    main()
