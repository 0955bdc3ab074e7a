"""Join throughput on the embedded broker.

Like ``python -m bench`` (bench/embedded_throughput.py): pre-produces deterministic
JSON input (seed 42, 3 partitions per topic) into an embedded broker directory, runs
one worker per scenario in a child process until the input is consumed and committed,
verifies the output against a result computed directly from the input, and reports
input events/s (from worker start to its last commit, median of --reps) and the
worker's peak RSS. RocksDB stores, caching off (every result emitted at once), at_least_once.

  stream-table        enrichment: b.stream("events").join(b.table("customers"),
                      lambda v, c: {**v, "region": c["region"]}).to("enriched").
                      customers: 100,000 keys cust-<i>, {"region": "r<i % 50>", "tier": ...};
                      events: --events N (default 1,000,000) keyed by customer id,
                      {"customer", "amount", "ts"}, 1% of them for unknown customers.
                      Both topics are produced before the worker starts; the customers are
                      timestamped before every event, and the task runs its two inputs in
                      timestamp order, so the table is fully loaded before the first event
                      joins. Events/s: the events over the worker's whole run (loading the
                      100,000 customers included). With --preload-table, a first worker loads
                      the table alone (reported as "table load"), then the events are produced
                      and a second, measured worker joins them against the restored table.
                      Verified: every event of a known customer is in `enriched` exactly once
                      with its customer's region; the events of unknown customers, and only
                      they, are dropped (count checked).
  stream-stream       windowed join orders ⋈ payments, both keyed by order id, N/2 records
                      per side (default 500,000): orders.join(payments, lambda o, p: {**o,
                      "paid": p["amount"]}, sk.JoinWindows.of(5 min, grace=30 s)).to("paid").
                      Orders every 100 ms of event time, 1% up to 5 s out of order; 96% of the
                      orders have a payment within ±2 min, 2% one 5-10 min away (outside the
                      window), 2% none (a payment for an unknown order takes its place in the
                      same partition, so both topics advance through event time together and
                      no record is late: lateness stays well inside the 30 s grace). Payments
                      are in event-time order, 1% up to 5 s out of order. Verified: the exact
                      multiset of joined results equals a brute-force join of the input
                      (pairs with |t_order - t_payment| <= 5 min), and no record was dropped late.
  stream-stream-left  the same input with left_join: an order without a payment in its window
                      is emitted as joiner(order, None) once no payment can arrive for it any
                      more (stream time past its timestamp + 2 x 5 min + grace). Both topics
                      end with one "flush" record per partition, an
                      hour of event time after the rest (orders and payments flush records
                      share their keys, so they join each other), so every window closes.
                      Verified: the exact multiset of results (joined and unmatched) equals a
                      brute-force left join of the input; every order is in it.

The stream-stream scenarios read the same input (flush records included in both);
their events/s counts orders plus payments.

Usage: python -m bench joins [--events 1000000] [--reps 1] [--only SCENARIO[,SCENARIO...]]
                             [--preload-table]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
from collections import Counter
from datetime import timedelta
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Tuple

import orjson

import streamkit as sk
from bench.embedded_throughput import PARTITIONS, ROOT, read_topic, run_worker_process, time_worker
from streamkit.serdes import compact_json
from streamkit.transport.base import TopicPartition
from streamkit.transport.embedded.transport import EmbeddedTransport
from streamkit.core.partitioner import partition_for_key

Record = Tuple[bytes, bytes, int]
"""(key, value, timestamp) as produced."""

START = 1_700_000_000_000

# -- stream-table ---------------------------------------------------------------------

CUSTOMERS = 100_000
REGIONS = 50
TIERS = ("gold", "silver", "bronze", "basic")
UNKNOWN_RATE = 0.01

def make_customers() -> List[Record]:
    """The table: cust-<i> → {"region": "r<i % 50>", "tier": ...}, timestamped before every event."""
    out = []
    for i in range(CUSTOMERS):
        key = f"cust-{i}"
        value = {"region": f"r{i % REGIONS}", "tier": TIERS[i % len(TIERS)], "name": f"Customer {i}"}
        out.append((key.encode(), compact_json(value), START - CUSTOMERS + i))
    return out


def make_enrichment_events(n: int, seed: int = 42) -> List[Record]:
    """Events keyed by customer id; 1% reference customers that do not exist. Event time
    is START + i (unique: it identifies the event in the output)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        if rng.random() < UNKNOWN_RATE:
            customer = f"cust-{CUSTOMERS + rng.randrange(CUSTOMERS)}"  # unknown
        else:
            customer = f"cust-{rng.randrange(CUSTOMERS)}"
        value = {"customer": customer, "amount": rng.randrange(1, 10_000) / 100, "ts": START + i}
        out.append((customer.encode(), compact_json(value), START + i))
    return out


def stream_table_app() -> sk.App:
    app = sk.App("bench-join-stream-table", store_backend="rocksdb", caching=False)
    app.topic("customers", partitions=PARTITIONS)
    app.topic("events", partitions=PARTITIONS)

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        b.stream("events").join(b.table("customers"), lambda v, c: {**v, "region": c["region"]}).to("enriched")
    return app


def stream_table_input(n: int, preload_table: bool = False) -> "Input":
    customers = make_customers()
    events = make_enrichment_events(n)
    regions = {i: f"r{i % REGIONS}" for i in range(CUSTOMERS)}
    expected = {}
    unknown = 0
    for key, _value, ts in events:
        index = int(key[5:])
        if index < CUSTOMERS:
            expected[ts] = (key.decode(), regions[index])
        else:
            unknown += 1
    if preload_table:
        phases = [{"customers": customers}, {"events": events}]
    else:
        phases = [{"customers": customers, "events": events}]
    return Input(phases, {"enriched": expected, "unknown": unknown, "events": n}, events=n)


def verify_stream_table(transport: EmbeddedTransport, expected: dict) -> str:
    want: Dict[int, Tuple[str, str]] = expected["enriched"]
    got = read_topic(transport, "enriched")
    seen: Counter = Counter()
    wrong = 0
    for k, v in got:
        value = orjson.loads(v)
        ts = value["ts"]
        seen[ts] += 1
        if want.get(ts) != (k.decode(), value["region"]) or value["customer"] != k.decode():
            wrong += 1
    missing = sum(1 for ts in want if ts not in seen)
    duplicated = sum(c - 1 for c in seen.values() if c > 1)
    unexpected = sum(1 for ts in seen if ts not in want)
    dropped = expected["events"] - len(got)
    assert not (missing or duplicated or unexpected or wrong), (
        f"enriched: {len(got)} records for {len(want)} expected: {missing} missing, {duplicated} duplicated, "
        f"{unexpected} unexpected (unknown customer), {wrong} with a wrong key/region")
    assert dropped == expected["unknown"], f"{dropped} events dropped, {expected['unknown']} had unknown customers"
    return (f"ok: {len(got):,} events enriched exactly once with the right region; "
            f"{dropped:,} events of unknown customers dropped")


# -- stream-stream --------------------------------------------------------------------

ORDER_SPACING = 100  # ms of event time between orders
WINDOW = timedelta(minutes=5)
GRACE = timedelta(seconds=30)
WINDOW_MS = 300_000
NEAR_MS = 120_000  # a matching payment is within ±2 min of its order
DISORDER_MS = 5_000  # 1% of each topic's records are up to this much out of order
FLUSH_AFTER_MS = 3_600_000


def key_in_partition(prefix: str, partition: int) -> str:
    """``<prefix>-<j>`` with the smallest j whose key lands in ``partition``."""
    j = 0
    while partition_for_key(f"{prefix}-{j}".encode(), PARTITIONS) != partition:
        j += 1
    return f"{prefix}-{j}"


def make_orders_payments(per_side: int, seed: int = 42) -> Tuple[List[Record], List[Record]]:
    """Orders and payments keyed by order id (see the module docstring), each topic in
    event-time order up to 1% of records a few seconds late, plus the flush records."""
    rng = random.Random(seed)
    orders: List[Record] = []
    payments: List[Tuple[int, bytes, dict]] = []
    for i in range(per_side):
        order_id = f"order-{i}"
        ts = START + i * ORDER_SPACING
        if rng.random() < 0.01:
            ts -= rng.randrange(1, DISORDER_MS)
        amount = rng.randrange(100, 100_000) / 100
        order = {"order": order_id, "customer": f"cust-{rng.randrange(CUSTOMERS)}", "amount": amount, "ts": ts}
        orders.append((order_id.encode(), compact_json(order), ts))
        draw = rng.random()
        if draw < 0.96:
            pay_key, pay_ts = order_id, ts + rng.randint(-NEAR_MS, NEAR_MS)
        elif draw < 0.98:  # paid, but outside the window
            pay_key, pay_ts = order_id, ts + rng.choice((-1, 1)) * rng.randint(WINDOW_MS + 1, 2 * WINDOW_MS)
        else:  # never paid: a payment of an unknown order, in the same partition, takes its place
            pay_key = key_in_partition(f"unknown-{i}", partition_for_key(order_id.encode(), PARTITIONS))
            pay_ts = ts + rng.randint(-NEAR_MS, NEAR_MS)
        payments.append((pay_ts, pay_key.encode(), {"order": pay_key, "amount": amount}))
    payments.sort(key=lambda p: p[0])
    pay_records: List[Record] = []
    for pay_ts, key, value in payments:
        if rng.random() < 0.01:
            pay_ts -= rng.randrange(1, DISORDER_MS)
        value["ts"] = pay_ts
        pay_records.append((key, compact_json(value), pay_ts))
    end = max(orders[-1][2], pay_records[-1][2]) + FLUSH_AFTER_MS
    for p in range(PARTITIONS):
        key = key_in_partition("flush", p)
        orders.append((key.encode(), compact_json({"order": key, "customer": None, "amount": 0, "ts": end}), end))
        pay_records.append((key.encode(), compact_json({"order": key, "amount": 0, "ts": end}), end))
    return orders, pay_records


def brute_force_join(orders: List[Record], payments: List[Record], left: bool) -> Counter:
    """Every (key, order, order ts, order amount, paid) the join must emit, with multiplicity."""
    by_key: Dict[bytes, List[Tuple[int, Any]]] = {}
    for key, value, ts in payments:
        by_key.setdefault(key, []).append((ts, orjson.loads(value)["amount"]))
    out: Counter = Counter()
    for key, value, ts in orders:
        order = orjson.loads(value)
        matches = [amount for pay_ts, amount in by_key.get(key, ()) if abs(ts - pay_ts) <= WINDOW_MS]
        for amount in matches:
            out[(key.decode(), order["order"], order["ts"], order["amount"], amount)] += 1
        if left and not matches:
            out[(key.decode(), order["order"], order["ts"], order["amount"], None)] += 1
    return out


def stream_stream_app(how: str) -> sk.App:
    app = sk.App(f"bench-join-stream-stream-{how}", store_backend="rocksdb", caching=False)
    app.topic("orders", partitions=PARTITIONS)
    app.topic("payments", partitions=PARTITIONS)

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        windows = sk.JoinWindows.of(WINDOW, grace=GRACE)
        orders, payments = b.stream("orders"), b.stream("payments")
        if how == "inner":
            orders.join(payments, lambda o, p: {**o, "paid": p["amount"]}, windows).to("paid")
        else:
            orders.left_join(payments, lambda o, p: {**o, "paid": None if p is None else p["amount"]},
                             windows).to("paid")
    return app


def stream_stream_input(n: int, left: bool) -> "Input":
    orders, payments = make_orders_payments(max(n // 2, 1))
    expected = {"results": brute_force_join(orders, payments, left), "left": left,
                "orders": {orjson.loads(v)["order"] for _, v, _ in orders}}
    return Input([{"orders": orders, "payments": payments}], expected, events=len(orders) + len(payments))


def verify_stream_stream(transport: EmbeddedTransport, expected: dict) -> str:
    want: Counter = expected["results"]
    got_records = read_topic(transport, "paid")
    got: Counter = Counter()
    for k, v in got_records:
        value = orjson.loads(v)
        got[(k.decode(), value["order"], value["ts"], value["amount"], value["paid"])] += 1
    if got != want:
        missing, extra = want - got, got - want
        sample = lambda c: ", ".join(map(str, list(c)[:3]))  # noqa: E731
        raise AssertionError(f"paid: {sum(got.values()):,} results, expected {sum(want.values()):,}: "
                             f"{sum(missing.values()):,} missing (e.g. {sample(missing)}), "
                             f"{sum(extra.values()):,} unexpected (e.g. {sample(extra)})")
    joined = sum(c for r, c in got.items() if r[4] is not None)
    text = f"ok: exactly the {joined:,} joined results of the brute-force join"
    if expected["left"]:
        unmatched = sum(got.values()) - joined
        covered = {r[1] for r in got}
        assert covered == expected["orders"], f"{len(expected['orders'] - covered):,} orders missing from the output"
        text += f" + {unmatched:,} unmatched orders (order, None); all {len(covered):,} orders present"
    return text + " (flush records included)"


# -- running --------------------------------------------------------------------------

class Input(NamedTuple):
    phases: List[Dict[str, List[Record]]]
    """Topics to produce before each worker run; the last run is the one measured."""
    expected: Any
    events: int
    """The events counted in events/s (the measured run's input records but the table's)."""


class Scenario(NamedTuple):
    make_app: Callable[[], sk.App]
    make_input: Callable[[int, bool], Input]
    """(events, preload_table) → the input"""
    verify: Callable[[EmbeddedTransport, Any], str]
    stream_stream: bool = False


SCENARIOS: Dict[str, Scenario] = {
    "stream-table": Scenario(stream_table_app, stream_table_input, verify_stream_table),
    "stream-stream": Scenario(lambda: stream_stream_app("inner"),
                              lambda n, _preload: stream_stream_input(n, left=False),
                              verify_stream_stream, stream_stream=True),
    "stream-stream-left": Scenario(lambda: stream_stream_app("left"),
                                   lambda n, _preload: stream_stream_input(n, left=True),
                                   verify_stream_stream, stream_stream=True),
}


def stream_stream_available() -> Tuple[bool, str]:
    """Smoke test of Stream.join/left_join(stream, joiner, sk.JoinWindows) on the test driver."""
    from streamkit.testing import TopologyTestDriver

    try:
        for how in ("inner", "left"):
            app = stream_stream_app(how)
            driver = TopologyTestDriver(app)
            driver.input_topic("orders").pipe_input("o1", {"order": "o1", "amount": 5}, timestamp=1_000)
            driver.input_topic("payments").pipe_input("o1", {"order": "o1", "amount": 5}, timestamp=61_000)
            driver.input_topic("orders").pipe_input("o2", {"order": "o2", "amount": 7}, timestamp=2_000)
            driver.input_topic("payments").pipe_input("o9", {"order": "o9", "amount": 1}, timestamp=10_000_000)
            out = driver.output_topic("paid").read_key_values()
            want = [("o1", {"order": "o1", "amount": 5, "paid": 5})]
            if how == "left":
                want.append(("o2", {"order": "o2", "amount": 7, "paid": None}))
            if sorted(out, key=str) != sorted(want, key=str):
                return False, f"{how} join smoke test: got {out}, expected {want}"
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        return False, f"{type(exc).__name__}: {exc}"
    return True, "ok"


def produce_to(transport: EmbeddedTransport, topic: str, records: List[Record],
               config: Optional[Mapping[str, str]] = None) -> List[int]:
    """embedded_throughput.produce for any topic (created with ``config`` if missing): by
    key's partition, in order. Returns the partitions' sizes."""
    if transport.admin.topic(topic) is None:
        transport.admin.create_topic(topic, PARTITIONS, config)
    per_partition: Dict[int, list] = {p: [] for p in range(PARTITIONS)}
    for key, value, ts in records:
        per_partition[partition_for_key(key, PARTITIONS)].append((key, value, ts, None))
    for p, batch in per_partition.items():
        for i in range(0, len(batch), 5000):
            transport.broker.append(topic, p, batch[i:i + 5000])
    transport.broker.sync()
    return [len(per_partition[p]) for p in range(PARTITIONS)]


def child(name: str, directory: str) -> None:
    time_worker(SCENARIOS[name].make_app(), directory, counters=("late_records_dropped",))


def run_once(name: str, n_events: int, preload_table: bool = False) -> dict:
    """Produce each phase's input and run a worker over it; verify the output; return the
    measured (last) run's figures."""
    scenario = SCENARIOS[name]
    directory = tempfile.mkdtemp(prefix=f"sk-bench-{name}-")
    try:
        transport = EmbeddedTransport(directory)
        data = scenario.make_input(n_events, preload_table)
        app_id = scenario.make_app().id
        totals: Dict[str, int] = {}
        phases = []
        for topics in data.phases:
            produced = sum(len(records) for records in topics.values())
            for topic, records in topics.items():
                produce_to(transport, topic, records)
                totals[topic] = len(records)
            figures = run_worker_process(name, directory, "bench.join_throughput")
            assert figures["records"] == produced, f"{name}: processed {figures['records']} of {produced}"
            figures["input_records"] = produced
            phases.append(figures)
        del data.phases[:]
        committed = transport.admin.committed_offsets(app_id)
        for topic, count in totals.items():
            done = sum(committed.get(TopicPartition(topic, p), 0) for p in range(PARTITIONS))
            assert done == count, f"{name}: committed {done} of {count} offsets of {topic}"
        measured = phases[-1]
        result = {"input_records": measured["input_records"], "events": data.events,
                  "seconds": measured["seconds"],
                  "events_per_second": data.events / measured["seconds"],
                  "input_records_per_second": measured["input_records"] / measured["seconds"],
                  "peak_rss_mib": measured["peak_rss_mib"],
                  "late_records_dropped": measured["late_records_dropped"]}
        if len(phases) > 1:
            load = phases[0]
            result["table_load"] = {"records": load["input_records"], "seconds": load["seconds"],
                                    "records_per_second": load["input_records"] / load["seconds"],
                                    "peak_rss_mib": load["peak_rss_mib"]}
        try:
            result["verification"] = scenario.verify(transport, data.expected)
            if scenario.stream_stream:
                assert measured["late_records_dropped"] == 0, \
                    f"{measured['late_records_dropped']} records dropped as late"
        except AssertionError as exc:
            result["verification"] = f"FAILED: {exc}"
        transport.close()
        return result
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main(argv: Optional[List[str]] = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 3 and argv[0] == "--child":
        child(argv[1], argv[2])
        return
    parser = argparse.ArgumentParser(prog="python -m bench joins", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000,
                        help="stream-table: events; stream-stream: orders + payments (half each)")
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--only", default=None, metavar="NAME[,NAME...]",
                        help=f"run only these: {', '.join(SCENARIOS)}")
    parser.add_argument("--preload-table", action="store_true",
                        help="stream-table: load the table with a worker of its own first, measure the "
                             "events alone (results not written)")
    args = parser.parse_args(argv)
    only = args.only.split(",") if args.only else list(SCENARIOS)
    unknown = set(only) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenario(s) {', '.join(sorted(unknown))}")
    print(f"embedded broker, joins, --events {args.events:,}, {PARTITIONS} partitions per topic, "
          f"1 worker process, RocksDB, {os.cpu_count()} cores, {args.reps} rep(s)")
    results: Dict[str, dict] = {}
    available: Optional[Tuple[bool, str]] = None
    for name in [n for n in SCENARIOS if n in only]:
        if SCENARIOS[name].stream_stream:
            available = available or stream_stream_available()
            if not available[0]:
                results[name] = {"status": f"not run: stream-stream joins not available ({available[1]})"}
                print(f"  {name:<20} not run: stream-stream joins not available ({available[1][:200]})")
                continue
        runs = [run_once(name, args.events, args.preload_table) for _ in range(args.reps)]
        rates = [r["events_per_second"] for r in runs]
        failed = [r["verification"] for r in runs if r["verification"].startswith("FAILED")]
        results[name] = {
            "input_records": runs[0]["input_records"],
            "events": runs[0]["events"],
            "events_per_second": statistics.median(rates),
            "input_records_per_second": statistics.median(r["input_records_per_second"] for r in runs),
            "reps": rates,
            "worker_peak_rss_mib": max(r["peak_rss_mib"] for r in runs),
            "late_records_dropped": max(r["late_records_dropped"] for r in runs),
            "verification": failed[0] if failed else runs[0]["verification"],
        }
        if "table_load" in runs[0]:
            loads = [r["table_load"] for r in runs]
            results[name]["table_load"] = {
                "records": loads[0]["records"],
                "records_per_second": statistics.median(l["records_per_second"] for l in loads),
                "peak_rss_mib": max(l["peak_rss_mib"] for l in loads)}
        r = results[name]
        print(f"  {name:<20} {r['events_per_second']:>9,.0f} events/s  peak RSS {r['worker_peak_rss_mib']:>5,.0f} MiB"
              f"  (reps: {', '.join(f'{x:,.0f}' for x in rates)})  {r['verification']}")
    print()
    print(f"  {'scenario':<20} {'input records':>13} {'events':>10} {'events/s':>10} {'peak RSS MiB':>12}"
          "  verification")
    for name, r in results.items():
        if "events_per_second" not in r:
            print(f"  {name:<20} {'':>13} {'':>10} {'':>10} {'':>12}  {r['status']}")
            continue
        print(f"  {name:<20} {r['input_records']:>13,} {r['events']:>10,} {r['events_per_second']:>10,.0f} "
              f"{r['worker_peak_rss_mib']:>12,.0f}  {r['verification'][:160]}")
        if "table_load" in r:
            load = r["table_load"]
            print(f"  {'  (table load)':<20} {load['records']:>13,} {'':>10} {load['records_per_second']:>10,.0f} "
                  f"{load['peak_rss_mib']:>12,.0f}  customers loaded by a worker of their own first")
    if args.preload_table:
        print("  --preload-table: results not written")
        return
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    path = os.path.join(ROOT, "bench", "results", "join_throughput.json")
    with open(path, "w") as f:
        json.dump({"events": args.events, "partitions": PARTITIONS, "reps": args.reps,
                   "scenarios": results}, f, indent=2)
    print(f"  results written to {path}")


if __name__ == "__main__":
    main()
