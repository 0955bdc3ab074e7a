"""The limit: a hand-written aiokafka consume -> process -> produce -> commit loop.

No framework: state is a Python dict (no RocksDB, no changelog), the pages table is read
whole into a dict before the first event. Each batch from ``getmany`` is processed, its
outputs sent in record batches (acks=all, streamkit's producer settings), the acks
awaited, then the offsets committed: at-least-once. S5 runs the same loop in a Kafka
transaction per batch (offsets sent to the transaction).
"""
from __future__ import annotations

import asyncio
import gc
import os
from typing import Any, Callable, Dict, List, Optional, Tuple

import aiokafka
import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from bench.peers.frameworks import transactions_missing
from bench.peers.probe import Probe
from bench.peers.workload import Scenario, enrich_value, filter_map_value, window_start

NAME = "aiokafka loop"
FETCH_MAX_RECORDS = 10_000
FETCH_TIMEOUT_MS = 100

Transform = Callable[[bytes, bytes], Optional[Tuple[bytes, bytes]]]


def version() -> str:
    return f"aiokafka {aiokafka.__version__}"


def unsupported(scenario: Scenario, transactions: bool) -> Optional[str]:
    return transactions_missing(scenario, transactions)


def make_transform(scenario: str, table: Dict[bytes, Any]) -> Transform:
    if scenario == "S0":
        return lambda k, v: (k, v)
    if scenario == "S1":
        def filter_map(k: bytes, v: bytes) -> Optional[Tuple[bytes, bytes]]:
            out = filter_map_value(orjson.loads(v))
            return None if out is None else (k, orjson.dumps(out))
        return filter_map
    if scenario in ("S2", "S5"):
        counts: Dict[bytes, int] = {}

        def count(k: bytes, v: bytes) -> Tuple[bytes, bytes]:
            n = counts[k] = counts.get(k, 0) + 1
            return k, orjson.dumps(n)
        return count
    if scenario == "S3":
        windows: Dict[Tuple[bytes, int], int] = {}

        def window_count(k: bytes, v: bytes) -> Tuple[bytes, bytes]:
            start = window_start(orjson.loads(v)["ts"])
            n = windows[k, start] = windows.get((k, start), 0) + 1
            return k, orjson.dumps({"start": start, "count": n})
        return window_count
    if scenario == "S4":
        return lambda k, v: (k, orjson.dumps(enrich_value(orjson.loads(v), table[k])))
    raise ValueError(f"unknown scenario {scenario}")


async def load_table(bootstrap: str, topic: str) -> Dict[bytes, Any]:
    """Every row of the table topic, latest value per key."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        if not partitions:
            partitions = [TopicPartition(topic, p) for p in range(3)]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        table: Dict[bytes, Any] = {}
        while [tp for tp in partitions if await consumer.position(tp) < ends[tp]]:
            for records in (await consumer.getmany(timeout_ms=200, max_records=50_000)).values():
                for r in records:
                    table[r.key] = orjson.loads(r.value)
        return table
    finally:
        await consumer.stop()


async def loop(spec: dict, probe: Probe) -> None:
    bootstrap, scenario = spec["bootstrap"], spec["scenario"]
    table = await load_table(bootstrap, spec["table"]) if spec.get("table") else {}
    transform = make_transform(scenario, table)
    transactional = scenario == "S5"
    consumer = AIOKafkaConsumer(spec["source"], bootstrap_servers=bootstrap, group_id=spec["app_id"],
                                enable_auto_commit=False, auto_offset_reset="earliest",
                                isolation_level="read_committed",
                                fetch_max_wait_ms=spec.get("fetch_max_wait_ms") or 500,
                                session_timeout_ms=int(os.environ.get("STREAMKIT_KAFKA_SESSION_TIMEOUT_MS", 6000)),
                                heartbeat_interval_ms=int(os.environ.get("STREAMKIT_KAFKA_HEARTBEAT_INTERVAL_MS",
                                                                         1000)))
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, max_batch_size=1 << 20,
                                transactional_id=f"{spec['app_id']}-raw" if transactional else None)
    await consumer.start()
    await producer.start()
    stop = asyncio.Event()
    probe.on_done = stop.set
    try:
        while not stop.is_set():
            data = await consumer.getmany(timeout_ms=FETCH_TIMEOUT_MS, max_records=FETCH_MAX_RECORDS)
            if not any(data.values()):
                continue
            if transactional:
                await producer.begin_transaction()
            acks: List[Any] = []
            offsets = {}
            for tp, records in data.items():
                if not records:
                    continue
                builder = producer.create_batch()
                for r in records:
                    out = transform(r.key, r.value)
                    if out is None:
                        continue
                    if builder.append(key=out[0], value=out[1], timestamp=r.timestamp, headers=[]) is None:
                        acks.append(await producer.send_batch(builder, spec["sink"], partition=tp.partition))
                        builder = producer.create_batch()
                        builder.append(key=out[0], value=out[1], timestamp=r.timestamp, headers=[])
                if builder.record_count():
                    acks.append(await producer.send_batch(builder, spec["sink"], partition=tp.partition))
                offsets[tp] = records[-1].offset + 1
            if acks:
                await asyncio.gather(*acks)
            token = probe.commit_started()
            if transactional:
                await producer.send_offsets_to_transaction(offsets, spec["app_id"])
                await producer.commit_transaction()
            else:
                await consumer.commit(offsets)
            probe.commit_finished(token)
    finally:
        await producer.stop()
        await consumer.stop()


def run(spec: dict, probe: Probe) -> None:
    # streamkit.runtime.worker.tune_gc_for_streaming's settings (streamkit is not imported
    # here, so that this process's peak RSS is aiokafka's alone).
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    probe.count_aiokafka_fetches(spec["source"])
    asyncio.run(loop(spec, probe))
