"""The worker never skips deleted input silently: a source partition's lost range is
logged (topic, partition, offsets) and counted in ``records_lost_to_retention``; a gap
in a repartition topic stops the worker; repartition topics are purged below the
committed offsets."""
from __future__ import annotations

import logging
from pathlib import Path

import orjson
import pytest

import streamkit as sk
from streamkit.errors import StreamkitError
from streamkit.runtime.worker import committer as committer_module
from streamkit.transport.base import TopicPartition
from streamkit.broker import EmbeddedBroker


def _count_app(app_id: str) -> sk.App:
    app = sk.App(app_id, store_backend="memory")
    events = app.topic("events", key_serde=sk.serdes.String(), value_serde=sk.serdes.Json(), partitions=2)

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        (b.stream(events).group_by(lambda key, value: value["page"], key_serde=sk.serdes.String())
          .count(name="counts").to_stream().to("counts"))
    return app


def _produce(directory: Path, partition: int, count: int, first_ts: int = 1_000) -> None:
    with EmbeddedBroker(directory) as broker:
        broker.create_topic("events", 2, exist_ok=True)
        broker.append("events", partition, [(f"u{i}".encode(), orjson.dumps({"page": f"p{i % 7}"}),
                                             first_ts + i, None) for i in range(count)])


def test_records_deleted_before_the_worker_read_them_are_logged_and_counted(tmp_path: Path, caplog) -> None:
    directory = tmp_path / "broker"
    _produce(directory, 0, 500)
    _produce(directory, 1, 500)
    app = _count_app("lost")
    app.run(broker=f"embedded://{directory}", until_idle=1.0)  # committed: 500 of events[0]
    _produce(directory, 0, 500, first_ts=2_000)  # offsets 500-999, then retention takes 500-899
    with EmbeddedBroker(directory) as broker:
        broker.delete_records({TopicPartition("events", 0): 900})
    with caplog.at_level(logging.WARNING):
        totals = app.run(broker=f"embedded://{directory}", until_idle=1.0)
    assert totals.records_lost_to_retention == 400
    warnings = [r.getMessage() for r in caplog.records if "deleted" in r.getMessage()]
    assert any("events[0]: 400 record(s) at offsets 500 to 899" in w for w in warnings), warnings
    with EmbeddedBroker(directory) as broker:
        assert broker.committed_offsets("lost")[TopicPartition("events", 0)] == 1_000


def test_a_gap_in_a_repartition_topic_stops_the_worker(tmp_path: Path) -> None:
    directory = tmp_path / "broker"
    _produce(directory, 0, 300)
    app = _count_app("gap")
    app.run(broker=f"embedded://{directory}", until_idle=1.0)
    repartition = "gap-counts-repartition"
    with EmbeddedBroker(directory) as broker:
        committed = broker.committed_offsets("gap")[TopicPartition(repartition, 0)]
        # records the app has not read yet, deleted under it: only a bug (or a hand) does this
        broker.append(repartition, 0, [(b"p1", b"x", 5_000 + i, None) for i in range(10)])
        broker.delete_records({TopicPartition(repartition, 0): committed + 5})
    with pytest.raises(StreamkitError, match=rf"internal topic {repartition}\[0\]: offsets {committed} to "
                                             rf"{committed + 4} were deleted"):
        app.run(broker=f"embedded://{directory}", until_idle=1.0)


def test_repartition_topics_are_purged_below_the_committed_offsets(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(committer_module, "PURGE_INTERVAL", 0.0)
    directory = tmp_path / "broker"
    _produce(directory, 0, 2_000)
    _produce(directory, 1, 2_000)
    app = _count_app("purged")
    app.run(broker=f"embedded://{directory}", until_idle=1.0)
    with EmbeddedBroker(directory) as broker:
        committed = broker.committed_offsets("purged")
        meta = broker.topic("purged-counts-repartition")
        assert meta is not None and meta.config.get("retention.ms") == "-1"
        for partition in range(meta.partitions):
            tp = TopicPartition("purged-counts-repartition", partition)
            offsets = broker.partition_offsets(*tp)
            assert offsets.end > 0
            # everything the reader committed past is gone, nothing it had not read
            assert offsets.start == committed[tp], (tp, offsets, committed[tp])
