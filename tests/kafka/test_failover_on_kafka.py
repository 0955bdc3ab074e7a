"""Failover on a real three-node Apache Kafka cluster (RF 3, min.insync.replicas 2) under
exactly_once (issue 32).

A repartitioned windowed app (events keyed by user, grouped by page, counted per 10 s
tumbling window of event time, every update emitted) runs on two ``streamkit worker``
processes while a producer feeds at least 100,000 events and the test injects faults:

* the leader of a repartition partition is SIGKILLed and restarted, a worker is SIGKILLed
  and restarted, then all three brokers are restarted one after the other;
* one worker is cut off from every broker (its clients reach the cluster only through
  fault proxies) for longer than its session: the group fences it, the other worker takes
  its tasks, and when the network comes back it rejoins.

Afterwards, reading ``read_committed``: every input's id appears exactly once in the id
sink, and every window's updates are exactly ``1, 2, ..., n`` with ``n`` recomputed from
the input topic itself, so its final value is right and no record was counted twice or
lost. A fault the workers or brokers do not recover from fails the test: a worker that
does not finish, exits non-zero, or leaves output missing.
"""
from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Dict, List, Tuple

from .apache_kafka import ApacheKafkaCluster
from .broker import run_sync
from .workers import KafkaApp, stop, wait_for

APP = textwrap.dedent("""
    from datetime import timedelta
    import streamkit as sk

    app = sk.App({app_id!r}, caching=False, commit_interval=timedelta(milliseconds={commit_ms}))
    events = app.topic({source!r}, partitions={partitions})

    @app.topology
    def build(b):
        stream = b.stream(events, timestamp=lambda k, v: v["ts"])
        stream.map_values(lambda v: v["n"]).to({ids!r})
        (stream.group_by(lambda k, v: v["page"])
               .windowed_by(sk.TumblingWindows(size=timedelta(seconds=10), grace=timedelta(hours=1)))
               .count(name="per-10s")
               .to_stream().to({counts!r}))
""")
EOS = ("--guarantee", "exactly_once")
MIN_EVENTS = 100_000
PARTITIONS = 3
COMMIT_MS = 500
RATE = 1_000             # events per second the producer offers: 100 s of input
BASE = 1_700_000_000_000
PAGES = 20
IDLE_EXIT_S = "15"       # a worker exits after this long without input, once the producer is done
ASSIGNED = re.compile(r"assigned this worker task\(s\) ([^;\n]*)")


class Feeder:
    """A ``streamkit produce`` process fed ``RATE`` events a second from a thread, until
    :meth:`finish` (and at least ``minimum`` events). Event ``n`` has key ``u{n % 37}``,
    page ``p{n % PAGES}`` and event time ``BASE + n`` ms."""

    def __init__(self, app: KafkaApp, minimum: int, log: Path) -> None:
        self.minimum = minimum
        self.produced = 0
        self._finish = threading.Event()
        self._log = open(log, "w")
        self.process = subprocess.Popen([sys.executable, "-m", "streamkit", "produce", app.source,
                                         "--key-field", "user"], stdin=subprocess.PIPE, stdout=self._log,
                                        stderr=subprocess.STDOUT, cwd=app.directory, env=app.env())
        self._thread = threading.Thread(target=self._feed, name="failover-feeder", daemon=True)
        self._thread.start()

    def _feed(self) -> None:
        chunk = RATE // 10
        started = time.monotonic()
        try:
            while not (self._finish.is_set() and self.produced >= self.minimum):
                lines = "".join(json.dumps({"user": f"u{n % 37}", "page": f"p{n % PAGES}", "n": n, "ts": BASE + n})
                                + "\n" for n in range(self.produced, self.produced + chunk))
                self.process.stdin.write(lines.encode())
                self.process.stdin.flush()
                self.produced += chunk
                time.sleep(max(0.0, started + self.produced / RATE - time.monotonic()))
        finally:
            self.process.stdin.close()

    def finish(self, timeout: float = 120) -> int:
        """Stop feeding once ``minimum`` events are out; wait for the producer; return the count."""
        self._finish.set()
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the feeder did not finish"
        assert self.process.wait(timeout=timeout) == 0, f"the producer failed: {self._log.name}"
        self._log.close()
        return self.produced

    def kill(self) -> None:
        self._finish.set()
        self.minimum = 0
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)
        self._log.close()


def _windowed_app(broker, tmp_path: Path, name: str) -> Tuple[KafkaApp, str]:
    """The app module and its topics (all kept); returns the app and its repartition topic."""
    app = KafkaApp(broker, tmp_path, name)
    (tmp_path / f"{app.module}.py").write_text(APP.format(
        app_id=name, commit_ms=COMMIT_MS, source=app.source, partitions=PARTITIONS, ids=app.ids,
        counts=app.counts))
    topics = app.create_topics()
    repartition = next(topic for topic in topics if topic.endswith("-repartition"))
    return app, repartition


def _assignments(log: Path) -> List[str]:
    return [m.group(1).strip() for m in ASSIGNED.finditer(log.read_text())]


def _progress(app: KafkaApp, log: Path, records: int) -> None:
    """Until the worker logging to ``log`` has tasks and ``app``'s id sink holds ``records``
    committed records (so faults land mid-run, with commits behind them)."""
    wait_for(lambda: _assignments(log), 90, f"tasks for the worker of {log.name}")
    wait_for(lambda: _committed_ids(app) >= records, 120, f"{records} committed outputs")


def _progress_after(app: KafkaApp, records: int) -> None:
    """Until ``records`` more outputs than now are committed to the id sink."""
    target = _committed_ids(app) + records
    wait_for(lambda: _committed_ids(app) >= target, 120, f"{records} more committed outputs")


def _committed_ids(app: KafkaApp) -> int:
    """Records in the id sink readable ``read_committed`` (its last stable offsets, minus
    the transaction markers, are an upper bound good enough to pace the test)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def count() -> int:
        consumer = AIOKafkaConsumer(isolation_level="read_committed", **app.broker.client_config())
        await consumer.start()
        try:
            partitions = [TopicPartition(app.ids, p) for p in range(PARTITIONS)]
            ends = await consumer.end_offsets(partitions)
            return sum(ends.values())
        finally:
            await consumer.stop()
    return run_sync(count)


def _leader(cluster: ApacheKafkaCluster, topic: str, partition: int) -> int:
    """The node id leading ``topic``'s ``partition``."""
    from aiokafka.admin import AIOKafkaAdminClient

    async def describe() -> int:
        admin = AIOKafkaAdminClient(**cluster.broker.client_config())
        await admin.start()
        try:
            [described] = await admin.describe_topics([topic])
            return next(p["leader"] for p in described["partitions"] if p["partition"] == partition)
        finally:
            await admin.close()
    return run_sync(describe)


def _wait_in_sync(cluster: ApacheKafkaCluster, topics: List[str], timeout: float = 120) -> None:
    """Until every partition of ``topics`` has all its replicas in sync: what an operator
    waits for before restarting the next broker of a rolling restart."""
    from aiokafka.admin import AIOKafkaAdminClient

    async def lagging() -> List[str]:
        admin = AIOKafkaAdminClient(**cluster.broker.client_config())
        await admin.start()
        try:
            return [f"{t['topic']}[{p['partition']}]" for t in await admin.describe_topics(topics)
                    for p in t["partitions"] if len(p["isr"]) < len(p["replicas"])]
        finally:
            await admin.close()
    wait_for(lambda: not run_sync(lagging), timeout, f"every partition of {topics} in sync")


def _finish(workers: List[subprocess.Popen], logs: List[Path], timeout: float = 180) -> None:
    """Every worker exits by itself (idle after the input ends) with status 0."""
    for proc, log in zip(workers, logs):
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"worker of {log.name} did not finish:\n{log.read_text()[-4000:]}") from None
        assert proc.returncode == 0, f"worker of {log.name} exited {proc.returncode}:\n{log.read_text()[-4000:]}"


def _assert_exactly_once(app: KafkaApp) -> Tuple[int, int]:
    """Every input counted once: ids exactly the input's, every window's updates exactly
    1..n with n recomputed from the input topic. Returns (events, windows)."""
    inputs = [record for values in app.read(app.source).values() for record in values]
    expected_ids = Counter(record["n"] for record in inputs)
    ids = Counter(n for values in app.read(app.ids).values() for n in values)
    lost, duplicated = expected_ids - ids, ids - expected_ids
    assert not lost and not duplicated, (f"{sum(lost.values())} input(s) lost (e.g. {sorted(lost)[:5]}), "
                                         f"{sum(duplicated.values())} duplicated (e.g. {sorted(duplicated)[:5]})")
    windows = Counter((record["page"], record["ts"] - record["ts"] % 10_000) for record in inputs)
    emitted = _windowed(app)
    assert set(emitted) == set(windows), f"windows missing: {sorted(set(windows) - set(emitted))[:5]}, " \
                                         f"unexpected: {sorted(set(emitted) - set(windows))[:5]}"
    wrong = {w: (values[-1], windows[w]) for w, values in emitted.items() if values != list(range(1, windows[w] + 1))}
    assert not wrong, (f"{len(wrong)} window(s) whose updates are not exactly 1..n "
                       f"((final, true count): {sorted(wrong.items())[:5]})")
    return len(inputs), len(windows)


def _windowed(app: KafkaApp) -> Dict[Tuple[str, int], List[int]]:
    """The counts topic's values per window (page, start ms), in offset order."""
    out = app.cli("consume", app.counts, "--from-beginning", "--timeout", "3", timeout=180)
    assert out.returncode == 0, out.stderr
    (app.directory / "counts-out.jsonl").write_text(out.stdout)  # for a failure's post-mortem
    per_window: Dict[Tuple[str, int], List[int]] = {}
    for line in out.stdout.splitlines():
        record = json.loads(line)  # the key is the window: {"key": page, "start": ms, "end": ms}
        per_window.setdefault((record["key"]["key"], record["key"]["start"]), []).append(record["value"])
    return per_window


def test_broker_and_worker_failover_exactly_once(kafka_cluster: ApacheKafkaCluster, tmp_path: Path,
                                                 unique_name) -> None:
    """Leader of a repartition partition SIGKILLed and restarted, a worker SIGKILLed and
    restarted, a rolling restart of all three brokers: exactly once throughout."""
    cluster = kafka_cluster
    app, repartition = _windowed_app(cluster.broker, tmp_path, unique_name("failover"))
    marks = [("start", time.monotonic())]
    feeder = Feeder(app, MIN_EVENTS, tmp_path / "producer.log")
    logs = [tmp_path / "w0.log", tmp_path / "w1.log"]
    workers = [app.worker(*EOS, "--until-idle", IDLE_EXIT_S, state=f"s{i}", log=logs[i]) for i in range(2)]
    restarted: List[subprocess.Popen] = []
    try:
        _progress(app, logs[1], 5_000)
        leader = _leader(cluster, repartition, 0)
        cluster.kill_node(leader)                        # 1. the leader dies mid-run
        marks.append((f"killed leader {leader}", time.monotonic()))
        _progress_after(app, 5_000)                      # the survivors take over its partitions
        cluster.start_node(leader)
        cluster.wait_ready(nodes=[leader])
        marks.append(("leader back", time.monotonic()))
        workers[1].send_signal(signal.SIGKILL)           # 2. a worker dies mid-run
        workers[1].wait(timeout=30)
        _progress_after(app, 3_000)
        logs.append(tmp_path / "w1-restarted.log")
        restarted.append(app.worker(*EOS, "--until-idle", IDLE_EXIT_S, state="s1", log=logs[-1]))
        _progress(app, logs[-1], 0)
        marks.append(("worker back", time.monotonic()))
        for node in cluster.nodes:                       # 3. a rolling restart of every broker
            _wait_in_sync(cluster, [app.source, repartition, app.ids, app.counts])
            cluster.restart_node(node.node_id)
            marks.append((f"node {node.node_id} restarted", time.monotonic()))
        produced = feeder.finish()
        marks.append((f"{produced} produced", time.monotonic()))
        _finish([workers[0], *restarted], [logs[0], logs[-1]])
        marks.append(("workers done", time.monotonic()))
    finally:
        feeder.kill()
        stop(workers + restarted)
    events, windows = _assert_exactly_once(app)
    marks.append(("checked", time.monotonic()))
    print(f"\n{events} events, {windows} windows exactly once through a leader kill, a worker kill and a "
          f"rolling restart; " + ", ".join(f"{what} +{at - marks[0][1]:.0f}s" for what, at in marks[1:]))


ALL_TASKS = ", ".join(f"{sub}_{partition}" for sub in range(2) for partition in range(PARTITIONS))


def test_a_worker_cut_off_past_its_session_is_fenced_and_rejoins(kafka_cluster_proxied: ApacheKafkaCluster,
                                                                 tmp_path: Path, unique_name) -> None:
    """Worker B reaches the cluster only through fault proxies. Cut off past its 6 s
    session, it is evicted; A takes its tasks and, committing them with the same
    transactional ids, fences B's producers. When the network returns, B's commit is
    refused, it drops those tasks uncommitted and rejoins; nothing is committed twice."""
    cluster = kafka_cluster_proxied
    app, _repartition = _windowed_app(cluster.broker, tmp_path, unique_name("partition"))
    marks = [("start", time.monotonic())]
    feeder = Feeder(app, MIN_EVENTS, tmp_path / "producer.log")
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    a = app.worker(*EOS, "--until-idle", IDLE_EXIT_S, state="sa", log=logs[0])
    b = app.worker(*EOS, "--until-idle", IDLE_EXIT_S, state="sb", log=logs[1],
                   STREAMKIT_BROKER=f"kafka://{cluster.proxied_bootstrap}")
    try:
        _progress(app, logs[0], 0)
        _progress(app, logs[1], 10_000)
        assert all(proxy.accepted for proxy in cluster.proxies), "B does not reach every node through its proxy"
        for proxy in cluster.proxies:
            proxy.cut()
        marks.append(("B cut off", time.monotonic()))
        wait_for(lambda: _assignments(logs[0])[-1] == ALL_TASKS, 90, "A to take over every task")
        marks.append(("A took over", time.monotonic()))
        _progress_after(app, 3_000)                      # A commits B's former tasks: B's producers fenced
        before = len(_assignments(logs[1]))
        for proxy in cluster.proxies:
            proxy.restore()
        marks.append(("B reconnected", time.monotonic()))
        wait_for(lambda: len(_assignments(logs[1])) > before and _assignments(logs[1])[-1] != "none", 120,
                 "B to rejoin the group and get tasks again")
        marks.append(("B rejoined", time.monotonic()))
        produced = feeder.finish()
        marks.append((f"{produced} produced", time.monotonic()))
        _finish([a, b], logs)
        marks.append(("workers done", time.monotonic()))
    finally:
        feeder.kill()
        stop([a, b])
    zombie = logs[1].read_text()
    assert "fenced" in zombie or "rebalanced without this worker" in zombie, zombie[-4000:]
    events, windows = _assert_exactly_once(app)
    print(f"\n{events} events, {windows} windows exactly once with a worker cut off and fenced; "
          + ", ".join(f"{what} +{at - marks[0][1]:.0f}s" for what, at in marks[1:]))


