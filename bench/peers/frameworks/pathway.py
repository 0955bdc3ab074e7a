"""Pathway: the scenarios as a Pathway user writes them (tables from ``pw.io.kafka.read``
in streaming mode, Pathway's own operators, ``to_stream()`` turning a table's updates into
upserts for ``pw.io.kafka.write``), run in this process by ``pw.run()`` with Pathway's
default single worker thread. Pathway reads and writes Kafka through rust-rdkafka
(librdkafka) and keeps its state in memory (no persistence configured: nothing durable).

Pathway works in minibatches: its reader hands the records it read to the engine every
``autocommit_duration_ms``, set to the commit interval every framework gets (1 s; Pathway's
default is 1.5 s). A run's first minibatch therefore waits up to 1 s for that timer, inside
the window: that is Pathway's fixed cost on a small run.

Contract differences (``CONTRACT``, shown in the report's notes):

- S2 and S3 coalesce: ``to_stream()`` writes one upsert per key (per page and window) per
  minibatch, not one per event, so they are checked as coalesced (final values exact,
  fewer updates allowed).
- S3 is ``windowby`` on the event's ``ts`` with 60 s tumbling windows from 0 and *no*
  cutoff: Pathway's cutoff is measured from the highest event time its window operator has
  seen across all partitions, so a 10 s cutoff (the grace) dropped on-time events of a
  partition read behind the others. Without one no event is dropped and every window is
  kept (state grows with the number of windows).
- No group offsets: Pathway keeps its input offsets in its own persistence, never in a
  consumer group (librdkafka's auto-commit, which commits what was read rather than what
  was written, is turned off), so ``COMMITS_GROUP_OFFSETS`` is False.
- Its Kafka writer has no transactions: S5 is not run. S4 is an inner ``join`` of the events
  with the table read from its topic (upserted by message key): an event read before its
  page's row joins once the row arrives, with nothing to retract, so S4 meets the contract.

What is timed. Pathway's reader is native code, invisible to Python, so the window is
observed from the outside of its pipeline, inside this process:

- start: the later of two moments that both precede the first record read: the opening
  of the first minibatch holding input records (its logical time is the wall clock in ms
  at which it opened; a subscription to the input's running count reports it), and the
  last moment the reader's consumer group was seen still joining (polled every 5 ms by the
  watcher: the reader subscribes, and fetches only once it joined). The group join is so
  left out, as for the other frameworks. The window is never shorter than Pathway's own;
  it may be longer by the polling interval and the offset look-ups between join and fetch.
- end: a watcher thread consuming the output topic sees the complete result: every page's
  (S2) or every (page, window)'s (S3) last update summing to N, N records for S0 and S4,
  and for S1 as many records as Pathway counted passing the filter once all N were read.
  A consumer sees a record only below the high watermark: once the broker holds it as
  acks=all acknowledges it.
- CPU: the process's CPU from just before ``pw.run()`` (so Pathway's start-up counts too)
  to the end, less the watcher thread's own.

Pathway is then stopped as a user stops it, with SIGINT (``pw.run`` raises KeyboardInterrupt);
should ``pw.run`` not return within ``STOP_GRACE_S`` the process ends itself, printing
the figures it measured as ``bench.peers.child`` would.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from typing import Any, Callable, Dict, Optional

import orjson
import pathway as pw

from bench.peers.probe import Probe, peak_rss_mib
from bench.peers.workload import PARTITIONS, WINDOW_MS, Scenario, compact_json, enrich_value, filter_map_value

NAME = "Pathway"
COMMITS_GROUP_OFFSETS = False
COALESCED_SCENARIOS = frozenset({"S2", "S3"})
CONTRACT = ("in-memory state (no persistence); minibatches every 1 s: S2/S3 write one upsert per key per "
            "minibatch, checked as coalesced; S3 without a cutoff (a cutoff on Pathway's global event time "
            "dropped on-time events of lagging partitions); no group offsets; no transactions (S5 n/a); timed from "
            "no later than its first read (its first input minibatch's opening, its group's join) to the complete "
            "output seen in the output topic, including the wait for the minibatch timer")
JOIN_POLL_S = 0.005
IDLE_STOP_S = 120.0
"""Safety net: stop (and fail the figures) when neither input nor output moved for this long."""
STOP_GRACE_S = 5.0
"""How long ``pw.run`` may take to return after the SIGINT that stops it. The window has
ended and its figures are taken before the SIGINT, so waiting longer changes no figure; in
full runs pw.run often did not return at all (30 s then, per run: a quarter of an hour of a
full run), while alone it returns within a second."""

log = logging.getLogger(__name__)


class Event(pw.Schema):
    user: str
    page: str
    ts: int
    amount: int


def version() -> str:
    return f"pathway {pw.__version__} (rust-rdkafka, in-memory state)"


def unsupported(scenario: Scenario, transactions: bool) -> Optional[str]:
    if scenario.exactly_once:
        return "n/a: Pathway's Kafka writer has no transactions"
    return None


def kafka_settings(spec: dict, group_suffix: str = "") -> Dict[str, str]:
    """rdkafka settings for a reader: the run's group id (Pathway requires one), from the
    beginning, and no auto-commit (see the module docstring)."""
    return {"bootstrap.servers": spec["bootstrap"], "group.id": spec["app_id"] + group_suffix,
            "auto.offset.reset": "earliest", "enable.auto.commit": "false",
            "session.timeout.ms": os.environ.get("STREAMKIT_KAFKA_SESSION_TIMEOUT_MS", "6000"),
            "heartbeat.interval.ms": os.environ.get("STREAMKIT_KAFKA_HEARTBEAT_INTERVAL_MS", "1000"),
            **({"fetch.wait.max.ms": str(spec["fetch_max_wait_ms"])} if spec.get("fetch_max_wait_ms") is not None
               else {})}


def _bytes(function: Callable[..., bytes], *columns: Any) -> Any:
    return pw.apply_with_type(function, bytes, *columns)


class Progress:
    """What the pipeline reported (input rows read, rows passing S1's filter, the time the
    first minibatch with input opened) and what the watcher saw, shared between threads."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.read = 0
        self.passed = 0
        self.first_batch_perf: Optional[float] = None
        self.joining_until_perf: Optional[float] = None
        self.done_perf: Optional[float] = None
        self.done_cpu: Optional[float] = None
        self.watcher_cpu = 0.0
        self.failure: Optional[str] = None

    def on_input_count(self, key: Any, row: dict, time: int, is_addition: bool) -> None:
        """Subscription to the input's running count: ``time`` is the minibatch's opening (wall ms)."""
        if not is_addition:
            return
        if self.first_batch_perf is None and row["read"] > 0:
            self.first_batch_perf = _perf_at_wall(time / 1000)
        self.read, self.passed = row["read"], row["passed"]


def _perf_at_wall(wall: float) -> float:
    """The ``time.perf_counter()`` reading of the wall-clock instant ``wall``."""
    return time.perf_counter() - (time.time() - wall)


def build(spec: dict, progress: Progress) -> str:
    """Define the scenario's pipeline (S0 .. S4); return how the watcher recognizes the
    complete output: ``records`` (a count of records) or ``finals`` (the last updates sum to N)."""
    scenario = spec["scenario"]
    commit_ms = int(spec["commit_interval_s"] * 1000)
    if scenario == "S0":
        # raw, with a key of Pathway's own per record: by default the message key would be
        # the row's primary key, and each event would replace its page's previous one.
        raw = pw.io.kafka.read(kafka_settings(spec), topic=spec["source"], format="raw", autogenerate_key=True,
                               autocommit_duration_ms=commit_ms)
        pw.io.subscribe(raw.reduce(read=pw.reducers.count(), passed=pw.reducers.count()), progress.on_input_count)
        pw.io.kafka.write(raw, {"bootstrap.servers": spec["bootstrap"]}, spec["sink"], format="raw",
                          key=raw.key, value=raw.data)
        return "records"
    events = pw.io.kafka.read(kafka_settings(spec), topic=spec["source"], schema=Event, format="json",
                              autocommit_duration_ms=commit_ms)
    pw.io.subscribe(events.reduce(read=pw.reducers.count(),
                                  passed=pw.reducers.sum(pw.if_else(pw.this.amount > 10, 1, 0))),
                    progress.on_input_count)
    if scenario == "S1":
        kept = events.filter(pw.this.amount > 10)
        out = kept.select(key=_bytes(str.encode, pw.this.page),
                          value=_bytes(lambda user, page, ts, amount: compact_json(filter_map_value(
                              {"user": user, "page": page, "ts": ts, "amount": amount})),
                              pw.this.user, pw.this.page, pw.this.ts, pw.this.amount))
        complete = "records"
    elif scenario == "S2":
        counts = events.groupby(pw.this.page).reduce(pw.this.page, count=pw.reducers.count()).to_stream()
        out = counts.filter(pw.this.is_upsert).select(key=_bytes(str.encode, pw.this.page),
                                                       value=_bytes(compact_json, pw.this.count))
        complete = "finals"
    elif scenario == "S3":
        windows = events.windowby(pw.this.ts, window=pw.temporal.tumbling(duration=WINDOW_MS, origin=0),
                                  instance=pw.this.page)
        counts = windows.reduce(page=pw.this._pw_instance, start=pw.this._pw_window_start,
                                count=pw.reducers.count()).to_stream()
        out = counts.filter(pw.this.is_upsert).select(
            key=_bytes(str.encode, pw.this.page),
            value=_bytes(lambda start, count: compact_json({"start": start, "count": count}),
                         pw.this.start, pw.this.count))
        complete = "finals"
    elif scenario == "S4":
        # The table, keyed by the message key (the page): Pathway's raw reader upserts by it.
        rows = pw.io.kafka.read(kafka_settings(spec, "-pages"), topic=spec["table"], format="raw",
                                autocommit_duration_ms=commit_ms)
        pages = rows.select(page=pw.apply_with_type(bytes.decode, str, pw.this.key),
                            row=pw.apply_with_type(orjson.loads, pw.Json, pw.this.data))
        # An inner join of append-only inputs: an event read before its page's row joins
        # when the row arrives, once, with nothing to retract.
        joined = events.join(pages, events.page == pages.page).select(
            *pw.left, row=pw.right.row).to_stream()
        out = joined.filter(pw.this.is_upsert).select(
            key=_bytes(str.encode, pw.this.page),
            value=_bytes(lambda user, page, ts, amount, row: compact_json(enrich_value(
                {"user": user, "page": page, "ts": ts, "amount": amount}, row.value)),
                pw.this.user, pw.this.page, pw.this.ts, pw.this.amount, pw.this.row))
        complete = "records"
    else:
        raise ValueError(f"Pathway runs S0 .. S4, not {scenario}")
    pw.io.kafka.write(out, {"bootstrap.servers": spec["bootstrap"]}, spec["sink"], format="raw",
                      key=out.key, value=out.value)
    return complete


def last_moment_before_join(spec: dict, progress: Progress) -> float:
    """The last moment (``perf_counter``) the input reader's consumer group was seen not yet
    stable: Pathway's reader joins its group before its first fetch, so this moment is
    before the first record was read (-inf when it was never seen joining). Polled every
    ``JOIN_POLL_S``."""
    from confluent_kafka import ConsumerGroupState, KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": spec["bootstrap"]})
    before = float("-inf")  # never seen joining: no bound from the group
    deadline = time.monotonic() + IDLE_STOP_S
    while progress.read == 0 and time.monotonic() < deadline:
        try:
            description = admin.describe_consumer_groups([spec["app_id"]])[spec["app_id"]].result(timeout=10)
            joined = description.state == ConsumerGroupState.STABLE
        except KafkaException:
            # A fresh broker creates __consumer_offsets on the first group request: until its
            # coordinator is up, no group (the reader's included) can have joined.
            joined = False
        if joined:
            break
        before = time.perf_counter()
        time.sleep(JOIN_POLL_S)
    return before


def watch_output(spec: dict, complete: str, progress: Progress, stop: Callable[[], None]) -> None:
    """Consume the output topic until it holds the complete result (see the module
    docstring), note the time and CPU, then stop Pathway. Stops and records a failure when
    nothing moved for ``IDLE_STOP_S``."""
    from confluent_kafka import Consumer, TopicPartition

    cpu_started = time.thread_time()
    consumer = None
    try:
        progress.joining_until_perf = last_moment_before_join(spec, progress)
        consumer = Consumer({"bootstrap.servers": spec["bootstrap"], "group.id": spec["app_id"] + "-watcher",
                             "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        consumer.assign([TopicPartition(spec["sink"], p, 0) for p in range(PARTITIONS)])
        records, finals, seen, since = 0, {}, (-1, -1), time.monotonic()
        while True:
            for message in consumer.consume(10_000, 0.05):
                if message.error() is not None:
                    raise RuntimeError(f"reading the output {message.topic()} partition {message.partition()}: "
                                       f"{message.error()}")
                records += 1
                if complete == "finals":
                    update = orjson.loads(message.value())
                    if isinstance(update, dict):  # S3: the (page, window)'s count
                        finals[message.key(), update["start"]] = update["count"]
                    else:  # S2: the page's count
                        finals[message.key()] = update
            all_read = progress.read >= progress.expected
            if complete == "finals":
                done = all_read and sum(finals.values()) >= progress.expected
            else:
                target = progress.expected if spec["scenario"] in ("S0", "S4") else progress.passed
                done = all_read and records >= target
            if done:
                progress.done_perf = time.perf_counter()
                progress.watcher_cpu = time.thread_time() - cpu_started
                progress.done_cpu = time.process_time()
                return
            if (progress.read, records) != seen:
                seen, since = (progress.read, records), time.monotonic()
            elif time.monotonic() - since > IDLE_STOP_S:
                progress.failure = (f"no progress for {IDLE_STOP_S:.0f} s: read {progress.read:,} of "
                                    f"{progress.expected:,} input records, {records:,} output records")
                return
    except Exception as exc:  # noqa: BLE001 - reported as the run's failure
        progress.failure = f"{type(exc).__name__}: {exc}"
    finally:
        if consumer is not None:
            consumer.close()
        stop()


def window_figures(spec: dict, progress: Progress, started: float, cpu_before_run: float) -> dict:
    """The figures of the complete window (see the module docstring); raises when there was none."""
    if progress.failure is not None:
        raise RuntimeError(f"Pathway {spec['scenario']}: {progress.failure}")
    if None in (progress.first_batch_perf, progress.joining_until_perf, progress.done_perf, progress.done_cpu):
        raise RuntimeError(f"Pathway {spec['scenario']}: stopped before a complete window")
    first_read_not_before = max(progress.first_batch_perf, progress.joining_until_perf)
    return {"seconds": progress.done_perf - first_read_not_before,
            "startup_seconds": first_read_not_before - started,
            "cpu_seconds": progress.done_cpu - cpu_before_run - progress.watcher_cpu,
            "records": progress.read, "peak_rss_mib": peak_rss_mib()}


def run(spec: dict, probe: Probe) -> None:
    started = time.perf_counter()
    progress = Progress(spec["events"])
    complete = build(spec, progress)
    if spec.get("fetch_max_wait_ms") is not None:
        # A latency run (bench.peers.latency): endless input, no window; runs until SIGTERM.
        pw.run(monitoring_level=pw.MonitoringLevel.NONE)
        return
    stopping = threading.Event()
    returned = threading.Event()
    cpu_before_run = time.process_time()

    def stop() -> None:
        stopping.set()
        os.kill(os.getpid(), signal.SIGINT)
        if returned.wait(STOP_GRACE_S):
            return
        # pw.run ignores a SIGINT that lands before its engine set up its signal handling.
        # The window is measured (or failed) already: end the process here, printing the
        # figures as the last line of stdout as bench.peers.child does.
        # Written straight to the file descriptors: no lock that a stuck thread may hold.
        os.write(2, f"pw.run did not return {STOP_GRACE_S:.0f} s after SIGINT: ending the process\n".encode())
        try:
            figures = window_figures(spec, progress, started, cpu_before_run)
        except RuntimeError as exc:
            os.write(2, f"{exc}\n".encode())
            os._exit(1)
        os.write(1, f"\n{json.dumps(figures)}\n".encode())
        os._exit(0)

    watcher = threading.Thread(target=watch_output, args=(spec, complete, progress, stop), daemon=True)
    try:
        watcher.start()
        pw.run(monitoring_level=pw.MonitoringLevel.NONE)
    except KeyboardInterrupt:
        if not stopping.is_set():
            raise
    finally:
        returned.set()
    watcher.join()
    probe.measured_elsewhere(window_figures(spec, progress, started, cpu_before_run))
    log.info("first minibatch with input opened %.3f s after start, group joining until %.3f s, complete output "
             "seen at %.3f s", progress.first_batch_perf - started, progress.joining_until_perf - started,
             progress.done_perf - started)
