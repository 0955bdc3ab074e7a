"""faust-streaming: the scenarios as a faust user writes them (one agent per scenario, RocksDB
tables through rocksdict), run in-process by ``faust.Worker`` as ``faust worker`` runs them.

How the probe sees faust:

* fetches: faust's aiokafka driver does not call ``AIOKafkaConsumer.getmany``/``getone``: its
  consumer thread calls ``consumer._fetcher.fetched_records(...)`` directly
  (``AIOKafkaConsumerThread._fetch_records``), so ``Probe.count_aiokafka_fetches`` would see
  nothing. The records are counted where the consumer thread hands them to the main loop
  (``ThreadDelegateConsumer._getmany``), once per offset (a re-fetch after a seek is not
  counted twice).
* commits: ``Consumer._commit_offsets`` flushes the producer (every output and changelog
  record acknowledged) and then commits the offsets (under exactly_once: commits the
  transactions); it is timed as one commit. faust commits only *acked* offsets, and records
  are acked when the agent finished them, which may be well after they were fetched: a commit
  counts as the covering one only if its offsets reach every fetched offset. (With a table,
  the flush first waits until faust's ProducerBuffer of changelog records is empty, which it
  is not while the agent keeps updating the table: a periodic commit then runs until the
  input runs dry -- mode warns "Timer commit is overlapping".)
* stop: faust's graceful stop (SIGTERM) drops what is still queued in the agents' buffers
  (``App._stop_consumer`` calls ``flow_control.clear()``). So once every input record was
  fetched, the worker is sent SIGTERM when the agent has finished the last of them; the stop
  then waits for the acks, commits (the covering commit), flushes and leaves the group.
"""
from __future__ import annotations

import asyncio
import importlib.metadata
import logging
import math
import os
import signal
import sys
import time
from datetime import timedelta
from typing import Any, Callable, Dict, Mapping, Optional

from bench.peers.frameworks import transactions_missing
from bench.peers.probe import Probe
from bench.peers.workload import PARTITIONS, WINDOW_MS, Scenario, filter_map_value

NAME = "faust-streaming"

log = logging.getLogger("bench.peers.faust")


def version() -> str:
    return (f"faust-streaming {importlib.metadata.version('faust-streaming')} "
            f"(aiokafka {importlib.metadata.version('aiokafka')})")


def unsupported(scenario: Scenario, transactions: bool) -> Optional[str]:
    if scenario.table:
        # A Table lookup inside the agent is not a join: no co-partitioning check, no
        # stream-time semantics, no waiting for the table to be loaded.
        return "n/a: faust has no joins"
    return transactions_missing(scenario, transactions)


class _Control:
    """Counts what the agent finished and stops the worker once it finished every fetched record."""

    def __init__(self, probe: Probe, stop: Callable[[], None]) -> None:
        self.probe = probe
        self.stop = stop
        self.processed = 0
        self.goal: float = math.inf  # the agent's target: set once every input record was fetched
        self.stopping = False

    def finished_one(self) -> None:
        """The agent finished an input record (it is acked when the agent takes the next one)."""
        self.processed += 1
        if self.processed >= self.goal:
            self.check()

    def all_fetched(self) -> None:
        self.goal = self.probe.fetched_records
        self.check()

    def check(self) -> None:
        if self.processed >= self.goal and not self.stopping:
            self.stopping = True
            self.stop()


def build_app(spec: dict, control: _Control) -> Any:
    """The faust app of ``spec["scenario"]`` (S0 .. S3, S5)."""
    import faust

    scenario = spec["scenario"]
    app = faust.App(
        spec["app_id"],  # also the consumer group
        broker=f"kafka://{spec['bootstrap']}",
        # RocksDB through rocksdict: faust-streaming has no "rocksdict://" store URL (its store
        # registry knows memory://, rocksdb://, aerospike://; "rocksdict://" falls through to
        # importing the rocksdict *module* as the store class). rocksdb:// picks the rocksdict
        # driver when python-rocksdb is absent; each table also asks for it explicitly.
        store="rocksdb://",
        datadir=os.path.join(spec["state_dir"], "faust"),
        autodiscover=False,
        web_enabled=False,  # no HTTP server in the benchmark process
        topic_partitions=PARTITIONS,  # changelog topics get 3 partitions, as the source
        topic_replication_factor=1,
        processing_guarantee="exactly_once" if spec["scenario"] == "S5" else "at_least_once",
        # Commits: every commit_interval_s only, as every framework in the benchmark.
        # faust's default also commits every 10,000 acked records (broker_commit_every),
        # each commit waiting for every in-flight output; the interval alone is the setting
        # the other frameworks get.
        broker_commit_interval=spec.get("commit_interval_s", 2.8),
        broker_commit_every=1 << 62,
        # Group timing of the other clients (faust's default 60 s session makes the first
        # join on Tansu take ~30 s, untimed but slow).
        broker_session_timeout=int(os.environ.get("STREAMKIT_KAFKA_SESSION_TIMEOUT_MS", 6000)) / 1000,
        broker_heartbeat_interval=int(os.environ.get("STREAMKIT_KAFKA_HEARTBEAT_INTERVAL_MS", 1000)) / 1000,
        consumer_auto_offset_reset="earliest",
        # acks=all as every producer in the benchmark; no idempotence (faust enables it only
        # under exactly_once; Tansu has no InitProducerId).
        producer_acks=-1,
        # Batching as the other producers (streamkit's and the raw loop's linger of 5 ms and
        # 1 MiB batches; librdkafka's, so Quix's, linger is 5 ms too): faust's default linger of
        # 0 makes aiokafka send a produce request for almost every record.
        producer_linger=0.005,
        producer_max_batch_size=1 << 20,
        # One worker: no standby replicas to keep.
        table_standby_replicas=0,
    )
    # Source: raw key bytes; values decoded by faust's json codec (orjson when installed),
    # plain dicts (no faust.Record: decoding into models costs more and buys nothing here).
    # S0 forwards the bytes untouched. str keys for the windowed table (its store key is
    # JSON: (key, (start, end))).
    raw_values = scenario == "S0"
    source = app.topic(spec["source"], partitions=PARTITIONS,
                       key_type=str if scenario == "S3" else bytes, key_serializer="raw",
                       value_serializer="raw" if raw_values else "json")
    sink = app.topic(spec["sink"], partitions=PARTITIONS, key_serializer="raw",
                     value_serializer="raw" if raw_values else "json")
    table_options = {"driver": "rocksdict"}

    if scenario == "S0":
        @app.agent(source)
        async def passthrough(stream: Any) -> None:
            async for key, value in stream.items():
                await sink.send(key=key, value=value)
                control.finished_one()

    elif scenario == "S1":
        @app.agent(source)
        async def filter_map(stream: Any) -> None:
            async for key, value in stream.items():
                out = filter_map_value(value)
                if out is not None:
                    await sink.send(key=key, value=out)
                control.finished_one()

    elif scenario in ("S2", "S5"):
        counts = app.Table("counts", default=int, key_type=bytes, value_type=int, partitions=PARTITIONS,
                           options=table_options)

        @app.agent(source)
        async def count(stream: Any) -> None:
            async for key, _value in stream.items():
                n = counts[key] + 1
                counts[key] = n
                await sink.send(key=key, value=n)
                control.finished_one()

    elif scenario == "S3":
        # Event time: the value's "ts" (ms), read as relative_to_field(Model.ts) reads a Record
        # field (Table._relative_field is field.getattr(event.value)); faust windows are in float
        # seconds. expires=None: faust expires windows by the wall clock
        # (Table._del_old_keys: window.stale(start, time.time())), which would drop these 2023
        # windows at once. faust has no grace period: windows never close here (every event of
        # the workload is within the 10 s grace, so none is dropped either way). The window
        # start written is faust's own (window.current(ts)[0], exact in float seconds).
        window_counts = app.Table("window-counts", default=int, key_type=str, value_type=int,
                                  partitions=PARTITIONS, options=table_options)
        windowed = (window_counts.tumbling(timedelta(milliseconds=WINDOW_MS), expires=None)
                    .relative_to(lambda event: event.value["ts"] / 1000.0))
        window = window_counts.window  # tumbling() set it on the table

        @app.agent(source)
        async def window_count(stream: Any) -> None:
            async for key, value in stream.items():
                windowed[key] += 1
                n = windowed[key].value()  # the window of this event's "ts"
                start = window.current(value["ts"] / 1000.0)[0]
                await sink.send(key=key, value={"start": round(start * 1000), "count": n})
                control.finished_one()

    else:
        raise ValueError(f"faust cannot run {scenario}")
    return app


def instrument(source: str, probe: Probe) -> None:
    """Report faust's fetches of ``source`` and its offset commits to ``probe`` (see the module doc)."""
    from faust.transport.drivers.aiokafka import Consumer

    fetched_to: Dict[int, int] = {}  # partition -> next offset after the last record fetched

    getmany = Consumer._getmany

    async def counted_getmany(self: Any, active_partitions: Any, timeout: float) -> Mapping[Any, Any]:
        records = await getmany(self, active_partitions, timeout)
        n = 0
        for tp, batch in records.items():
            if tp.topic != source or not batch:
                continue
            seen = fetched_to.get(tp.partition, 0)
            n += len(batch) if batch[0].offset >= seen else sum(1 for r in batch if r.offset >= seen)
            fetched_to[tp.partition] = max(seen, batch[-1].offset + 1)
        probe.fetched(n)
        return records

    commit_offsets = Consumer._commit_offsets

    async def timed_commit_offsets(self: Any, offsets: Mapping[Any, int], start_new_transaction: bool = True) -> bool:
        committing = {tp.partition: offset for tp, offset in offsets.items() if tp.topic == source}
        covered = {tp.partition: offset for tp, offset in self._committed_offset.items()
                   if tp.topic == source and offset is not None}
        covered.update(committing)
        token = probe.commit_started() and all(covered.get(p, 0) >= end for p, end in fetched_to.items())
        did_commit = await commit_offsets(self, offsets, start_new_transaction=start_new_transaction)
        if did_commit:
            probe.commit_finished(token)
        return did_commit

    Consumer._getmany = counted_getmany  # type: ignore[method-assign]
    Consumer._commit_offsets = timed_commit_offsets  # type: ignore[method-assign]


def set_fetch_max_wait(ms: int) -> None:
    """Let the broker hold an empty fetch ``ms`` at most (the latency benchmark's
    ``fetch_max_wait_ms``). faust hard-codes ``fetch_max_wait_ms=1500`` when it creates its
    aiokafka consumer and has no setting for it; on Tansu, which answers a fetch at the end of
    the log only when that wait expires, it would be the latency."""
    from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

    create = AIOKafkaConsumerThread._create_worker_consumer

    def create_worker_consumer(self: Any, transport: Any) -> Any:
        consumer = create(self, transport)
        consumer._fetch_max_wait_ms = ms  # read by AIOKafkaConsumer.start() when it builds its Fetcher
        return consumer

    AIOKafkaConsumerThread._create_worker_consumer = create_worker_consumer  # type: ignore[method-assign]


def _sigterm() -> None:
    """faust's graceful stop, as ``kill -TERM``: the worker's handler stops the app (wait for the
    acks, commit, flush, leave the group) and ``execute_from_commandline`` then shuts down."""
    signal.raise_signal(signal.SIGTERM)


async def _watchdog(control: _Control, idle_s: float) -> None:
    """Stop a run that makes no progress for ``idle_s`` (a crashed agent, lost records)."""
    last, since = -1, time.monotonic()
    while not control.stopping:
        await asyncio.sleep(1.0)
        progress = control.probe.fetched_records + control.processed
        if progress != last:
            last, since = progress, time.monotonic()
        elif time.monotonic() - since > idle_s:
            log.error("no progress for %.0f s (fetched %d, processed %d): stopping", idle_s,
                      control.probe.fetched_records, control.processed)
            control.stopping = True
            _sigterm()


def run(spec: dict, probe: Probe) -> None:
    """Run the scenario in a faust worker on a fresh event loop until the covering commit, then stop."""
    import faust

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    control = _Control(probe, _sigterm)
    app = build_app(spec, control)
    instrument(spec["source"], probe)
    if spec.get("fetch_max_wait_ms") is not None:
        set_fetch_max_wait(int(spec["fetch_max_wait_ms"]))
    probe.on_all_fetched = control.all_fetched
    worker = faust.Worker(
        app, loop=loop,
        override_logging=False,  # keep the child's logging set-up (WARNING unless verbose)
        redirect_stdouts=False,  # stdout's last line is the child's figures
        stdout=sys.stderr, quiet=True,  # no start-up banner on stdout
    )
    worker.spinner = None  # no progress spinner (terminal escapes) either
    loop.create_task(_watchdog(control, spec.get("safety_idle_s", 60.0)))
    try:
        worker.execute_from_commandline()  # returns by SystemExit once the worker stopped
    except SystemExit as exc:
        if exc.code not in (None, 0):
            raise RuntimeError(f"the faust worker exited with {exc.code}") from None
    finally:
        asyncio.set_event_loop(None)
