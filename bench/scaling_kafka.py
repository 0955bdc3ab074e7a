"""Scale-out on Kafka: the peers' S1 and S2 with one worker process in the group, then two.

``python -m bench scaling --kafka [--broker HOST:PORT] [--events N] [--partitions P]``

As the embedded run (bench.scaling), on a Kafka-protocol broker: a fresh topic of ``P``
partitions (default 6) gets ``N`` events, then that many worker child processes (the app
of bench.peers.frameworks.streamkit, run as ``streamkit worker`` runs it, on aiokafka)
start at once in one consumer group; Kafka's group protocol splits the tasks.

Timed: from the first input records any worker fetched (so process start and the first
group join are excluded, as in the peers benchmark; a rebalance after that counts) until
the group's committed offsets cover every event (looked at every 20 ms). The broker runs
on the same 2 cores (by default a fresh Tansu): its CPU is part of what two workers share,
and its CPU seconds from the workers' start to the end are reported beside theirs.

Verified before a figure counts: the commits cover all N events, the workers fetched at
least N records together (a rebalance may hand a partition over from its last commit, so
some are fetched twice) and the output passes the scenario's check, at-least-once
duplicates of a hand-over allowed for by checking S1's distinct records and S2's final
counts.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from typing import Dict, List, Optional

from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import CoordinatorLoadInProgressError, GroupCoordinatorNotAvailableError, NotCoordinatorError

from bench.kafka_throughput import (CLIENT_ENV, committed_with, create_topics, delete_topics, peak_rss_mib, produce,
                                    read_topic)
from bench.peers.frameworks.streamkit import build_app
from bench.scaling import child_figures
from bench.peers.workload import SCENARIOS, canonical

import orjson

log = logging.getLogger("bench.scaling.kafka")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMIT_INTERVAL_S = 0.1
UNTIL_IDLE_S = 3.0
"""A worker stops after this long without input (after the commits covered everything)."""


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_once(scenario: str, bootstrap: str, events: list, partitions: int, workers: int,
             broker_pid: Optional[int] = None) -> dict:
    """One verified run; ``broker_pid``: the broker's process on this machine, whose CPU
    seconds during the run are reported (it shares the cores with the workers)."""
    run_id = f"bench-scaling-{scenario.lower()}-{workers}-{uuid.uuid4().hex[:8]}"
    source, sink = f"{run_id}-events", f"{run_id}-out"
    state_root = tempfile.mkdtemp(prefix=f"sk-bench-scaling-kafka-{scenario}-")
    try:
        asyncio.run(create_topics(bootstrap, [source, sink], partitions))
        asyncio.run(produce(bootstrap, source, events, partitions))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
        for key, value in CLIENT_ENV.items():
            env.setdefault(key, value)
        broker_cpu = process_cpu_seconds(broker_pid) if broker_pid else None
        children = []
        for n in range(workers):
            spec = {"scenario": scenario, "bootstrap": bootstrap, "app_id": run_id, "source": source, "sink": sink,
                    "partitions": partitions, "state_dir": os.path.join(state_root, str(n))}
            children.append(subprocess.Popen([sys.executable, "-m", "bench.scaling_kafka", "--child", json.dumps(spec)],
                                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
        ended = asyncio.run(_wait_until_committed(bootstrap, run_id, source, partitions, len(events), children))
        if broker_cpu is not None:
            broker_cpu = process_cpu_seconds(broker_pid) - broker_cpu  # type: ignore[arg-type]
        figures = child_figures(scenario, children)
        fetched = sum(f["records"] for f in figures)
        if fetched < len(events):
            raise RuntimeError(f"{scenario} x{workers}: the workers fetched {fetched:,} records for {len(events):,}")
        _check(scenario, asyncio.run(read_topic(bootstrap, sink, 1, partitions=partitions)), events)
        first = min(f["first_input_at"] for f in figures if f["first_input_at"] is not None)
        seconds = ended - first
        return {"workers": workers, "seconds": seconds, "events_per_second": len(events) / seconds,
                "records_per_worker": [f["records"] for f in figures],
                "join_seconds": [round(f["first_input_at"] - f["started_at"], 2) for f in figures
                                 if f["first_input_at"] is not None],
                "cpu_seconds": sum(f["cpu_seconds"] for f in figures),
                "broker_cpu_seconds": broker_cpu}
    finally:
        shutil.rmtree(state_root, ignore_errors=True)
        try:
            asyncio.run(delete_topics(bootstrap, run_id))
        except Exception as exc:  # noqa: BLE001 - clean-up is best-effort; the broker is fresh per run anyway
            log.warning("could not delete the topics of %s: %s", run_id, exc)


def _check(scenario: str, output: list, events: list) -> None:
    """S1: exactly the expected distinct records (a hand-over may repeat some, at least once);
    S2: every page's last update is its count."""
    expected = SCENARIOS[scenario].expect(events, [])
    if scenario == "S1":
        got = Counter((k, canonical(orjson.loads(v))) for _, k, v in output)
        if set(got) != set(expected) or len(output) < sum(expected.values()):
            raise RuntimeError(f"S1: output differs from the true result ({len(output):,} records)")
    else:
        final = {k: orjson.loads(v) for _, k, v in output}
        if final != dict(expected):
            raise RuntimeError("S2: final counts differ from the true result")


async def _wait_until_committed(bootstrap: str, group: str, topic: str, partitions: int, total: int,
                                children: List[subprocess.Popen]) -> float:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        while await _committed_or_zero(admin, group, topic, partitions) < total:
            if all(child.poll() is not None for child in children):
                errors = "".join(child.stderr.read()[-2000:] for child in children if child.stderr)
                raise RuntimeError(f"the workers stopped before their commits covered {total:,} events:\n{errors}")
            await asyncio.sleep(0.02)
        return time.time()
    finally:
        await admin.close()


async def _committed_or_zero(admin: AIOKafkaAdminClient, group: str, topic: str, partitions: int) -> int:
    """The group's committed offsets on ``topic``, or 0 while its coordinator is not ready:
    a fresh Apache Kafka creates ``__consumer_offsets`` on the first group request and
    answers "coordinator not available" (or "loading") until it has, and nothing can have
    been committed by then."""
    try:
        return await committed_with(admin, group, topic, partitions)
    except (GroupCoordinatorNotAvailableError, CoordinatorLoadInProgressError, NotCoordinatorError):
        return 0


def child(spec: Dict) -> None:
    """One worker: run until idle; print when it started, when its first input came, its
    CPU seconds and the records it fetched."""
    from streamkit.runtime.worker import tune_gc_for_streaming
    from streamkit.transport.factory import open_transport

    started_at = time.time()
    first_input_at: List[float] = []
    fetched = [0]
    getmany = AIOKafkaConsumer.getmany

    async def counted_getmany(consumer: AIOKafkaConsumer, *args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        data = await getmany(consumer, *args, **kwargs)
        n = sum(len(records) for tp, records in data.items() if tp.topic == spec["source"])
        if n:
            if not first_input_at:
                first_input_at.append(time.time())
            fetched[0] += n
        return data

    AIOKafkaConsumer.getmany = counted_getmany  # type: ignore[method-assign]
    app = build_app(spec["scenario"], spec["app_id"], spec["source"], spec["sink"], partitions=spec["partitions"],
                    commit_interval_s=COMMIT_INTERVAL_S)
    tune_gc_for_streaming()
    transport = open_transport(f"kafka://{spec['bootstrap']}", kafka_config=app.kafka_config)
    cpu = time.process_time()
    try:
        asyncio.run(app.worker(transport, until_idle=UNTIL_IDLE_S, state_dir=spec["state_dir"]).run())
    finally:
        transport.close()
    print(json.dumps({"started_at": started_at, "first_input_at": first_input_at[0] if first_input_at else None,
                      "records": fetched[0], "cpu_seconds": time.process_time() - cpu,
                      "peak_rss_mib": peak_rss_mib()}))


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s child %(name)s %(levelname)s %(message)s")
    child(json.loads(sys.argv[2]))
