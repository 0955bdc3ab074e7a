"""Stateless stages in slices (streamkit.spark.slicing): more Spark tasks than partitions.

- planning: slices cover each partition's offsets exactly, in order, about the asked
  size; a partition too small for two slices stays whole; nothing is sliced when no
  partition would be;
- which sub-topologies may be sliced: stateless nodes only, no store, no timestamp
  extractor;
- the corrections from the ``slice`` rows: running counts and maxima of the earlier
  slices of the same partition, never of another partition's;
- a real replay whose first stage runs in many slices emits the very rows an unsliced
  replay emits (sequence, pmax, writer stamps, sink rows), and every output, the
  repartitioned count downstream of it included, is the same: out-of-order
  timestamps, a flat_map sending several records per input, an output topic and an
  external sink written from the sliced stage, a dead-lettered record, and partitions
  of unequal sizes, one empty.
"""
from __future__ import annotations

import os
import random
from datetime import timedelta
from typing import Any, List, Tuple

import pyarrow.parquet as pq
import pytest

import streamkit as sk
from streamkit.broker.broker import EmbeddedBroker
from streamkit.spark import replay
from streamkit.spark.replay import plan_replay
from streamkit.spark.slicing import Slice, fixes, plan_slices, sliceable
from streamkit.spark.stages import Stages


pytestmark = pytest.mark.spark


# -- planning --------------------------------------------------------------------------------------


def test_slices_cover_each_partition_exactly_and_in_order() -> None:
    slices = plan_slices({0: (0, 1000), 1: (40, 40), 2: (7, 307)}, slots=2, slice_records=100)
    assert [s.number for s in slices] == list(range(len(slices)))
    for partition, (start, end) in {0: (0, 1000), 1: (40, 40), 2: (7, 307)}.items():
        mine = [s for s in slices if s.partition == partition]
        assert [s.index for s in mine] == list(range(len(mine)))
        assert mine[0].start == start and mine[-1].end == end
        assert all(a.end == b.start for a, b in zip(mine, mine[1:]))
    assert [len([s for s in slices if s.partition == p]) for p in range(3)] == [10, 1, 3]


def test_nothing_is_sliced_when_no_partition_would_be() -> None:
    assert plan_slices({0: (0, 120), 1: (0, 90)}, slots=2, slice_records=100) is None
    assert plan_slices({0: (0, 10_000)}, slots=2) is None  # below MIN_SLICE_RECORDS
    default = plan_slices({p: (0, 1_666_667) for p in range(3)}, slots=2)
    assert default is not None and len(default) == 15  # about 8 waves of 2 slots


def stateless_and_stateful_app() -> sk.App:
    app = sk.App("slices-plan", caching=False)
    app.topic("in", key_serde=sk.serdes.String(), value_serde=sk.serdes.Json())
    app.topic("stamped", key_serde=sk.serdes.String(), value_serde=sk.serdes.Json())
    app.topology(lambda b: (b.stream("in").filter(lambda k, v: v["i"] % 5).group_by(lambda k, v: v["g"])
                            .count(name="counts").to_stream().to("out"),
                            b.stream("stamped", timestamp=lambda k, v: v["t"]).map_values(lambda v: v).to("out2")))
    return app


def test_only_stateless_sub_topologies_with_record_timestamps_are_sliceable() -> None:
    topology = stateless_and_stateful_app().build()
    by_source = {sub.source_topics[0]: sliceable(topology, sub) for sub in topology.sub_topologies}
    assert by_source == {"in": True, "stamped": False, "slices-plan-counts-repartition": False}


def test_corrections_add_up_the_earlier_slices_of_the_same_partition_only() -> None:
    slices = [Slice(0, 0, 0, 0, 10), Slice(1, 0, 1, 10, 20), Slice(2, 0, 2, 20, 30), Slice(3, 1, 0, 0, 10),
              Slice(4, 1, 1, 10, 20)]
    stats = [(0, "topic:r", 1, 4, 900), (0, "stream_time", 0, 0, 950), (0, "sink:s", 0, 3, -1),
             (1, "topic:r", 1, 2, 700), (1, "topic:r", 2, 5, 1200), (1, "stream_time", 0, 0, 1300),
             (2, "topic:r", 1, 1, 10), (2, "sink:s", 0, 1, -1), (2, "stream_time", 0, 0, 20),
             (3, "topic:r", 1, 6, 5000), (3, "stream_time", 1, 0, 5000), (4, "topic:r", 1, 1, 1)]
    got = {(f.slice, f.kind, f.name, f.partition): (f.sent_before, f.pmax_floor, f.stream_time_floor)
           for f in fixes(slices, stats)}
    assert got == {
        (1, "topic", "r", 1): (4, 900, 950),
        (1, "topic", "r", 2): (0, None, 950),
        (2, "topic", "r", 1): (6, 900, 1300),
        (2, "sink", "s", 0): (3, None, None),
        (4, "topic", "r", 1): (6, 5000, 5000),
    }


# -- a real replay, sliced and not -----------------------------------------------------------------


def sliced_app() -> sk.App:
    app = sk.App("sliced-stage", caching=False, deserialization_error_handler="dead_letter")
    app.topic("in", key_serde=sk.serdes.String(), value_serde=sk.serdes.Json())
    archive = sk.sinks.Callback(print)  # a replay collects sink records, never delivers them

    def build(b: sk.StreamsBuilder) -> None:
        events = b.stream("in").filter(lambda k, v: v["i"] % 7 != 3)
        events.flat_map(lambda k, v: [(f"{k}-{n}", {"i": v["i"], "n": n}) for n in range(v["i"] % 3)]).to("fanned")
        events.sink(archive, name="archive")
        (events.group_by(lambda k, v: v["group"], key_serde=sk.serdes.String())
         .windowed_by(sk.TumblingWindows(timedelta(seconds=5), grace=timedelta(seconds=2)))
         .count(name="counts").to_stream().to("out"))
    app.topology(build)
    return app


def write_sliced_inputs(directory: str, seed: int) -> List[Tuple[str, Any, Any, int]]:
    """Partitions of 700, 0 and 260 records (timestamps out of order by up to 4 s), and
    one undecodable value in partition 2."""
    rng = random.Random(seed)
    records: List[Tuple[str, Any, Any, int]] = []
    with EmbeddedBroker(directory) as broker:
        broker.create_topic("in", 3)
        for partition, size in ((0, 700), (1, 0), (2, 260)):
            t = 10_000
            batch = []
            for i in range(size):
                t += rng.randint(0, 120)
                ts = t - (rng.randint(0, 4_000) if rng.random() < 0.25 else 0)
                key, value = f"p{partition}-u{rng.randrange(9)}", {"group": f"g{rng.randrange(5)}", "i": i}
                batch.append((key.encode(), sk.serdes.Json().serialize(value), ts, None))
                records.append(("in", key, value, ts))
                if partition == 2 and i == 100:
                    batch.append((b"bad", b"{not json", ts, None))
            broker.append("in", partition, batch)
    return records


def emitted_rows(spark: Any, app: sk.App, broker: str, slice_records: int) -> Tuple[List[tuple], int]:
    """The first stage's topic and sink rows, corrected, and how many slices it ran in."""
    from pyspark.sql import functions as F

    plan = plan_replay(app, {"in": broker}, spark)
    run = Stages(spark, plan.job, plan.sources, bulk=False, slice_records=slice_records).run_all()
    try:
        rows = (run.emitted[0].where(F.col("kind").isin("topic", "sink"))
                .drop("slice").collect())
        return sorted(tuple(r) for r in rows), run.summaries[0].slices
    finally:
        run.release(spark)


def test_a_sliced_stage_emits_the_rows_of_an_unsliced_one(spark, tmp_path):
    app = sliced_app()
    broker = str(tmp_path / "broker")
    write_sliced_inputs(broker, seed=4)
    whole, no_slices = emitted_rows(spark, app, broker, slice_records=0)
    sliced, slices = emitted_rows(spark, app, broker, slice_records=37)
    assert no_slices == 0 and slices == 19 + 1 + 7
    assert len(whole) > 1500 and sliced == whole
    assert {r[1] for r in whole} >= {"fanned", "sliced-stage-counts-repartition", "archive", "sliced-stage-dlq"}


def test_a_sliced_replay_writes_the_outputs_of_an_unsliced_one(spark, tmp_path):
    app = sliced_app()
    broker = str(tmp_path / "broker")
    write_sliced_inputs(broker, seed=11)
    outputs = {}
    for name, slice_records in (("whole", 0), ("sliced", 23)):
        out = str(tmp_path / name)
        result = replay(app, inputs={"in": broker}, output=out, spark=spark, slice_records=slice_records)
        assert result.input_records == 961
        outputs[name] = {folder: sorted(pq.read_table(os.path.join(out, folder)).to_pylist(), key=repr)
                         for folder in ("topics/out", "topics/fanned", "topics/sliced-stage-dlq", "sinks/archive",
                                        "stores/counts")}
        if name == "sliced":
            assert result.stages[0].slices == 30 + 1 + 11
            assert "stage sub-topology 0 (offset order in 42 slices, reads in): 961 " in result.summary()
    assert outputs["sliced"] == outputs["whole"]
    assert all(outputs["whole"][folder] for folder in outputs["whole"])
