"""S1 end-to-end latency at a fixed offered load.

The framework runs S1 (filter + map) in its own process. This process first sends warm-up
events until the first output appears (the framework has joined its group and started),
then offers ``rate`` events/s for ``seconds``: every millisecond it sends the events due and looks for outputs, each
stamped with the wall clock at sending in its ``ts`` field. A reader of the output topic
notes when each output arrives; latency = arrival - ``ts`` (ms, the S1 output keeps
``ts``). p50/p99/max are over the measured outputs (events with amount > 10). The
framework is stopped afterwards. A framework slower than the offered load falls behind:
its latency then grows with the backlog (``falls_behind``: the last tenth of the outputs
waited over a second longer than the first).
"""
from __future__ import annotations

import asyncio
import json
import logging
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import orjson

from bench.peers.runner import COMMIT_INTERVAL_S, child_env
from bench.peers.workload import PAGES, PARTITIONS, USERS

log = logging.getLogger("bench.peers")

TICK_S = 0.001
WARMUP_TIMEOUT_S = 60.0
DRAIN_TIMEOUT_S = 30.0
COLUMNS = ("embedded", "streamkit", "streamkit-rdkafka", "streamkit-eos", "raw", "kafka-streams", "faust", "quix",
           "bytewax", "pathway")
EOS_COMMIT_INTERVALS_S = (0.1, 0.05, 0.03)
"""``streamkit-eos`` runs S1 under exactly_once once per commit interval: its outputs are
visible (read_committed) only when the transaction commits, so its latency is bounded by
the interval, not by processing. On Apache Kafka on 2 cores (2026-11-29) p99 reached about
100 ms at 50 ms and no lower at 30 ms (the transaction's own round trips): the floor is
judged at 50 ms."""
FETCH_MAX_WAIT_MS = 5
"""Every framework's consumer (and the output reader) lets the broker hold an empty fetch
this long at most. Tansu answers a fetch at the end of the log only when this expires,
even if records arrive meanwhile; at the clients' default (500 ms) that alone would be
the latency. Apache Kafka answers as soon as records arrive."""


class Offered:
    """The paced events: ``rate`` per second, stamped at sending."""

    def __init__(self, rate: int, seed: int = 11) -> None:
        self.rate = rate
        self.rng = random.Random(seed)
        self.sent = 0

    def event(self) -> Tuple[bytes, bytes, int]:
        page = f"page-{self.rng.randrange(PAGES)}"
        ts = int(time.time() * 1000)
        value = {"user": f"user-{self.rng.randrange(USERS)}", "page": page, "ts": ts,
                 "amount": self.rng.randrange(100)}
        return page.encode(), orjson.dumps(value), ts

    def due(self, started: float, limit: int) -> int:
        return min(limit, int((time.perf_counter() - started) * self.rate)) - self.sent


def percentiles(latencies: List[float]) -> Dict[str, float]:
    ordered = sorted(latencies)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {"p50_ms": pick(0.50), "p99_ms": pick(0.99), "max_ms": ordered[-1],
            "mean_ms": statistics.fmean(ordered)}


async def offer_and_observe(send: Callable[[List[Tuple[bytes, bytes, int]]], Any],
                            poll: Callable[[], Any], rate: int, seconds: float) -> dict:
    """Warm up, then offer the load; ``send(events)`` writes, ``poll()`` returns the output
    values that arrived since its last call (awaitable)."""
    offered = Offered(rate)
    deadline = time.monotonic() + WARMUP_TIMEOUT_S
    warm = False
    while not warm:
        if time.monotonic() > deadline:
            raise RuntimeError(f"no output within {WARMUP_TIMEOUT_S:.0f} s of the first warm-up events")
        await send([offered.event() for _ in range(10)])
        for _ in range(20):
            if await poll():
                warm = True
                break
            await asyncio.sleep(0.01)
    await asyncio.sleep(1.0)  # let the warm-up drain
    while await poll():
        pass
    measured_from = int(time.time() * 1000)
    total = int(rate * seconds)
    expected = 0
    latencies: List[float] = []
    started = time.perf_counter()

    def note(values: List[bytes]) -> None:
        now = time.time() * 1000
        for value in values:
            ts = orjson.loads(value)["ts"]
            if ts >= measured_from:
                latencies.append(now - ts)

    while offered.sent < total:
        batch = [offered.event() for _ in range(offered.due(started, total))]
        offered.sent += len(batch)
        expected += sum(1 for _, v, _ in batch if orjson.loads(v)["amount"] > 10)
        if batch:
            await send(batch)
        note(await poll())
        await asyncio.sleep(TICK_S)
    achieved = total / (time.perf_counter() - started)
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while len(latencies) < expected and time.monotonic() < deadline:
        note(await poll())
        await asyncio.sleep(0.001)
    if len(latencies) != expected:
        raise RuntimeError(f"did not keep up with {rate:,} events/s: {len(latencies):,} of {expected:,} outputs "
                           f"had arrived {DRAIN_TIMEOUT_S:.0f} s after the load ended")
    tenth = max(1, len(latencies) // 10)
    first, last = statistics.fmean(latencies[:tenth]), statistics.fmean(latencies[-tenth:])
    return {**percentiles(latencies), "events": total, "outputs": expected, "offered_per_second": rate,
            "achieved_per_second": achieved, "falls_behind": last - first > 1_000.0,
            "first_tenth_mean_ms": first, "last_tenth_mean_ms": last}


# -- Kafka --------------------------------------------------------------------------------
async def kafka_session(bootstrap: str, source: str, sink: str, rate: int, seconds: float) -> dict:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    from streamkit.core.partitioner import partition_for_key

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)
    # read_committed: a transactional framework's outputs count when they are committed (for
    # the others it changes nothing: records outside transactions are readable at once)
    reader = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                              auto_offset_reset="earliest", fetch_max_wait_ms=FETCH_MAX_WAIT_MS,
                              isolation_level="read_committed")
    await producer.start()
    await reader.start()
    try:
        partitions = [TopicPartition(sink, p) for p in range(PARTITIONS)]
        reader.assign(partitions)
        await reader.seek_to_beginning(*partitions)

        async def send(events: List[Tuple[bytes, bytes, int]]) -> None:
            for key, value, ts in events:
                await producer.send(source, value, key=key, partition=partition_for_key(key, PARTITIONS),
                                    timestamp_ms=ts)

        async def poll() -> List[bytes]:
            data = await reader.getmany(timeout_ms=0, max_records=10_000)
            return [r.value for records in data.values() for r in records]

        return await offer_and_observe(send, poll, rate, seconds)
    finally:
        await reader.stop()
        await producer.stop()


def measure_kafka(column: str, bootstrap: str, rate: int, seconds: float, verbose: bool = False,
                  commit_interval_s: float = COMMIT_INTERVAL_S) -> dict:
    from bench.kafka_throughput import create_topics, delete_topics

    run_id = f"bench-latency-{column}-{uuid.uuid4().hex[:8]}"
    source, sink = f"{run_id}-events", f"{run_id}-out"
    state_dir = tempfile.mkdtemp(prefix=f"sk-peers-latency-{column}-")
    asyncio.run(create_topics(bootstrap, [source, sink]))
    spec = {"framework": module_of(column), "scenario": "S1", "bootstrap": bootstrap, "app_id": run_id,
            "source": source, "sink": sink, "table": None, "events": 1 << 62, "state_dir": state_dir, "caching": False,
            "commit_interval_s": commit_interval_s, "fetch_max_wait_ms": FETCH_MAX_WAIT_MS, "verbose": verbose,
            "exactly_once": column == "streamkit-eos"}
    env = child_env()
    child = subprocess.Popen([sys.executable, "-m", "bench.peers.child", json.dumps(spec)], env=env,
                             stdout=subprocess.DEVNULL, stderr=None if verbose else subprocess.DEVNULL)
    try:
        return asyncio.run(kafka_session(bootstrap, source, sink, rate, seconds))
    finally:
        stop(child)
        shutil.rmtree(state_dir, ignore_errors=True)
        try:
            asyncio.run(delete_topics(bootstrap, run_id))
        except Exception as exc:  # noqa: BLE001 - best-effort clean-up
            log.warning("could not delete the topics of %s: %s", run_id, exc)


def stop(child: subprocess.Popen) -> None:
    child.send_signal(signal.SIGTERM)
    try:
        child.wait(10)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


# -- embedded ------------------------------------------------------------------------------
def measure_embedded(rate: int, seconds: float, verbose: bool = False) -> dict:
    from streamkit.transport.embedded.transport import EmbeddedTransport
    from streamkit.core.partitioner import partition_for_key

    directory = tempfile.mkdtemp(prefix="sk-peers-latency-embedded-")
    transport = EmbeddedTransport(directory)
    try:
        for topic in ("events", "out"):
            transport.admin.create_topic(topic, PARTITIONS, {"retention.ms": "-1"})
        env = child_env()
        child = subprocess.Popen([sys.executable, "-m", "bench.peers.latency", "--embedded-worker", directory],
                                 env=env, stdout=subprocess.DEVNULL,
                                 stderr=None if verbose else subprocess.DEVNULL)
        readers = [transport.broker.reader("out", p) for p in range(PARTITIONS)]
        try:
            async def send(events: List[Tuple[bytes, bytes, int]]) -> None:
                per_partition: Dict[int, list] = {}
                for key, value, ts in events:
                    per_partition.setdefault(partition_for_key(key, PARTITIONS), []).append((key, value, ts, None))
                for partition, records in per_partition.items():
                    transport.broker.append("events", partition, records)

            async def poll() -> List[bytes]:
                return [r[3] for reader in readers for r in reader.read(10_000)]

            return asyncio.run(offer_and_observe(send, poll, rate, seconds))
        finally:
            for reader in readers:
                reader.close()
            stop(child)
    finally:
        transport.close()
        shutil.rmtree(directory, ignore_errors=True)


def embedded_worker(directory: str) -> None:
    """The worker of the embedded measurement: S1 until SIGTERM."""
    from bench.peers.frameworks.streamkit import build_app
    from streamkit.runtime.worker import tune_gc_for_streaming
    from streamkit.transport.embedded.transport import EmbeddedTransport

    app = build_app("S1", "bench-latency", "events", "out")
    transport = EmbeddedTransport(directory)
    worker = app.worker(transport)
    tune_gc_for_streaming()

    async def run() -> None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, worker.stop)
        await worker.run()

    asyncio.run(run())
    transport.close()


def module_of(column: str) -> str:
    """The ``bench.peers.frameworks`` module of a latency column."""
    return "streamkit" if column == "streamkit-eos" else column.replace("-", "_")


def measure_all(patterns: Sequence[str], bootstrap: Optional[str], rate: int = 10_000, seconds: float = 30.0,
                verbose: bool = False, reps: int = 1) -> Dict[str, dict]:
    """Latency of every column matching ``patterns`` (a fresh broker per Kafka column and rep,
    :func:`bench.kafka_throughput.open_broker` of ``bootstrap``); reps are interleaved across the columns (rep 1 of each, then rep
    2 ...) so a slow stretch of the machine does not land on one column; each column reports
    its median rep (by p50) with every rep's p50/p99 in ``reps``. A column that fails gets
    the reason instead of figures."""
    import fnmatch
    import importlib

    from bench.kafka_throughput import open_broker

    columns = [c for c in COLUMNS if any(fnmatch.fnmatch(c, p) for p in patterns)]
    # (label, column, commit interval): streamkit-eos once per interval, labelled with it
    plans: List[Tuple[str, str, float]] = []
    for column in columns:
        if column == "streamkit-eos":
            plans += [(f"streamkit-eos-{interval * 1000:g}ms", column, interval) for interval in EOS_COMMIT_INTERVALS_S]
        else:
            plans.append((column, column, COMMIT_INTERVAL_S))
    runs: Dict[str, List[dict]] = {label: [] for label, _, _ in plans}
    out: Dict[str, dict] = {}
    for label, column, _ in plans:
        if column != "embedded":
            try:
                importlib.import_module(f"bench.peers.frameworks.{module_of(column)}")
            except ImportError as exc:
                out[label] = {"skipped": f"skipped: {exc.name} is not installed"}
    for rep in range(reps):
        for label, column, interval in plans:
            if label in out:
                continue
            try:
                if column == "embedded":
                    figures = measure_embedded(rate, seconds, verbose)
                else:
                    broker = open_broker(bootstrap)
                    try:
                        figures = measure_kafka(column, broker.bootstrap, rate, seconds, verbose,
                                                commit_interval_s=interval)
                    finally:
                        broker.stop()
                figures["commit_interval_ms"] = interval * 1000
                runs[label].append(figures)
                log.info("latency %s (rep %d): p50 %.1f ms, p99 %.1f ms, max %.1f ms", label, rep + 1,
                         figures["p50_ms"], figures["p99_ms"], figures["max_ms"])
            except Exception as exc:  # noqa: BLE001 - reported in the table instead of a figure
                log.error("latency %s failed: %s", label, exc)
                out[label] = {"skipped": f"failed: {exc}"}
    for label, figures in runs.items():
        if label in out or not figures:
            continue
        ordered = sorted(figures, key=lambda f: f["p50_ms"])
        out[label] = {**ordered[len(ordered) // 2],
                      "reps": [{k: f[k] for k in ("p50_ms", "p99_ms", "max_ms", "falls_behind")} for f in figures]}
    return out


def main(argv: Optional[Sequence[str]] = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) == 2 and argv[0] == "--embedded-worker":
        embedded_worker(argv[1])
        return
    import argparse

    parser = argparse.ArgumentParser(prog="python -m bench.peers.latency", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--broker", metavar="HOST:PORT")
    parser.add_argument("--rate", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--only", default="*", help="columns: " + ", ".join(COLUMNS))
    parser.add_argument("--reps", type=int, default=1, help="repetitions, interleaved across the columns")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
    for column, figures in measure_all(args.only.split(","), args.broker, args.rate, args.seconds,
                                       args.verbose, args.reps).items():
        print(column, json.dumps(figures))


if __name__ == "__main__":
    main()
