"""Quix Streams: the scenarios as a Quix user writes them (``Application``, ``StreamingDataFrame``,
RocksDB state with changelog topics), run in-process with ``app.run()``.

Quix consumes and produces through confluent-kafka (librdkafka), one message per
``poll_row``; the probe counts the input records ``InternalConsumer.poll_row`` hands
to the dataframe and times ``Checkpoint.commit`` (produce the changelogs, flush the
producer, commit the offsets synchronously, then write the state to RocksDB).

The producer keeps Quix's ``enable.idempotence=True``: librdkafka's InitProducerId works
on Tansu 0.6.0 (aiokafka's does not). S4 is ``join_asof`` on the pages topic: a join
makes Quix consume in timestamp order across co-partitioned topics (its buffered
``poll_row``), so the rows, stamped an hour before the events, are in the store first.
"""
from __future__ import annotations

import functools
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, Dict, Optional

import confluent_kafka
import quixstreams
from quixstreams import Application, State
from quixstreams.checkpointing import Checkpoint
from quixstreams.dataframe import StreamingDataFrame
from quixstreams.internal_consumer import InternalConsumer
from quixstreams.models import TimestampType, Topic, TopicAdmin, TopicManager

from bench.peers.frameworks import transactions_missing
from bench.peers.probe import Probe
from bench.peers.workload import GRACE_MS, WINDOW_MS, Scenario, enrich_value, filter_map_value

NAME = "Quix Streams"
IDLE_STOP_S = 120.0
"""Safety net: stop (and fail the figures) when no input record was handed out for this long."""

log = logging.getLogger(__name__)


def version() -> str:
    return f"quixstreams {quixstreams.__version__} (confluent-kafka {confluent_kafka.__version__})"


def unsupported(scenario: Scenario, transactions: bool) -> Optional[str]:
    return transactions_missing(scenario, transactions)


class BrokerDefaultsTopicManager(TopicManager):
    """Quix's TopicManager, completing the topic configs the broker leaves out.

    Quix derives a changelog topic's config from its input topics' ``retention.ms`` and
    ``retention.bytes`` as DescribeConfigs reports them (``TopicManager.derive_topic_config``).
    Kafka reports every config, defaults included; Tansu only those given at creation, so
    Quix fails with ``KeyError: 'retention.ms'``. The missing ones get Kafka's defaults here.
    """

    KAFKA_DEFAULTS = {"retention.ms": "604800000", "retention.bytes": "-1"}

    def _configure_topic(self, topic: Topic, broker_topic: Topic) -> Topic:
        topic = super()._configure_topic(topic, broker_topic)
        for name, value in self.KAFKA_DEFAULTS.items():
            topic.broker_config.extra_config.setdefault(name, value)
        return topic


def make_app(spec: dict) -> Application:
    """The Application of ``spec``: its settings are Quix's defaults except where commented."""
    exactly_once = spec["scenario"] == "S5"
    topic_manager = BrokerDefaultsTopicManager(topic_admin=TopicAdmin(broker_address=spec["bootstrap"]),
                                               consumer_group=spec["app_id"])
    # The group settings the other peers get (runner.CLIENT_ENV): a group join on Tansu takes
    # about half the session timeout (librdkafka's default is 45 s).
    consumer_config: Dict[str, Any] = {
        "session.timeout.ms": int(os.environ.get("STREAMKIT_KAFKA_SESSION_TIMEOUT_MS", 6000)),
        "heartbeat.interval.ms": int(os.environ.get("STREAMKIT_KAFKA_HEARTBEAT_INTERVAL_MS", 1000))}
    if spec.get("fetch_max_wait_ms") is not None:  # latency runs: Tansu holds an empty fetch this long
        consumer_config["fetch.wait.max.ms"] = int(spec["fetch_max_wait_ms"])
    return Application(
        # Everything not set here is Quix's default: librdkafka's producer (acks=all, linger 5 ms,
        # idempotent), RocksDB with its default options, changelog topics on.
        broker_address=spec["bootstrap"],
        consumer_group=spec["app_id"],
        state_dir=Path(spec["state_dir"]) / "quix",
        commit_interval=spec["commit_interval_s"],  # every framework commits at the same interval
        auto_offset_reset="earliest",  # the input is produced before the app starts
        processing_guarantee="exactly-once" if exactly_once else "at-least-once",
        consumer_extra_config=consumer_config,
        loglevel="INFO" if spec.get("verbose") else "WARNING",
        topic_manager=topic_manager,  # Quix's own, completing Tansu's topic configs (see the class)
    )


def event_time(value: Any, headers: Any, timestamp: float, timestamp_type: TimestampType) -> int:
    """S3's timestamp extractor: the event time is the value's ``ts``."""
    return value["ts"]


def window_update(window: Dict[str, Any]) -> Dict[str, Any]:
    return {"start": window["start"], "count": window["value"]}


def count(value: Any, state: State) -> int:
    """S2/S5: the running count of the message key (the page), kept in the key's state."""
    n = state.get("count", 0) + 1
    state.set("count", n)
    return n


def build(app: Application, spec: dict) -> None:
    """Define the scenario's dataframe on ``app`` (S0 .. S5, see ``bench.peers.workload``)."""
    scenario = spec["scenario"]
    raw = scenario == "S0"
    source = app.topic(spec["source"], key_deserializer="bytes",
                       value_deserializer="bytes" if raw else "json",
                       timestamp_extractor=event_time if scenario == "S3" else None)
    sink = app.topic(spec["sink"], key_serializer="bytes", value_serializer="bytes" if raw else "json")
    sdf: StreamingDataFrame = app.dataframe(source)
    if scenario == "S0":
        pass
    elif scenario == "S1":
        sdf = sdf.filter(lambda v: v["amount"] > 10).apply(filter_map_value)
    elif scenario in ("S2", "S5"):
        sdf = sdf.apply(count, stateful=True)
    elif scenario == "S3":
        # closing_strategy="partition": windows close on the partition's event time (its highest
        # "ts" so far), the stream time the grace is defined on here (as in Kafka Streams and
        # streamkit). Quix's default, "key", tracks time per key; it gives the same output on
        # this workload but costs ~25% more CPU per event (it scans the key's windows in RocksDB
        # on every event; "partition" scans only when the stream time passes a window end).
        sdf = (sdf.tumbling_window(duration_ms=WINDOW_MS, grace_ms=GRACE_MS).count()
                  .current(closing_strategy="partition")
                  .apply(window_update))
    elif scenario == "S4":
        pages = app.dataframe(app.topic(spec["table"], key_deserializer="bytes", value_deserializer="json"))
        # Each event joins its page's latest row at or before the event's timestamp (record
        # timestamps: the events' equal their "ts"); grace (how long old rows are kept) is
        # Quix's default, 7 days.
        sdf = sdf.join_asof(pages, how="inner", on_merge=enrich_value)
    else:
        raise ValueError(f"unknown scenario {scenario}")
    sdf.to_topic(sink)


def count_fetches(probe: Probe, topic: str) -> None:
    """Report the records of ``topic`` that ``InternalConsumer.poll_row`` hands to the app."""
    poll_row = InternalConsumer.poll_row

    @functools.wraps(poll_row)
    def timed_poll_row(consumer: InternalConsumer, *args: Any, **kwargs: Any) -> Any:
        rows = poll_row(consumer, *args, **kwargs)
        if rows is not None:
            if isinstance(rows, list):
                probe.fetched(sum(1 for row in rows if row.topic == topic))
            elif rows.topic == topic:
                probe.fetched(1)
        return rows

    InternalConsumer.poll_row = timed_poll_row  # type: ignore[method-assign]


def watch_idle(app: Application, probe: Probe, done: threading.Event) -> None:
    """Stop ``app`` once no input record was handed out for ``IDLE_STOP_S`` (a stuck run)."""
    seen, since = -1, time.monotonic()
    while not done.wait(1.0):
        if probe.fetched_records != seen:
            seen, since = probe.fetched_records, time.monotonic()
        elif time.monotonic() - since > IDLE_STOP_S:
            log.error("no input for %.0f s after %d of %d records: stopping", IDLE_STOP_S, seen, probe.expected)
            app.stop()
            return


def run(spec: dict, probe: Probe) -> None:
    app = make_app(spec)
    build(app, spec)
    count_fetches(probe, spec["source"])
    probe.wrap_sync_commit(Checkpoint, "commit")
    # Graceful stop: the loop finishes the record in hand, then commits the checkpoint (forced)
    # and closes the consumer (leaving the group).
    probe.on_all_fetched = app.stop
    done = threading.Event()
    watchdog = threading.Thread(target=watch_idle, args=(app, probe, done), daemon=True)
    watchdog.start()
    try:
        app.run()
    finally:
        done.set()
        watchdog.join()
