"""count_distinct against Spark (Kafka Streams has no count distinct to compare with).

Two checks: the Spark replay gives the driver's output record for record (late records,
merged sessions and the unwindowed table included, bulk on and off: no bulk plan takes
a count distinct); and each window's final count equals Spark SQL's own
``count_distinct`` over the same records grouped by key and ``window()``, which, like
ours, ignores None values.
"""
from __future__ import annotations

from datetime import timedelta
from typing import Dict, List, Tuple

import streamkit as sk

from .harness import driver_outputs
from .test_parity_operators import BULK, SEC, InputRecord, assert_parity, events


def _with_some_missing_values(records: List[InputRecord]) -> List[InputRecord]:
    """Every 7th record has ``n`` None (not counted), the rest ``n % 20`` (many repeats)."""
    return [(topic, key, {"n": None if value["i"] % 7 == 0 else value["n"] % 20, "i": value["i"]}, ts)
            for topic, key, value, ts in records]


@BULK
def test_count_distinct_replay_matches_the_driver(spark, tmp_path, bulk) -> None:
    app = sk.App("parity-count-distinct", caching=False)
    app.topic("in", key_serde=sk.serdes.String(), value_serde=sk.serdes.Json())

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        grouped = b.stream("in").group_by_key()
        (grouped.windowed_by(sk.TumblingWindows(5 * SEC, grace=1 * SEC))
         .count_distinct("n", name="tumbling", late_records_topic="late-tumbling")
         .to_stream().to("tumbling"))
        (grouped.windowed_by(sk.HoppingWindows(6 * SEC, 2 * SEC, grace=2 * SEC))
         .count_distinct(lambda value: value["i"] % 5, name="hopping").to_stream().to("hopping"))
        (grouped.windowed_by(sk.SessionWindows(1500 * timedelta(milliseconds=1), grace=1 * SEC))
         .count_distinct("n", name="sessions").to_stream().to("sessions"))
        grouped.count_distinct("n", name="all").to_stream().to("all")

    records = _with_some_missing_values(
        events(41, 300, step_ms=600, disorder=0.25, disorder_ms=1500, late=0.06, late_ms=(5000, 15000)))
    outputs = assert_parity(spark, tmp_path, app, records, bulk=bulk)
    assert outputs["late-tumbling"], "expected some late records"
    assert len(outputs["tumbling"]) + len(outputs["late-tumbling"]) == len(records)
    assert any(v is None for _k, v, _ts in outputs["sessions"]), "expected merged sessions"
    finals: Dict[str, int] = {}
    for key, count, _ts in outputs["all"]:
        finals[key] = count
    assert finals == {key: len({v["n"] for _t, k, v, _ts in records if k == key and v["n"] is not None})
                      for key in {k for _t, k, _v, _ts in records}}


def test_final_window_counts_equal_spark_sql_count_distinct(spark, tmp_path) -> None:
    """Out-of-order records inside grace (none late): the last update of each window is
    Spark SQL's ``count_distinct`` of the window's values."""
    from pyspark.sql import functions as F

    app = sk.App("sql-count-distinct", caching=False)
    app.topic("in", key_serde=sk.serdes.String(), value_serde=sk.serdes.Json())
    app.topology(lambda b: b.stream("in").group_by_key().windowed_by(sk.TumblingWindows(5 * SEC, grace=10 * SEC))
                 .count_distinct("n").to_stream().to("out"))
    records = _with_some_missing_values(events(43, 400, disorder=0.3, disorder_ms=4000))

    finals: Dict[Tuple[str, int, int], int] = {}
    for windowed, count, _ts in driver_outputs(app, records)["out"]:
        finals[(windowed.key, windowed.start, windowed.end)] = count

    frame = spark.createDataFrame([(key, value["n"], ts) for _t, key, value, ts in records],
                                  "key string, n long, ts long")
    window = F.window(F.timestamp_millis("ts"), "5 seconds")
    rows = (frame.groupBy("key", window.alias("w"))
            .agg(F.count_distinct("n").alias("distinct"))
            .select("key", F.unix_millis("w.start").alias("start"), F.unix_millis("w.end").alias("end"),
                    "distinct")
            .collect())
    expected = {(row["key"], row["start"], row["end"]): row["distinct"] for row in rows}
    assert len(expected) > 20
    assert finals == expected
