"""Bulk plans (Spark SQL) against the task runner (the live task code) on the same input."""
import random
from datetime import timedelta

import pytest

import streamkit as sk
from streamkit.spark.bulk import bulk_plan

from .harness import driver_outputs, replay_outputs, write_inputs


def windowed_app(windows, *, suppress: bool) -> sk.App:
    app = sk.App(f"bulk-{type(windows).__name__.lower()}-{int(suppress)}", caching=False)
    app.topic("views", key_serde=sk.serdes.String(), value_serde=sk.serdes.Json())

    @app.topology
    def build(b):
        counts = (b.stream("views").group_by(lambda key, value: value["page"] if value else "p0")
                  .windowed_by(windows).count(name="counts", late_records_topic="late"))
        if suppress:
            counts = counts.suppress(sk.Suppressed.until_window_closes())
        counts.to_stream().map_values(lambda n: {"n": n}).to("out")
    return app


def late_heavy_input(seed: int, count: int = 400):
    rnd = random.Random(seed)
    records = []
    for i in range(count):
        ts = max(0, i * 700 + rnd.choice([0, 0, 0, -3_000, -9_000, -30_000, 1_500]))
        value = None if i % 97 == 5 else {"page": f"p{rnd.randint(0, 6)}", "n": i}
        records.append(("views", f"u{rnd.randint(0, 9)}", value, ts))
    return records


CASES = [
    (sk.TumblingWindows(timedelta(seconds=10), grace=timedelta(seconds=2)), True),
    (sk.TumblingWindows(timedelta(seconds=10), grace=timedelta(seconds=2)), False),
    (sk.HoppingWindows(timedelta(seconds=10), advance=timedelta(seconds=4), grace=timedelta(seconds=3)), True),
    (sk.HoppingWindows(timedelta(seconds=10), advance=timedelta(seconds=4), grace=timedelta(seconds=3)), False),
]


@pytest.mark.parametrize("windows,suppress", CASES, ids=["tumbling-final", "tumbling", "hopping-final", "hopping"])
def test_bulk_windowed_count_equals_driver_and_task_runner(spark, tmp_path, windows, suppress):
    app = windowed_app(windows, suppress=suppress)
    topology = app.build()
    assert any(bulk_plan(topology, sub) is not None for sub in topology.sub_topologies)
    records = late_heavy_input(seed=3)
    write_inputs(app, str(tmp_path / "broker"), records)
    bulk = replay_outputs(spark, app, str(tmp_path / "broker"), str(tmp_path / "bulk"), bulk=True)
    assert bulk == driver_outputs(app, records)
    assert bulk["out"] and bulk["late"], "the input must give results and late records"
    assert len(bulk["late"]) > 20


@pytest.mark.parametrize("windows,suppress", CASES[:1] + CASES[2:3], ids=["tumbling-final", "hopping-final"])
def test_bulk_equals_task_runner_on_three_partitions(spark, tmp_path, windows, suppress):
    app = windowed_app(windows, suppress=suppress)
    records = late_heavy_input(seed=11, count=900)
    write_inputs(app, str(tmp_path / "broker"), records, partitions={"views": 3})
    bulk = replay_outputs(spark, app, str(tmp_path / "broker"), str(tmp_path / "bulk"), bulk=True)
    runner = replay_outputs(spark, app, str(tmp_path / "broker"), str(tmp_path / "runner"), bulk=False)
    assert bulk == runner
    assert len(bulk["out"]) > 10 and bulk["late"]


def test_no_bulk_plan_for_reduce_or_sessions():
    app = sk.App("bulk-none")
    app.topic("views", key_serde=sk.serdes.String(), value_serde=sk.serdes.Json())

    @app.topology
    def build(b):
        grouped = b.stream("views").group_by(lambda key, value: value["page"])
        grouped.windowed_by(sk.TumblingWindows(timedelta(seconds=10))).reduce(
            lambda a, b: a, name="r").to_stream().to("r-out")
        grouped.windowed_by(sk.SessionWindows(inactivity_gap=timedelta(seconds=5))).count(
            name="s").to_stream().to("s-out")
    topology = app.build()
    assert [bulk_plan(topology, sub) for sub in topology.sub_topologies] == [None] * len(topology.sub_topologies)
