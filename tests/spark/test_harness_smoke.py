from datetime import timedelta

import streamkit as sk

from .harness import driver_outputs, replay_outputs, write_inputs


def test_windowed_count_with_late_records_matches_driver(spark, tmp_path):
    app = sk.App("h1", caching=False)
    app.topic("in", key_serde=sk.serdes.String(), value_serde=sk.serdes.Json())

    @app.topology
    def build(b):
        (b.stream("in").group_by_key()
          .windowed_by(sk.TumblingWindows(timedelta(seconds=10), grace=timedelta(seconds=1)))
          .count(name="c").to_stream().to("out"))

    records = [("in", "a", 1, 1000), ("in", "a", 1, 12000), ("in", "a", 1, 5000), ("in", "b", 1, 9000),
               ("in", "a", 1, 10500), ("in", "a", 1, 30000), ("in", "b", 1, 19000)]
    write_inputs(app, str(tmp_path / "broker"), records)
    replayed = replay_outputs(spark, app, str(tmp_path / "broker"), str(tmp_path / "out"))
    assert replayed == driver_outputs(app, records)
    assert len(replayed["out"]) == 4  # 5000 and 9000 (window 0-10 s closed at 11 s) and 19000 are late
