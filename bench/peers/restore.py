"""Time to restore a changelog into RocksDB: streamkit vs faust-streaming vs Quix Streams.

Each framework keeps the S2 store (a count per page, ``bench.peers.workload``) in RocksDB,
logged to a changelog topic. That changelog is pre-produced with ``records`` records
(1,000,000 by default: 100,000 pages ``page-0`` .. ``page-99999``, each updated
``records / 100,000`` times, record *i* holding the running count of page ``i % 100,000``)
in the exact format the framework writes itself, on one partition (the input topic has one
partition too: one task / store partition / changelog partition per framework; each restores
on one Python thread, so more partitions would add bookkeeping, not parallelism).
Then the framework's app starts in a fresh child process, with an empty state directory,
over an input topic holding no records, and restores the store:

  streamkit  a real ``Worker`` (``kafka://``); timed: the worker's restore phase, the call
             of ``restore_task_stores`` for the task (read the changelog's offsets, replay).
  faust      a real ``faust.Worker``; timed: from the Recovery service starting recovery
             (its first ``_set_recovery_started`` after the assignment: highwaters, offsets,
             seek, read and apply) to ``Recovery.on_recovery_completed`` ("Restore complete!").
  quix       a real ``Application.run()``; timed: from ``RecoveryManager.assign_partition``
             (its watermark query, after the store partition was opened) to the return of
             ``RecoveryManager.do_recovery`` ("Recovery process complete!").

Opening the RocksDB store, process start and the group join are not timed in any of them.
Every framework runs with its defaults for restore (faust: no progress spinner, which at
WARNING would set the root logger to DEBUG; Quix: no idempotence, Tansu has no InitProducerId).
After the window the restored store is read through the framework's own API (streamkit: the
task's store; faust: the Table; Quix: a transaction of the store partition, as ``State``
reads) and must hold exactly the 100,000 pages with their final counts; a framework that
fails raises and gets no figure. Peak RSS is the child's VmHWM at the end of the window.

Changelog formats, checked against each framework's own writer before timing (the
framework's app counts a dozen events, its changelog is read back and every record must
decode into (page, count, extra) and re-encode to the same key, value and header bytes):

  streamkit  topic ``<app id>-counts-changelog``; key: the page as JSON (``"page-7"``);
             value: 8-byte big-endian timestamp + the count as JSON; no headers.
  faust      topic ``<app id>-counts-changelog``; key: the page's raw bytes (the Table has
             ``key_type=bytes``); value: the count as JSON; no headers.
  quix       topic ``changelog__<group>--<input topic>--default``; key: ``page-7|"count"``
             (the message key as prefix, ``|``, the state key as JSON); value: the count as
             JSON; headers ``__column_family__: default`` and ``__processed_tp_offsets__:
             {"<input topic>": <offset>}``. Quix skips a record whose processed offset is not
             below the group's committed offset, so the group is given the offset ``records``
             on the (empty) input topic, as after processing the records that wrote it.

Tansu (``--broker tansu``; the default broker is a fresh Apache Kafka) reports a partition's
end offset as the base offset of its last record batch + 1: the last changelog record is
produced in a batch of its own, so the reported end is exact, and that is checked. The embedded line is
``bench.restore_throughput.measure`` (streamkit's restore from its embedded log) in a child
of its own, its store checked in full before it closes (it needs at least 100,000 records).

The machine's other load shows in the seconds: the table gives each window's CPU time and the
1-minute load average too; ``--reps`` reports the run of median duration.

Usage: python -m bench.peers.restore [--broker HOST:PORT] [--records N] [--frameworks a,b]
                                     [--reps R] [--no-format-check] [--json PATH] [--verbose]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from typing import Any, Callable, Dict, Iterator, List, Mapping, NamedTuple, Optional, Sequence, Tuple

import orjson

from bench.peers.probe import peak_rss_mib
from bench.peers.runner import child_env

log = logging.getLogger("bench.peers.restore")

FRAMEWORKS = ("streamkit", "faust", "quix")
KEYS = 100_000
START_MS = 1_700_000_000_000
FORMAT_CHECK_EVENTS = 12
FIGURES_MARK = "restore-figures: "
CHILD_TIMEOUT_S = 1800.0
QUIX_TOPIC_CONFIG = {"retention.ms": "604800000", "retention.bytes": "-1"}
"""Kafka's defaults, given explicitly: Quix derives its changelog's config from the input
topic's, and Tansu's DescribeConfigs returns only the configs a topic was created with."""
TIMED = {
    "streamkit": "Worker restore phase: restore_task_stores of the task (end offsets, replay into RocksDB)",
    "faust": "Recovery: first _set_recovery_started -> on_recovery_completed (highwaters, seek, read, apply)",
    "quix": "RecoveryManager.assign_partition (watermarks) -> do_recovery returns",
    "embedded": "bench.restore_throughput.measure: restore_task_stores from the embedded log",
}

Headers = List[Tuple[str, bytes]]
Record = Tuple[bytes, bytes, Headers]  # key, value, headers
Update = Tuple[str, int, int]  # page, count, extra (streamkit: the value's timestamp; quix: processed offset)


class VerificationError(AssertionError):
    """A restored store (or a changelog format) differs from what it must be: no figure."""


# -- changelog formats ------------------------------------------------------------------------
_TIMESTAMP = struct.Struct(">q")
_QUIX_STATE_KEY = b'|"count"'


def _streamkit_encode(page: str, count: int, extra: int, source: str) -> Record:
    return orjson.dumps(page), _TIMESTAMP.pack(extra) + b"%d" % count, []


def _streamkit_decode(key: bytes, value: bytes, headers: Headers, source: str) -> Update:
    assert not headers, f"unexpected headers {headers}"
    return orjson.loads(key), orjson.loads(value[8:]), _TIMESTAMP.unpack_from(value)[0]


def _faust_encode(page: str, count: int, extra: int, source: str) -> Record:
    return page.encode(), b"%d" % count, []


def _faust_decode(key: bytes, value: bytes, headers: Headers, source: str) -> Update:
    assert not headers, f"unexpected headers {headers}"
    return key.decode(), orjson.loads(value), 0


def _quix_encode(page: str, count: int, extra: int, source: str) -> Record:
    headers = [("__column_family__", b"default"), ("__processed_tp_offsets__", orjson.dumps({source: extra}))]
    return page.encode() + _QUIX_STATE_KEY, b"%d" % count, headers


def _quix_decode(key: bytes, value: bytes, headers: Headers, source: str) -> Update:
    assert key.endswith(_QUIX_STATE_KEY), f"key {key!r} is not <page>|\"count\""
    processed = orjson.loads(dict(headers)["__processed_tp_offsets__"])
    assert list(processed) == [source], f"processed offsets {processed} are not of {source}"
    return key[:-len(_QUIX_STATE_KEY)].decode(), orjson.loads(value), processed[source]


class ChangelogFormat(NamedTuple):
    topic: Callable[[str, str], str]  # (app id / group, input topic) -> changelog topic
    encode: Callable[[str, int, int, str], Record]  # (page, count, extra, input topic)
    decode: Callable[[bytes, bytes, Headers, str], Update]  # strict: raises on anything else
    extra: Callable[[int], int]  # record index -> the extra of the pre-produced record


FORMATS: Dict[str, ChangelogFormat] = {
    "streamkit": ChangelogFormat(lambda app_id, source: f"{app_id}-counts-changelog", _streamkit_encode,
                                 _streamkit_decode, lambda i: START_MS + i),
    "faust": ChangelogFormat(lambda app_id, source: f"{app_id}-counts-changelog", _faust_encode, _faust_decode,
                             lambda i: 0),
    "quix": ChangelogFormat(lambda app_id, source: f"changelog__{app_id}--{source}--default", _quix_encode,
                            _quix_decode, lambda i: i),
}


def extra_topics(framework: str, app_id: str) -> List[str]:
    """Topics the framework uses besides its input and changelog (created up front: Tansu
    would auto-create them with 4 partitions)."""
    return [f"{app_id}-__assignor-__leader"] if framework == "faust" else []


def updates(records: int, keys: int) -> Iterator[Tuple[str, int]]:
    """The changelog's content: record i is the running count of page ``i % keys``."""
    for i in range(records):
        yield f"page-{i % keys}", i // keys + 1


def expected_counts(records: int, keys: int, prefix: str = "page-") -> Dict[str, int]:
    """Each page's final count after ``records`` updates."""
    return {f"{prefix}{k}": records // keys + (1 if k < records % keys else 0) for k in range(min(keys, records))}


def check_restored(framework: str, got: Mapping[str, int], expected: Mapping[str, int]) -> None:
    """Raise :class:`VerificationError` unless ``got`` holds exactly ``expected``."""
    if dict(got) == dict(expected):
        return
    missing = [k for k in expected if k not in got]
    extra = [k for k in got if k not in expected]
    wrong = [(k, got[k], v) for k, v in expected.items() if k in got and got[k] != v]
    raise VerificationError(
        f"{framework}: the restored store differs from the changelog's final state: {len(got):,} keys "
        f"(expected {len(expected):,}); {len(missing):,} missing (e.g. {missing[:3]}), {len(extra):,} "
        f"unexpected (e.g. {extra[:3]}), {len(wrong):,} with wrong counts (key, got, expected: {wrong[:3]})")


# -- broker side (parent) -----------------------------------------------------------------------
async def create_topics(bootstrap: str, topics: Mapping[str, Mapping[str, str]]) -> None:
    """Create each topic with one partition and its configs."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, 1, 1, topic_configs=dict(config))
                                   for name, config in topics.items()])
    finally:
        await admin.close()


async def delete_topics(bootstrap: str, run_id: str) -> None:
    """Delete every topic whose name contains ``run_id`` (Tansu keeps them in memory)."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        names = [t for t in await admin.list_topics() if run_id in t]
        if names:
            await admin.delete_topics(names)
    finally:
        await admin.close()


async def produce_changelog(bootstrap: str, topic: str, records: Iterator[Tuple[Record, int]], total: int) -> None:
    """Write ``(record, timestamp)`` pairs to partition 0 in large batches, the last record in
    a batch of its own (Tansu reports the end offset as its last batch's base offset + 1), then
    check the end offset the broker reports."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", max_batch_size=1 << 20,
                                max_request_size=1 << 21)
    await producer.start()
    try:
        acks = []
        builder = producer.create_batch()
        for n, ((key, value, headers), timestamp) in enumerate(records, 1):
            if n == total:  # the last record: flush everything before, then send it alone
                if builder.record_count():
                    acks.append(await producer.send_batch(builder, topic, partition=0))
                await asyncio.gather(*acks)
                acks, builder = [], producer.create_batch()
            if builder.append(key=key, value=value, timestamp=timestamp, headers=headers) is None:
                acks.append(await producer.send_batch(builder, topic, partition=0))
                builder = producer.create_batch()
                builder.append(key=key, value=value, timestamp=timestamp, headers=headers)
        if builder.record_count():
            acks.append(await producer.send_batch(builder, topic, partition=0))
        await asyncio.gather(*acks)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        end = (await consumer.end_offsets([tp]))[tp]
    finally:
        await consumer.stop()
    if end != total:
        raise RuntimeError(f"{topic}: the broker reports the end offset {end:,} after {total:,} records")


async def read_changelog(bootstrap: str, topic: str, settle: float = 2.0) -> List[Record]:
    """Every record of partition 0 of ``topic``, read until nothing came for ``settle`` s."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    out: List[Record] = []
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        last = time.monotonic()
        while time.monotonic() - last < settle:
            data = await consumer.getmany(timeout_ms=200)
            for r in data.get(tp, []):
                out.append((r.key, r.value, [(name, bytes(value)) for name, value in r.headers]))
                last = time.monotonic()
    finally:
        await consumer.stop()
    return out


async def commit_offset(bootstrap: str, group: str, topic: str, offset: int) -> None:
    """Commit ``offset`` on partition 0 of ``topic`` for ``group`` (no member in it)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.commit({tp: offset})
    finally:
        await consumer.stop()


async def produce_events(bootstrap: str, topic: str, events: Sequence[Tuple[bytes, bytes, int]]) -> None:
    """Write ``(key, value, timestamp)`` events to partition 0, in order."""
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        for key, value, ts in events:
            await producer.send(topic, value=value, key=key, partition=0, timestamp_ms=ts)
        await producer.flush()
    finally:
        await producer.stop()


def run_child(spec: dict) -> dict:
    """Run ``python -m bench.peers.restore --child SPEC``; return the figures it printed."""
    command = [sys.executable, "-m", "bench.peers.restore", "--child", json.dumps(spec)]
    out = subprocess.run(command, capture_output=True, text=True, check=False, env=child_env(),
                         timeout=CHILD_TIMEOUT_S)
    if spec.get("verbose") and out.stderr:
        sys.stderr.write(out.stderr)
    if out.returncode != 0:
        tail = out.stderr[-4000:]
        error = VerificationError if "VerificationError" in tail else RuntimeError
        raise error(f"{spec['framework']} ({spec['mode']}): child exited {out.returncode}:\n{tail}")
    lines = [line for line in out.stdout.splitlines() if line.startswith(FIGURES_MARK)]
    if not lines:
        raise RuntimeError(f"{spec['framework']} ({spec['mode']}): the child printed no figures:\n{out.stdout[-2000:]}")
    return json.loads(lines[-1][len(FIGURES_MARK):])


def _topics_of(framework: str, run_id: str, source: str) -> Dict[str, Dict[str, str]]:
    changelog = FORMATS[framework].topic(run_id, source)
    base = QUIX_TOPIC_CONFIG if framework == "quix" else {}
    topics = {source: dict(base), changelog: {**base, "cleanup.policy": "compact"}}
    topics.update({name: {} for name in extra_topics(framework, run_id)})
    return topics


def check_format(framework: str, bootstrap: str, *, verbose: bool = False) -> int:
    """Run the framework's app over a dozen events, read the changelog it wrote and check that
    every record re-encodes to the same bytes and the final counts are right; return the
    number of records compared."""
    from bench.peers.workload import make_events

    fmt = FORMATS[framework]
    run_id = f"restore-fmt-{framework}-{uuid.uuid4().hex[:8]}"
    source = f"{run_id}-events"
    changelog = fmt.topic(run_id, source)
    # Three pages, four updates each (counts 1 .. 4), values and timestamps of the workload's events.
    events = [(f"page-{i % 3}".encode(), value, ts)
              for i, (_, value, ts) in enumerate(make_events(FORMAT_CHECK_EVENTS))]
    expected = Counter(key.decode() for key, _, _ in events)
    state_dir = tempfile.mkdtemp(prefix=f"sk-restore-fmt-{framework}-")
    try:
        asyncio.run(create_topics(bootstrap, _topics_of(framework, run_id, source)))
        asyncio.run(produce_events(bootstrap, source, events))
        run_child({"framework": framework, "mode": "write", "bootstrap": bootstrap, "app_id": run_id,
                   "source": source, "state_dir": state_dir, "events": len(events), "verbose": verbose})
        written = asyncio.run(read_changelog(bootstrap, changelog))
        if not written:
            raise VerificationError(f"{framework}: its app wrote no changelog record to {changelog}")
        final: Dict[str, int] = {}
        for key, value, headers in written:
            try:
                page, count, extra = fmt.decode(key, value, headers, source)
            except Exception as exc:
                raise VerificationError(f"{framework}: a changelog record its app wrote does not decode in the "
                                        f"assumed format ({exc!r}): {(key, value, headers)}") from None
            if fmt.encode(page, count, extra, source) != (key, value, headers):
                raise VerificationError(f"{framework}: the assumed format encodes {(page, count, extra)} as "
                                        f"{fmt.encode(page, count, extra, source)}, its app wrote "
                                        f"{(key, value, headers)}")
            final[page] = count
        check_restored(f"{framework} changelog writer", final, expected)
        log.info("%s: changelog format checked against %d record(s) its app wrote to %s", framework,
                 len(written), changelog)
        return len(written)
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)
        asyncio.run(delete_topics(bootstrap, run_id))


def restore_once(framework: str, bootstrap: str, records: int, *, keys: int = KEYS, verbose: bool = False) -> dict:
    """Pre-produce the framework's changelog, run its timed restore in a child, return its figures."""
    fmt = FORMATS[framework]
    run_id = f"restore-{framework}-{uuid.uuid4().hex[:8]}"
    source = f"{run_id}-events"
    changelog = fmt.topic(run_id, source)
    state_dir = tempfile.mkdtemp(prefix=f"sk-restore-{framework}-")
    try:
        asyncio.run(create_topics(bootstrap, _topics_of(framework, run_id, source)))
        started = time.perf_counter()
        pairs = ((fmt.encode(page, count, fmt.extra(i), source), START_MS + i)
                 for i, (page, count) in enumerate(updates(records, keys)))
        asyncio.run(produce_changelog(bootstrap, changelog, pairs, records))
        if framework == "quix":
            asyncio.run(commit_offset(bootstrap, run_id, source, records))
        log.info("%s: produced %s records to %s in %.1f s", framework, f"{records:,}", changelog,
                 time.perf_counter() - started)
        figures = run_child({"framework": framework, "mode": "restore", "bootstrap": bootstrap, "app_id": run_id,
                             "source": source, "state_dir": state_dir, "records": records, "keys": keys,
                             "verbose": verbose})
        if figures.get("verified") is not True:
            raise VerificationError(f"{framework}: the child did not verify its store: {figures}")
        if figures.get("replayed", records) != records:
            raise VerificationError(f"{framework}: replayed {figures['replayed']:,} of {records:,} records")
        figures["records"] = records
        figures["records_per_second"] = records / figures["seconds"]
        figures["records_per_cpu_second"] = records / max(figures["cpu_seconds"], 1e-9)
        figures["timed"] = TIMED[framework]
        log.info("%s: restored %s records in %.2f s (%.0f records/s), peak RSS %.0f MiB (verified)", framework,
                 f"{records:,}", figures["seconds"], figures["records_per_second"], figures["peak_rss_mib"])
        return figures
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)
        try:
            asyncio.run(delete_topics(bootstrap, run_id))
        except Exception as exc:  # noqa: BLE001 - clean-up is best-effort
            log.warning("could not delete the topics of %s: %s", run_id, exc)


def measure_embedded(records: int, *, verbose: bool = False) -> dict:
    """``bench.restore_throughput.measure`` in a child, its store checked in full."""
    figures = run_child({"framework": "embedded", "mode": "restore", "records": records, "verbose": verbose})
    if figures.get("verified") is not True:
        raise VerificationError(f"embedded: the child did not verify its store: {figures}")
    figures["records_per_cpu_second"] = records / max(figures["cpu_seconds"], 1e-9)
    figures["timed"] = TIMED["embedded"]
    return figures


def summarize(runs: List[dict]) -> dict:
    """The run of median duration, with every run's seconds and the highest peak RSS."""
    ordered = sorted(runs, key=lambda run: run["seconds"])
    figures = dict(ordered[(len(ordered) - 1) // 2])
    figures["reps_seconds"] = [run["seconds"] for run in runs]
    figures["peak_rss_mib"] = max(run["peak_rss_mib"] for run in runs)
    return figures


def measure(bootstrap: Optional[str] = None, records: int = 1_000_000,
            frameworks: Sequence[str] = FRAMEWORKS, *, reps: int = 1, check_formats: bool = True,
            verbose: bool = False) -> dict:
    """Verified restore figures per framework (``embedded`` too when streamkit is asked for):
    ``{"seconds", "records_per_second", "peak_rss_mib", "verified": True, ...}`` of the median of
    ``reps`` runs. Starts a fresh Apache Kafka when ``bootstrap`` is None (a Tansu for
    ``"tansu"``; :func:`bench.kafka_throughput.open_broker`). Raises
    :class:`VerificationError` when a framework's restored store (or its changelog format) is wrong."""
    unknown = set(frameworks) - set(FRAMEWORKS) - {"embedded"}
    if unknown:
        raise ValueError(f"unknown framework(s) {sorted(unknown)}: use {', '.join(FRAMEWORKS)}, embedded")
    results: Dict[str, dict] = {}
    kafka = [f for f in FRAMEWORKS if f in frameworks]
    broker = None
    if kafka and (bootstrap is None or bootstrap == "tansu"):
        from bench.kafka_throughput import open_broker

        broker = open_broker(bootstrap)
        bootstrap = broker.bootstrap
    try:
        for framework in kafka:
            assert bootstrap is not None
            if check_formats:
                checked = check_format(framework, bootstrap, verbose=verbose)
            results[framework] = summarize([restore_once(framework, bootstrap, records, verbose=verbose)
                                            for _ in range(reps)])
            if check_formats:
                results[framework]["format_checked_records"] = checked
    finally:
        if broker is not None:
            broker.stop()
    if ("streamkit" in frameworks or "embedded" in frameworks) and records < KEYS:
        # bench.restore_throughput's own check reads key-99999, which fewer records do not write.
        log.warning("embedded: skipped, bench.restore_throughput needs at least %s records", f"{KEYS:,}")
    elif "streamkit" in frameworks or "embedded" in frameworks:
        results["embedded"] = summarize([measure_embedded(records, verbose=verbose) for _ in range(reps)])
    return results


# -- the child: one framework, one restore ---------------------------------------------------------
class Window:
    """The timed window inside the child."""

    def __init__(self) -> None:
        self.process_started = time.perf_counter()
        self.started: Optional[float] = None
        self.ended: Optional[float] = None
        self.cpu: List[float] = []
        self.peak_rss_mib: Optional[float] = None
        self.load: Optional[float] = None

    def start(self) -> None:
        if self.started is None:
            self.started = time.perf_counter()
            self.cpu.append(time.process_time())

    def end(self) -> bool:
        """Close the window (once); True if this call closed it."""
        if self.started is None or self.ended is not None:
            return False
        self.ended = time.perf_counter()
        self.cpu.append(time.process_time())
        self.peak_rss_mib = peak_rss_mib()
        self.load = os.getloadavg()[0]
        return True

    def figures(self, **extra: Any) -> dict:
        if self.started is None or self.ended is None or self.peak_rss_mib is None:
            raise RuntimeError("the restore was not observed from start to end: no figures")
        return {"seconds": self.ended - self.started, "cpu_seconds": self.cpu[1] - self.cpu[0],
                "startup_seconds": self.started - self.process_started, "peak_rss_mib": self.peak_rss_mib,
                "load_1min": self.load, **extra}


def child_streamkit(spec: dict) -> dict:
    import streamkit as sk
    import streamkit.runtime.worker.tasks as tasks_module
    from streamkit.runtime.worker import tune_gc_for_streaming
    from streamkit.transport.factory import open_transport

    window, done = Window(), {}
    app = sk.App(spec["app_id"], store_backend="rocksdb", caching=False)
    events = app.topic(spec["source"], partitions=1)

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        b.stream(events).group_by_key().count(name="counts")

    tune_gc_for_streaming()
    transport = open_transport(f"kafka://{spec['bootstrap']}", kafka_config=app.kafka_config)
    writing = spec["mode"] == "write"
    worker = app.worker(transport, until_idle=2.0 if writing else None, state_dir=spec["state_dir"])
    restore = tasks_module.restore_task_stores

    async def timed_restore(task_id: str, stores: Any, *args: Any, **kwargs: Any) -> Dict[str, int]:
        window.start()
        report = await restore(task_id, stores, *args, **kwargs)
        if window.end():
            done["replayed"] = report.get("counts")
            got = dict(stores.by_name["counts"].range())
            check_restored("streamkit", got, expected_counts(spec["records"], spec["keys"]))
            done["keys"] = len(got)
            worker.stop()
        return report

    if not writing:
        tasks_module.restore_task_stores = timed_restore  # type: ignore[assignment]
    try:
        asyncio.run(worker.run())
    finally:
        transport.close()
    if writing:
        return {"written": True}
    return window.figures(verified=True, **done)


def child_faust(spec: dict) -> dict:
    import signal

    import faust
    from faust.tables.recovery import Recovery

    window, done = Window(), {}
    writing = spec["mode"] == "write"
    app = faust.App(
        spec["app_id"], broker=f"kafka://{spec['bootstrap']}", store="rocksdb://",
        datadir=os.path.join(spec["state_dir"], "faust"), autodiscover=False, web_enabled=False,
        topic_partitions=1, topic_replication_factor=1, table_standby_replicas=0,
        broker_session_timeout=int(os.environ["STREAMKIT_KAFKA_SESSION_TIMEOUT_MS"]) / 1000,
        broker_heartbeat_interval=int(os.environ["STREAMKIT_KAFKA_HEARTBEAT_INTERVAL_MS"]) / 1000,
        consumer_auto_offset_reset="earliest", producer_acks=-1)
    source = app.topic(spec["source"], partitions=1, key_type=bytes, key_serializer="raw", value_serializer="json")
    # The S2 table of bench.peers.frameworks.faust: bytes keys (the page), int counts, rocksdict.
    counts = app.Table("counts", default=int, key_type=bytes, value_type=int, partitions=1,
                       options={"driver": "rocksdict"})
    stop = lambda: os.kill(os.getpid(), signal.SIGTERM)  # noqa: E731 - the worker's own clean shutdown
    seen = [0]
    failure: List[BaseException] = []

    @app.agent(source)
    async def count(stream: Any) -> None:
        async for key, _value in stream.items():
            counts[key] = counts[key] + 1
            seen[0] += 1
            if writing and seen[0] == spec["events"]:
                asyncio.get_running_loop().call_later(1.0, stop)

    set_started, completed = Recovery._set_recovery_started, Recovery.on_recovery_completed

    def timed_set_started(self: Any) -> None:
        window.start()
        set_started(self)

    async def timed_completed(self: Any, generation_id: int = 0) -> None:
        closed = window.end()
        await completed(self, generation_id)
        if closed:
            try:
                got = {key.decode(): value for key, value in counts.items()}
                check_restored("faust", got, expected_counts(spec["records"], spec["keys"]))
                done["keys"] = len(got)
            except BaseException as exc:  # re-raised once the worker stopped (here faust would log it only)
                failure.append(exc)
            stop()

    if not writing:
        Recovery._set_recovery_started = timed_set_started  # type: ignore[method-assign]
        Recovery.on_recovery_completed = timed_completed  # type: ignore[method-assign]
    # The child's logging stays as set up (WARNING unless verbose); no progress spinner: at WARNING
    # and above faust's spinner sets the root logger to DEBUG to spin on every record's debug line.
    worker = faust.Worker(app, loglevel=logging.getLogger().level, override_logging=False, redirect_stdouts=False,
                          stdout=sys.stderr, quiet=True)
    worker.spinner = None
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise RuntimeError(f"the faust worker exited with {exc.code}") from None
    if failure:
        raise failure[0]
    if writing:
        return {"written": seen[0] == spec["events"]}
    return window.figures(verified=True, **done)


def child_quix(spec: dict) -> dict:
    from pathlib import Path

    from quixstreams import Application, State
    from quixstreams.state.recovery import RecoveryManager

    window, done = Window(), {}
    writing = spec["mode"] == "write"
    app = Application(
        broker_address=spec["bootstrap"], consumer_group=spec["app_id"], state_dir=Path(spec["state_dir"]) / "quix",
        auto_offset_reset="earliest", commit_interval=1.0,
        producer_extra_config={"enable.idempotence": False},  # Tansu has no InitProducerId
        consumer_extra_config={"session.timeout.ms": int(os.environ["STREAMKIT_KAFKA_SESSION_TIMEOUT_MS"]),
                               "heartbeat.interval.ms": int(os.environ["STREAMKIT_KAFKA_HEARTBEAT_INTERVAL_MS"])},
        loglevel="INFO" if spec.get("verbose") else "WARNING")
    seen = [0]

    def count(value: Any, state: State) -> int:
        """The S2 count of bench.peers.frameworks.quix: the message key's running count."""
        n = state.get("count", 0) + 1
        state.set("count", n)
        seen[0] += 1
        if writing and seen[0] == spec["events"]:
            app.stop()  # finishes this message, commits the checkpoint (changelog first)
        return n

    sdf = app.dataframe(app.topic(spec["source"], key_deserializer="bytes", value_deserializer="json"))
    sdf.apply(count, stateful=True)
    assign, recover = RecoveryManager.assign_partition, RecoveryManager.do_recovery

    def timed_assign(self: Any, *args: Any, **kwargs: Any) -> Any:
        window.start()
        return assign(self, *args, **kwargs)

    def timed_recover(self: Any) -> Any:
        result = recover(self)
        if window.end():
            partition = app._state_manager.get_store(stream_id=spec["source"], store_name="default").partitions[0]
            transaction = partition.begin()
            expected = expected_counts(spec["records"], spec["keys"])
            got = {page: transaction.get("count", prefix=page.encode()) for page in expected}
            check_restored("quix", {k: v for k, v in got.items() if v is not None}, expected)
            entries = sum(1 for _ in partition.iter_items(lower_bound=b""))
            if entries != len(expected):
                raise VerificationError(f"quix: the store holds {entries:,} entries, expected {len(expected):,}")
            done["keys"] = entries
            app.stop()
        return result

    if not writing:
        RecoveryManager.assign_partition = timed_assign  # type: ignore[method-assign]
        RecoveryManager.do_recovery = timed_recover  # type: ignore[method-assign]
    app.run()
    if writing:
        return {"written": seen[0] == spec["events"]}
    return window.figures(verified=True, **done)


def child_embedded(spec: dict) -> dict:
    """``bench.restore_throughput.measure``, its store checked in full before it closes."""
    import bench.restore_throughput as embedded

    records = spec["records"]
    seen: Dict[str, Any] = {}
    open_task_stores = embedded.open_task_stores

    def checked_open(*args: Any, **kwargs: Any) -> Any:
        stores = open_task_stores(*args, **kwargs)
        close = stores.close

        def check_then_close() -> None:
            seen["peak_rss_mib"], seen["load_1min"] = peak_rss_mib(), os.getloadavg()[0]
            got = dict(stores.by_name["counts"].range())
            check_restored("embedded", got, expected_counts(records, embedded.KEYS, prefix="key-"))
            seen["keys"] = len(got)
            close()

        stores.close = check_then_close
        return stores

    restore = embedded.restore_task_stores

    async def timed_restore(*args: Any, **kwargs: Any) -> Dict[str, int]:
        cpu = time.process_time()
        report = await restore(*args, **kwargs)
        seen["cpu_seconds"] = time.process_time() - cpu
        return report

    embedded.open_task_stores = checked_open  # type: ignore[assignment]
    embedded.restore_task_stores = timed_restore  # type: ignore[assignment]
    rate = embedded.measure(records)
    if "keys" not in seen:
        raise VerificationError("embedded: the restored store was not checked")
    return {"seconds": records / rate, "records_per_second": rate, "peak_rss_mib": seen["peak_rss_mib"],
            "cpu_seconds": seen["cpu_seconds"], "load_1min": seen["load_1min"], "records": records,
            "keys": seen["keys"], "verified": True}


CHILDREN: Dict[str, Callable[[dict], dict]] = {"streamkit": child_streamkit, "faust": child_faust,
                                                "quix": child_quix, "embedded": child_embedded}


def child(spec: dict) -> None:
    logging.basicConfig(level=logging.INFO if spec.get("verbose") else logging.WARNING,
                        format=f"%(asctime)s {spec['framework']} %(name)s %(levelname)s %(message)s")
    figures = CHILDREN[spec["framework"]](spec)
    # On a line of its own, marked: a framework may write to stdout too.
    print(f"\n{FIGURES_MARK}{json.dumps(figures)}", flush=True)


# -- command line -------------------------------------------------------------------------------
def print_table(results: Mapping[str, dict], records: int, broker: str, reps: int = 1) -> None:
    print(f"\nRestore {records:,} changelog records ({min(KEYS, records):,} keys, 1 partition) into RocksDB; "
          f"{broker}; {os.cpu_count()} cores" + (f"; median of {reps} runs" if reps > 1 else ""))
    print(f"  {'framework':<22}{'seconds':>9}{'records/s':>12}{'peak RSS MiB':>14}{'CPU s':>8}{'rec/CPU s':>12}"
          f"{'load':>6}  verified" + ("  runs (s)" if reps > 1 else ""))
    names = {"streamkit": "streamkit (Kafka)", "faust": "faust-streaming", "quix": "Quix Streams",
             "embedded": "streamkit (embedded)"}
    for name, f in results.items():
        runs = ", ".join(f"{seconds:.1f}" for seconds in f["reps_seconds"]) if reps > 1 else ""
        print(f"  {names.get(name, name):<22}{f['seconds']:>9.2f}{f['records_per_second']:>12,.0f}"
              f"{f['peak_rss_mib']:>14,.0f}{f['cpu_seconds']:>8.1f}{f['records_per_cpu_second']:>12,.0f}"
              f"{f['load_1min']:>6.1f}  "
              f"{'yes' if f['verified'] else 'NO'}  {runs}")
    print("\n  CPU s: the child's CPU time in the window (all threads; rec/CPU s: records per second of it, the "
          "figure that holds on a shared machine); load: the machine's 1-min load average at the window's end")
    print("  timed:")
    for name in results:
        print(f"    {names.get(name, name)}: {TIMED[name]}")


def main(argv: Optional[List[str]] = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 2 and argv[0] == "--child":
        child(json.loads(argv[1]))
        return
    parser = argparse.ArgumentParser(prog="python -m bench.peers.restore", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--broker", metavar="HOST:PORT", help="use this broker; 'tansu': start a Tansu "
                        "(default: start an Apache Kafka)")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS), metavar="NAME[,NAME...]",
                        help=f"of {', '.join(FRAMEWORKS)}, embedded (streamkit implies embedded)")
    parser.add_argument("--reps", type=int, default=1, help="runs per framework; the median is reported")
    parser.add_argument("--no-format-check", action="store_true", help="skip checking the changelog formats")
    parser.add_argument("--json", metavar="PATH", help="also write the figures to PATH")
    parser.add_argument("--verbose", action="store_true", help="log the children's INFO lines")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
    frameworks = [f.strip() for f in args.frameworks.split(",") if f.strip()]
    results = measure(args.broker, args.records, frameworks, reps=args.reps, check_formats=not args.no_format_check,
                      verbose=args.verbose)
    from bench.kafka_throughput import broker_description

    broker = broker_description(args.broker, "started by the bench")
    print_table(results, args.records, broker, args.reps)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"records": args.records, "keys": min(KEYS, args.records), "broker": broker,
                       "reps": args.reps, "cores": os.cpu_count(), "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
