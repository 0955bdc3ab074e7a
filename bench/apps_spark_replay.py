"""The app of ``python -m bench spark`` (bench/spark_replay.py), in a module of its own so
that the worker process and Spark's Python workers import it by name.

Page views keyed by user (topic ``events``, 3 partitions, String keys, JSON values),
counted per page and 60 s tumbling window of event time (the record timestamp), one
final result per window when it closes (stream time past its end plus 10 s grace):

    group_by(page) → windowed_by(TumblingWindows(60 s, grace=10 s)) → count
      → suppress(until_window_closes) → to_stream → to("page-counts-per-minute")

group_by re-keys the stream, so the count reads a repartition topic (two sub-topologies).
RocksDB store, record cache on, at_least_once: the App defaults. The input and output
topics keep their records forever (retention.ms=-1, see KEEP).
"""
from datetime import timedelta

import streamkit as sk

TOPIC = "events"
OUTPUT = "page-counts-per-minute"
PARTITIONS = 3
WINDOW_MS = 60_000
GRACE_MS = 10_000

app = sk.App("bench-spark-replay")

KEEP = {"retention.ms": "-1"}
"""The event times are in November 2023: under the default retention (7 days of record
time, behind the wall clock) the embedded broker deletes every sealed 64 MiB segment."""

events = app.topic(TOPIC, key_serde=sk.serdes.String(), value_serde=sk.serdes.Json(), partitions=PARTITIONS,
                   config=KEEP)
app.topic(OUTPUT, key_serde=sk.WindowedSerde(sk.serdes.String()), value_serde=sk.serdes.Json(), config=KEEP)

MINUTE = sk.TumblingWindows(size=timedelta(milliseconds=WINDOW_MS), grace=timedelta(milliseconds=GRACE_MS))


@app.topology
def build(b: sk.StreamsBuilder) -> None:
    (b.stream(events)
      .group_by(lambda key, value: value["page"], key_serde=sk.serdes.String())
      .windowed_by(MINUTE)
      .count(name="page-counts-per-minute-store")
      .suppress(sk.Suppressed.until_window_closes(), name="minute-finals")
      .to_stream()
      .to(OUTPUT))
