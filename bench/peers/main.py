"""``python -m bench``: streamkit against its peers, on one broker, one set of events, one
machine, every figure verified against the true result before it is printed.

Columns: streamkit on Kafka (caching off: one update per event, the peers' work; and with
its default caching), streamkit on its embedded broker (both ways), the raw aiokafka
consume -> produce loop (the limit), Kafka Streams 4.1 itself (a JVM; caching off and on),
faust-streaming, Quix Streams, Bytewax and Pathway (their own state, in memory; each
module's ``CONTRACT`` says where it departs from the output contract). Scenarios S0 .. S5
are described in ``bench.peers.workload``. Also: S1 end-to-end latency at a fixed offered
load (``latency``), and the time to restore a 1,000,000-record changelog (``restore``).

By default each scenario gets a fresh single-node Apache Kafka (jars from
``scripts/ensure-kafka``); ``--broker HOST:PORT`` uses a running Kafka instead, ``--broker
tansu`` a fresh Tansu per scenario (no transactions: S5 is skipped).

  python -m bench [--broker HOST:PORT] [--events 200000] [--embedded-events 1000000]
                  [--reps 3] [--only FRAMEWORK:SCENARIO[,...]] [--events-for faust=20000]
                  [--jvm-events 2000000] [--jvm-reps 1]

faust runs fewer events (``--events-for``; its figures are per event like everyone's). Kafka
Streams also runs S1-S3 at ``--jvm-events``, with streamkit and the aiokafka loop beside it,
in a table of its own: a JVM is at its worst on a short run.

``--only`` takes ``streamkit:S2``, ``quix:*``, ``*:S1``, ``latency``, ``latency:embedded``,
``restore``; frameworks: streamkit, streamkit-rdkafka (librdkafka client), streamkit-cached, embedded,
embedded-cached, raw, kafka-streams, kafka-streams-cached, faust, quix, bytewax, pathway.
Results go to bench/results/peers.json and bench/results/peers.png.
"""
from __future__ import annotations

import argparse
import fnmatch
import importlib
import logging
import os
import platform
import subprocess
import sys
import time
from collections import Counter
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence

from bench.kafka_throughput import broker_description, open_broker
from bench.peers import embedded, report
from bench.peers.frameworks import NEEDS_TRANSACTIONS
from bench.peers.runner import ROOT, Inputs, VerificationError, produce_inputs, run_once, summarize
from bench.peers.workload import PARTITIONS, SCENARIOS, make_events, make_pages_table

log = logging.getLogger("bench.peers")

RESULTS = os.path.join(ROOT, "bench", "results", "peers.json")
CHART = os.path.join(ROOT, "bench", "results", "peers.png")
KAFKA_COLUMNS = ("raw", "streamkit", "streamkit-rdkafka", "streamkit-cached", "kafka-streams",
                 "kafka-streams-cached", "faust", "quix", "bytewax", "pathway")
CACHED_COLUMNS = ("streamkit-cached", "kafka-streams-cached")
EMBEDDED_COLUMNS = ("embedded", "embedded-cached")
EXTRAS = ("latency", "restore")
JVM_COLUMNS = ("raw", "streamkit", "kafka-streams")
JVM_SCENARIOS = ("S1", "S2", "S3")
"""The second pass at ``--jvm-events``: Kafka Streams with streamkit and the aiokafka loop
beside it at the same size, so each ratio is taken within one size. A JVM is at its worst
on a 2-3 s window (its JIT compiles the record path meanwhile)."""
RESTORE_NOT_RUN = {
    "kafka-streams": "not measured: the Kafka Streams peer has no restore mode (its changelog format and a "
                     "StateRestoreListener window are not written yet)",
    "bytewax": "n/a: state in memory (no recovery store), nothing to restore from Kafka",
    "pathway": "n/a: state in memory (no persistence), nothing to restore from Kafka"}
"""The restore table's columns that are not measured, each with why."""
DEFAULT_EVENTS_FOR = "faust=20000"
"""faust spends about 300 us of CPU per event (1,500-4,000 events/s): at 200,000 events its
five scenarios alone would take most of an hour. Its figures are per event either way."""


def framework_of(column: str) -> str:
    if column == "streamkit-rdkafka":
        return "streamkit_rdkafka"  # streamkit with kafka_client="librdkafka"
    if column.startswith("kafka-streams"):
        return "kafka_streams"
    return "streamkit" if column.startswith("streamkit") else column


def load_framework(column: str) -> Any:
    """The framework module, or the reason it cannot be loaded."""
    try:
        return importlib.import_module(f"bench.peers.frameworks.{framework_of(column)}")
    except ImportError as exc:
        extra = {"bytewax": "bench-bytewax", "pathway": "bench-pathway"}.get(column, "bench")
        return f"skipped: {exc.name or exc} is not installed (pip install -e '.[{extra}]')"


def selected(only: Sequence[str], column: str, scenario: str) -> bool:
    return any(fnmatch.fnmatch(column, c) and fnmatch.fnmatch(scenario, s)
               for c, _, s in (pattern.partition(":") for pattern in only if ":" in pattern
                               and pattern.split(":")[0] not in EXTRAS))


def extra_selected(only: Sequence[str], name: str) -> List[str]:
    """The columns of ``latency`` or ``restore`` asked for ([] = not asked for)."""
    columns: List[str] = []
    for pattern in only:
        head, _, tail = pattern.partition(":")
        if head == name:
            columns.append(tail or "*")
    return columns


def versions() -> Dict[str, str]:
    out = {"python": platform.python_version()}
    for column in ("streamkit", "streamkit-rdkafka", "kafka-streams", "raw", "faust", "quix", "bytewax", "pathway"):
        module = load_framework(column)
        try:
            out[column] = module if isinstance(module, str) else module.version()
        except Exception as exc:  # noqa: BLE001 - an incomplete install names itself in the report
            out[column] = f"unknown: {type(exc).__name__}: {exc}"
    return out


class KafkaPass(NamedTuple):
    """One pass over the Kafka scenarios: which (column, scenario) pairs, how many events."""
    events: int
    reps: int
    plan: Callable[[str, str], bool]  # (column, scenario) -> run it?
    events_for: Dict[str, int]  # column -> at most this many events (faust: fewer; figures are per event)


def parse_events_for(text: str) -> Dict[str, int]:
    """``faust=20000,quix=100000`` -> {"faust": 20000, "quix": 100000}."""
    out: Dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        column, _, count = item.partition("=")
        if column not in KAFKA_COLUMNS or not count.strip().isdigit() or int(count) <= 0:
            raise argparse.ArgumentTypeError(f"--events-for takes COLUMN=N[,...] with COLUMN one of "
                                             f"{', '.join(KAFKA_COLUMNS)}, not {item!r}")
        out[column] = int(count)
    return out


def run_kafka(args: argparse.Namespace, kafka_pass: KafkaPass, results: report.Results) -> Dict[str, Any]:
    """Every (framework, scenario) of ``kafka_pass`` on Kafka: a fresh broker per scenario, the
    inputs produced once per scenario and event count, reps interleaved across frameworks so
    that a slow stretch of the machine does not land on one framework alone."""
    table = make_pages_table()
    events_of: Dict[int, list] = {}
    transactions: Dict[str, Any] = {}
    for name, scenario in SCENARIOS.items():
        columns = [c for c in KAFKA_COLUMNS if kafka_pass.plan(c, name)]
        columns = [c for c in columns if c not in CACHED_COLUMNS or scenario.stateful]
        if not columns:
            continue
        broker = open_broker(args.broker)
        try:
            transactions = {"supported": broker.supports_transactions,
                            "why_not": getattr(broker, "why_no_transactions", None)}
            runnable = []
            modules = {}
            for column in columns:
                module = load_framework(column)
                reason = module if isinstance(module, str) else module.unsupported(scenario,
                                                                                  broker.supports_transactions)
                if reason is not None:
                    if reason == NEEDS_TRANSACTIONS and args.broker == "tansu":
                        reason += " (Tansu rejects InitProducerId; use --broker with Apache Kafka)"
                    results.setdefault(name, {})[column] = {"skipped": reason}
                    log.info("%s %s: %s", column, name, reason)
                else:
                    runnable.append(column)
                    modules[column] = module
            size = {c: min(kafka_pass.events_for.get(c, kafka_pass.events), kafka_pass.events) for c in runnable}
            inputs: Dict[int, Inputs] = {}
            expected: Dict[int, Counter] = {}
            for n in sorted(set(size.values())):
                if n not in events_of:
                    events_of[n] = make_events(n)
                events = events_of[n]
                inputs[n] = produce_inputs(broker.bootstrap, name, events, table)
                expected[n] = scenario.expect(events, table)
            runs: Dict[str, List[dict]] = {c: [] for c in runnable}
            failed: Dict[str, str] = {}
            for _ in range(kafka_pass.reps):
                for column in runnable:
                    if column in failed:
                        continue
                    try:
                        module = modules[column]
                        coalesced = column in CACHED_COLUMNS or name in getattr(module, "COALESCED_SCENARIOS", ())
                        n = size[column]
                        runs[column].append(run_once(framework_of(column), name, broker.bootstrap, events_of[n],
                                                     table, expected[n], caching=coalesced, verbose=args.verbose,
                                                     group_offsets=getattr(module, "COMMITS_GROUP_OFFSETS", True),
                                                     inputs=inputs[n]))
                    except (VerificationError, RuntimeError, subprocess.TimeoutExpired) as exc:
                        failed[column] = str(exc)
                        log.error("%s %s: NOT VERIFIED, no figure: %s", column, name, exc)
            for column in runnable:
                results.setdefault(name, {})[column] = (
                    {"skipped": f"failed: {failed[column][:300]}"} if column in failed
                    else {**summarize(runs[column], size[column]), "events": size[column]})
                contract = getattr(modules[column], "CONTRACT", None)
                if contract:
                    results[name][column]["contract"] = contract
        finally:
            broker.stop()
    return transactions


def run_embedded(args: argparse.Namespace, only: Sequence[str], results: report.Results) -> None:
    plans = [(name, column) for name, scenario in SCENARIOS.items() for column in EMBEDDED_COLUMNS
             if selected(only, column, name) and (column == "embedded" or scenario.stateful)]
    if not plans:
        return
    events = make_events(args.embedded_events)
    table = make_pages_table()
    for name, column in plans:
        expected = SCENARIOS[name].expect(events, table)
        try:
            runs = [embedded.run_once(name, events, table, expected, caching=column == "embedded-cached")
                    for _ in range(args.reps)]
            results.setdefault(name, {})[column] = summarize(runs, len(events))
        except (VerificationError, RuntimeError, subprocess.TimeoutExpired) as exc:
            log.error("%s %s: NOT VERIFIED, no figure: %s", column, name, exc)
            results.setdefault(name, {})[column] = {"skipped": f"failed: {str(exc)[:300]}"}


def run_restore(args: argparse.Namespace, patterns: Sequence[str]) -> Dict[str, dict]:
    """Restore figures per framework; one that fails gets the reason instead."""
    from bench.peers import restore as restore_bench

    out: Dict[str, dict] = {}
    for framework, reason in RESTORE_NOT_RUN.items():
        if any(fnmatch.fnmatch(framework, p) for p in patterns):
            out[framework] = {"skipped": reason}
    for framework in restore_bench.FRAMEWORKS:
        if not any(fnmatch.fnmatch(framework, p) for p in patterns):
            continue
        try:
            out.update(restore_bench.measure(args.broker, records=args.restore_records, frameworks=[framework],
                                             reps=args.restore_reps))
        except Exception as exc:  # noqa: BLE001 - reported in the table instead of a figure
            log.error("restore %s: NOT VERIFIED, no figure: %s", framework, exc)
            out[framework] = {"skipped": f"failed: {str(exc)[:300]}"}
    return out


def _conditions() -> Dict[str, object]:
    """When (UTC) and how loaded the machine was (1-minute load average): the figures of
    one run compare with each other, not with another day's."""
    return {"utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "load_1min": round(os.getloadavg()[0], 2)}


def _commit() -> Optional[str]:
    """The streamkit commit measured (with '+changes' when the work tree differs), or None."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT,
                              timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "streamkit", "bench", ":(exclude)bench/results"],
                               capture_output=True, text=True, cwd=ROOT, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (head + ("+changes" if dirty else "")) or None


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--broker", metavar="HOST:PORT", help="use this Kafka broker; 'tansu': a fresh Tansu "
                        "per scenario (default: a fresh Apache Kafka per scenario)")
    parser.add_argument("--events", type=int, default=200_000, help="events per Kafka run (default 200,000)")
    parser.add_argument("--embedded-events", type=int, default=1_000_000,
                        help="events per embedded-broker run (default 1,000,000)")
    parser.add_argument("--reps", type=int, default=3, help="repetitions; the median is reported (default 3)")
    parser.add_argument("--only", default="*:*,latency,restore", metavar="FRAMEWORK:SCENARIO[,...]",
                        help="what to run (default: everything)")
    parser.add_argument("--latency-seconds", type=float, default=30.0)
    parser.add_argument("--latency-rate", type=int, default=10_000, help="offered load, events/s")
    parser.add_argument("--latency-reps", type=int, default=1,
                        help="latency repetitions, interleaved across the columns; the median rep is reported")
    parser.add_argument("--restore-records", type=int, default=1_000_000)
    parser.add_argument("--restore-reps", type=int, default=1,
                        help="restore repetitions (default 1: faust takes minutes per restore)")
    parser.add_argument("--events-for", type=parse_events_for, default=parse_events_for(DEFAULT_EVENTS_FOR),
                        metavar="COLUMN=N[,...]", help="at most N events per Kafka run for COLUMN, its figures "
                        f"per event as everyone's (default {DEFAULT_EVENTS_FOR}: faust runs about 100x slower; "
                        "'' for none)")
    parser.add_argument("--jvm-events", type=int, default=2_000_000, metavar="N",
                        help="also run S1-S3 for Kafka Streams, streamkit and the aiokafka loop at N events, a "
                        "table of its own (default 2,000,000: a JVM is at its worst on short runs; 0: off)")
    parser.add_argument("--jvm-reps", type=int, default=1, help="repetitions of the --jvm-events pass (default 1)")
    parser.add_argument("--results", default=RESULTS, help="where to write the JSON (the chart goes beside it)")
    parser.add_argument("--verbose", action="store_true", help="show the children's logs")
    args = parser.parse_args(argv)
    only = [p.strip() for p in args.only.split(",") if p.strip()]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    for noisy in ("aiokafka", "kafka"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

    started = _conditions()
    results: report.Results = {}
    transactions = run_kafka(args, KafkaPass(args.events, args.reps, lambda c, s: selected(only, c, s),
                                             args.events_for), results)
    at_jvm_size: report.Results = {}
    if args.jvm_events > 0:
        def jvm_plan(column: str, scenario: str) -> bool:
            return (column in JVM_COLUMNS and scenario in JVM_SCENARIOS and selected(only, column, scenario)
                    and selected(only, "kafka-streams", scenario))

        run_kafka(args, KafkaPass(args.jvm_events, args.jvm_reps, jvm_plan, {}), at_jvm_size)
    run_embedded(args, only, results)
    latency: Dict[str, dict] = {}
    if extra_selected(only, "latency"):
        from bench.peers import latency as latency_bench

        latency = latency_bench.measure_all(extra_selected(only, "latency"), args.broker,
                                            rate=args.latency_rate, seconds=args.latency_seconds,
                                            reps=args.latency_reps)
    restore: Dict[str, dict] = {}
    if extra_selected(only, "restore"):
        restore = run_restore(args, extra_selected(only, "restore"))

    broker_name = broker_description(args.broker)
    header = (f"Kafka: {broker_name}; {args.events:,} JSON events (embedded broker: {args.embedded_events:,}), "
              f"{PARTITIONS} partitions, 1 process per framework, median of {args.reps}, {os.cpu_count()} cores")
    floors = report.judge_floors(results, latency, at_jvm_size, args.jvm_events)
    report.print_table(header, results, latency, restore, floors, args.events, at_jvm_size, args.jvm_events)
    chart = os.path.splitext(args.results)[0] + ".png"
    why_no_chart = report.write_chart(chart, results, header)
    report.write_json(args.results, {
        "header": header, "events": args.events, "embedded_events": args.embedded_events, "reps": args.reps,
        "partitions": PARTITIONS, "cores": os.cpu_count(), "versions": versions(), "transactions": transactions,
        "timed": "Kafka: from the first input records handed out by the consumer to the completion of the commit "
                 "covering the last one (outputs acknowledged before it); process start and group join excluded. "
                 "Embedded: from worker start to its last commit.",
        "events_for": args.events_for, "scenarios": results,
        "at_jvm_size": {"events": args.jvm_events, "reps": args.jvm_reps, "scenarios": at_jvm_size},
        "latency": latency, "restore": restore, "floors": floors,
        "run": {"started": started, "ended": _conditions(), "commit": _commit()}})
    print(f"\n  results written to {os.path.relpath(args.results)}; chart: "
          f"{why_no_chart or os.path.relpath(chart)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
