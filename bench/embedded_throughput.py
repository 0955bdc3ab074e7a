"""End-to-end throughput on the embedded broker.

Pre-produces N JSON page-view events (deterministic seed, 3 partitions, keyed
by page), then runs one in-process worker per scenario until the input is
consumed and committed, verifies the output against a result computed directly
from the input, and prints events/s (from worker start to its last commit):

  (a) filter-map : filter(amount > 10) → map_values → to(topic)
  (b) count      : group_by_key() → count() → to_stream() → to(topic)

Usage: python -m bench [--events 1000000] [--reps 1] [--only filter-map|count]
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import resource
import shutil
import statistics
import tempfile
import time
from collections import Counter
from typing import Callable, Dict, List, Tuple

import orjson

import streamkit as sk
from streamkit.runtime.worker import Worker
from streamkit.transport.base import TopicPartition
from streamkit.transport.embedded.transport import EmbeddedTransport
from streamkit.transport.partitioner import partition_for_key

PARTITIONS = 3
PAGES = 1000
IDLE_EXIT = 0.3  # s of no input before the worker stops; subtracted from the timing


def make_events(n: int, seed: int = 42) -> List[Tuple[bytes, bytes, int]]:
    rng = random.Random(seed)
    start = 1_700_000_000_000
    out = []
    for i in range(n):
        page = f"page-{rng.randrange(PAGES)}"
        value = {"user": f"user-{rng.randrange(10_000)}", "page": page, "ts": start + i, "amount": rng.randrange(100)}
        out.append((page.encode(), orjson.dumps(value), start + i))
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


def count_app() -> sk.App:
    app = sk.App("bench-count")
    events = app.topic("events", partitions=PARTITIONS)

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        b.stream(events).group_by_key().count(name="counts").to_stream().to("counts")
    return app


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
    final: Dict[str, int] = {}
    got = read_topic(transport, "counts")
    for k, v in got:
        final[k.decode()] = orjson.loads(v)
    assert len(got) == sum(expected.values()), f"count wrote {len(got)} updates, expected {sum(expected.values())}"
    assert final == expected, "final counts differ from the input's"


SCENARIOS: Dict[str, Tuple[Callable[[], sk.App], Callable, Callable]] = {
    "filter-map": (filter_map_app, expected_filter_map, verify_filter_map),
    "count": (count_app, expected_count, verify_count),
}


def run_once(name: str, n_events: int) -> float:
    """Produce, then time one worker over the input; only a summary of the input stays in
    memory while the worker runs (a real worker's heap does not hold its input)."""
    make_app, expect, verify = SCENARIOS[name]
    directory = tempfile.mkdtemp(prefix=f"sk-bench-{name}-")
    try:
        transport = EmbeddedTransport(directory)
        events = make_events(n_events)
        produce(transport, events)
        expected = expect(events)
        del events
        gc.collect()
        app = make_app()
        worker = Worker(app, transport, until_idle=IDLE_EXIT)
        started = time.perf_counter()
        asyncio.run(worker.run())
        elapsed = time.perf_counter() - started - IDLE_EXIT
        processed = worker.totals.records_processed
        assert processed == n_events, f"{name}: processed {processed} of {n_events}"
        committed = transport.admin.committed_offsets(app.id)
        assert sum(committed.get(TopicPartition("events", p), 0) for p in range(PARTITIONS)) == n_events
        verify(transport, expected)
        transport.close()
        return n_events / elapsed
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--only", choices=sorted(SCENARIOS), default=None)
    args = parser.parse_args()
    floors = {"filter-map": 150_000, "count": 100_000}
    results = {}
    print(f"embedded broker, {args.events:,} JSON events, {PARTITIONS} partitions, 1 worker process, "
          f"{os.cpu_count()} cores")
    for name in [args.only] if args.only else list(SCENARIOS):
        rates = [run_once(name, args.events) for _ in range(args.reps)]
        rate = statistics.median(rates)
        results[name] = rate
        verdict = "ok" if rate >= floors[name] else "BELOW FLOOR"
        print(f"  {name:<11} {rate:>12,.0f} events/s  (floor {floors[name]:,}: {verdict}; "
              f"reps: {', '.join(f'{r:,.0f}' for r in rates)})")
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"  peak RSS {peak_mb:,.0f} MiB (includes generating the events and reading back the output)")
    os.makedirs(os.path.join(os.path.dirname(__file__), "results"), exist_ok=True)
    path = os.path.join(os.path.dirname(__file__), "results", "embedded_throughput.json")
    with open(path, "w") as f:
        json.dump({"events": args.events, "events_per_second": results, "peak_rss_mib": peak_mb}, f, indent=2)
    print(f"  results written to {path}")


if __name__ == "__main__":
    main()
