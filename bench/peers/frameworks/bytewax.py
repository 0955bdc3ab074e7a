"""Bytewax: the scenarios as a Bytewax user writes them (a ``Dataflow`` of Bytewax's own
operators, ``KafkaSource`` in and ``KafkaSink`` out, both on confluent-kafka), run in this
process by ``cli_main`` with one worker, as ``python -m bytewax.run`` runs it.

State is Bytewax's own and in memory (``stateful_map``, ``count_window``): without a
recovery store nothing is durable and a restart starts from scratch.

Contract differences (``CONTRACT``, shown in the report's notes):

- Bytewax keeps its input offsets in its own recovery store, never in a consumer group
  (``KafkaSource`` assigns partitions under the group id ``BYTEWAX_IGNORED`` with
  auto-commit off): no group offsets to check (``COMMITS_GROUP_OFFSETS``).
- ``KafkaSink`` has no transactions: S5 is not run. S4 is not run either: Bytewax reads
  its inputs without any timestamp synchronization, so events meet a table that is not
  read yet (a user loads the table first, outside the dataflow).
- S3 is ``count_window`` (an ``EventClock`` on the event's ``ts`` waiting 10 s, the grace,
  and 60 s ``TumblingWindower`` windows aligned to the epoch): Bytewax emits a window's
  count once, when the window closes, not an update per event, so S3 is checked as
  coalesced (every window's count exact, fewer updates). An event the clock deems late is
  an error naming its partition and offset.

What is timed: ``KafkaSource(tail=False)`` reads each partition to its end and the
dataflow then completes. The window runs from the first records a source partition's
``next_batch`` handed out to the end of ``KafkaSink``'s ``close``, called once every item
reached the sink, which flushes the producer (acks=all: every output acknowledged;
``write_batch`` also flushes after every batch). That close is the probe's commit.
"""
from __future__ import annotations

import functools
import logging
from datetime import datetime, timedelta, timezone
from typing import Any, List, Optional, Tuple

import orjson
from bytewax import operators as op
from bytewax._bytewax import cli_main
from bytewax.connectors import kafka as bytewax_kafka
from bytewax.connectors.kafka import KafkaSink, KafkaSinkMessage, KafkaSource, KafkaSourceMessage
from bytewax.dataflow import Dataflow
from bytewax.operators.windowing import EventClock, TumblingWindower, count_window

from bench.peers.probe import Probe
from bench.peers.workload import GRACE_MS, WINDOW_MS, Scenario, compact_json, filter_map_value

NAME = "Bytewax"
COMMITS_GROUP_OFFSETS = False
COALESCED_SCENARIOS = frozenset({"S3"})
CONTRACT = ("in-memory state (no recovery store); no transactions (S5 n/a); no group offsets "
            "(offsets live in Bytewax's recovery store); S3 emits each window once at its close: "
            "checked as coalesced; reads to the partitions' ends (tail=False), timed to its sink's "
            "closing flush")
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

log = logging.getLogger(__name__)

Message = KafkaSourceMessage[Optional[bytes], Optional[bytes]]


def version() -> str:
    import importlib.metadata

    import confluent_kafka

    return f"bytewax {importlib.metadata.version('bytewax')} (confluent-kafka {confluent_kafka.__version__})"


def unsupported(scenario: Scenario, transactions: bool) -> Optional[str]:
    if scenario.exactly_once:
        return "n/a: Bytewax's KafkaSink has no transactions (at-least-once at best)"
    if scenario.table:
        return "n/a: Bytewax reads its inputs without timestamp synchronization (no table join to run)"
    return None


def event_time(message: Message) -> datetime:
    """S3's event time: the value's ``ts`` (ms since the epoch), as Bytewax's aware UTC datetime."""
    return EPOCH + timedelta(milliseconds=orjson.loads(message.value)["ts"])


def running_count(count: Optional[int], _message: Message) -> Tuple[int, int]:
    """S2's ``stateful_map`` mapper: the key's new count is both the state and the output."""
    count = (count or 0) + 1
    return count, count


def filter_map(message: Message) -> Optional[KafkaSinkMessage]:
    mapped = filter_map_value(orjson.loads(message.value))
    return None if mapped is None else KafkaSinkMessage(message.key, compact_json(mapped))


def build(spec: dict, late: List[Tuple[str, Any]]) -> Dataflow:
    """The scenario's dataflow (S0 .. S3, see ``bench.peers.workload``); items the window
    clock deems late are appended to ``late``."""
    scenario = spec["scenario"]
    flow = Dataflow(f"bench-{scenario}")
    # A latency run (bench.peers.latency: endless input, fetch_max_wait_ms set) tails its input.
    latency_run = spec.get("fetch_max_wait_ms") is not None
    fetch_wait = {"fetch.wait.max.ms": str(spec["fetch_max_wait_ms"])} if latency_run else None
    messages = op.input("events", flow, KafkaSource([spec["bootstrap"]], [spec["source"]], tail=latency_run,
                                                    add_config=fetch_wait))
    if scenario == "S0":
        out = op.map("pass", messages, lambda m: KafkaSinkMessage(m.key, m.value))
    elif scenario == "S1":
        out = op.filter_map("filter_map", messages, filter_map)
    elif scenario == "S2":
        keyed = op.key_on("page", messages, lambda m: m.key.decode())
        counts = op.stateful_map("count", keyed, running_count)
        out = op.map("encode", counts, lambda kv: KafkaSinkMessage(kv[0].encode(), compact_json(kv[1])))
    elif scenario == "S3":
        windows = count_window(
            "window_count", messages,
            EventClock(event_time, wait_for_system_duration=timedelta(milliseconds=GRACE_MS)),
            TumblingWindower(length=timedelta(milliseconds=WINDOW_MS), align_to=EPOCH),
            key=lambda m: m.key.decode())
        op.inspect("late", windows.late, lambda _step, item: late.append(item))
        out = op.map("encode", windows.down, lambda kv: KafkaSinkMessage(
            kv[0].encode(), compact_json({"start": kv[1][0] * WINDOW_MS, "count": kv[1][1]})))
    else:
        raise ValueError(f"Bytewax runs S0 .. S3, not {scenario}")
    op.output("out", out, KafkaSink([spec["bootstrap"]], spec["sink"]))
    return flow


def count_fetches(probe: Probe) -> None:
    """Report the messages each source partition's ``next_batch`` hands to the dataflow."""
    partition_class = bytewax_kafka._KafkaSourcePartition
    next_batch = partition_class.next_batch

    @functools.wraps(next_batch)
    def counted(partition: Any) -> list:
        batch = next_batch(partition)
        probe.fetched(sum(1 for item in batch if isinstance(item, KafkaSourceMessage)))
        return batch

    partition_class.next_batch = counted  # type: ignore[method-assign]


def run(spec: dict, probe: Probe) -> None:
    late: List[Tuple[str, Any]] = []
    flow = build(spec, late)
    count_fetches(probe)
    probe.wrap_sync_commit(bytewax_kafka._KafkaSinkPartition, "close")
    cli_main(flow, workers_per_process=1)
    if late:
        key, (window, message) = late[0]
        raise RuntimeError(f"Bytewax's window clock dropped {len(late):,} events as late, the first: topic "
                           f"{message.topic} partition {message.partition} offset {message.offset} (key {key}, "
                           f"window {window})")
