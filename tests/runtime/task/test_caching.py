"""Record caching: with caching on, an aggregation forwards each key once per commit."""
from __future__ import annotations

import orjson
import pytest

import streamkit as sk
from streamkit.runtime.task.factory import TaskSettings, create_task
from streamkit.runtime.context.collector import RecordCollector


def _count_task(caching: bool, backend: str, tmp_path):
    app = sk.App("cache")
    app.topology(lambda b: b.stream(app.topic("in", partitions=1)).group_by_key().count(name="c")
                 .to_stream().to("out"))
    topology = app.build()
    collector = RecordCollector()
    partitions = {t: 1 for t in topology.topics}
    task = create_task(topology, topology.sub_topologies[0], 0, partitions=partitions, collector=collector,
                       wall_clock=lambda: 0,
                       settings=TaskSettings(store_backend=backend, state_dir=str(tmp_path), caching=caching))
    return task, collector


def _records(keys, start_offset=0, ts=100):
    return [(start_offset + i, ts + i, k.encode(), b"1", None) for i, k in enumerate(keys)]


def _outputs(collector):
    return [(k.decode(), orjson.loads(v), ts) for topic, _p, records in collector.drain() if topic == "out"
            for k, v, ts, _h in records]


@pytest.mark.parametrize("backend", ["memory", "rocksdb"])
def test_caching_forwards_latest_per_key_at_commit(backend, tmp_path) -> None:
    task, collector = _count_task(True, backend, tmp_path)
    task.process("in", _records(["a", "b", "a", "a"]))
    assert _outputs(collector) == []  # nothing before the commit
    task.stores.flush()
    assert _outputs(collector) == [("a", 3, 103), ("b", 1, 101)]
    task.stores.persist({})
    task.process("in", _records(["a"], start_offset=4, ts=200))
    task.stores.flush()
    assert _outputs(collector) == [("a", 4, 200)]
    task.stores.close()


def test_without_caching_every_update_is_forwarded(tmp_path) -> None:
    task, collector = _count_task(False, "memory", tmp_path)
    task.process("in", _records(["a", "b", "a"]))
    assert _outputs(collector) == [("a", 1, 100), ("b", 1, 101), ("a", 2, 102)]
    task.stores.flush()
    assert _outputs(collector) == []


def test_changelog_holds_one_record_per_key_per_commit(tmp_path) -> None:
    task, _collector = _count_task(True, "memory", tmp_path)
    task.process("in", _records(["a"] * 100 + ["b"]))
    [(topic, partition, records)] = task.stores.changelog_batches(timestamp=task.stream_time)
    assert topic == "cache-c-changelog" and partition == 0
    assert [k for k, _v, _ts, _h in records] == [b'"a"', b'"b"']  # store keys are JSON


def _windowed_task(tmp_path, *, suppress: bool):
    from datetime import timedelta
    app = sk.App("cache-windows")

    @app.topology
    def build(b):
        table = (b.stream(app.topic("in", partitions=1)).group_by_key()
                 .windowed_by(sk.TumblingWindows(timedelta(milliseconds=10))).count(name="w"))
        if suppress:  # a filter between the aggregation and the suppression
            table = table.filter(lambda k, v: True).suppress(sk.Suppressed.until_window_closes())
        table.to_stream().to("out")
    topology = app.build()
    collector = RecordCollector()
    partitions = {t: 1 for t in topology.topics}
    task = create_task(topology, topology.sub_topologies[0], 0, partitions=partitions, collector=collector,
                       wall_clock=lambda: 0, settings=TaskSettings(store_backend="rocksdb",
                                                                   state_dir=str(tmp_path), caching=True))
    return task, collector


def _window_outputs(collector):
    return [(orjson.loads(k)["start"], orjson.loads(v)) for topic, _p, records in collector.drain()
            if topic == "out" for k, v, _ts, _h in records]


def test_caching_coalesces_window_updates_per_commit(tmp_path) -> None:
    task, collector = _windowed_task(tmp_path, suppress=False)
    task.process("in", [(0, 1, b"a", b"1", None), (1, 2, b"a", b"1", None), (2, 12, b"a", b"1", None)])
    assert _window_outputs(collector) == []
    task.prepare_commit()
    assert _window_outputs(collector) == [(0, 2), (10, 1)]
    task.stores.close()


def test_a_suppression_downstream_gets_every_window_update_despite_caching(tmp_path) -> None:
    # Were the updates cached until the commit, the record at 12 would close [0, 10) while
    # the suppression still held its count as 1, and the final result would be wrong.
    task, collector = _windowed_task(tmp_path, suppress=True)
    task.process("in", [(0, 1, b"a", b"1", None), (1, 2, b"a", b"1", None), (2, 12, b"a", b"1", None)])
    assert _window_outputs(collector) == [(0, 2)]
    task.stores.close()


def test_a_cached_table_self_join_forwards_one_result_per_key_at_commit(tmp_path) -> None:
    """The cache flush feeds a self-join the row before the interval as the old value."""
    app = sk.App("cache-self")

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        table = b.table(app.topic("t", partitions=1), name="T")
        table.join(table.map_values(lambda v: v * 10), lambda a, c: [a, c], name="J").to_stream().to("out")
    topology = app.build()
    collector = RecordCollector()
    task = create_task(topology, topology.sub_topologies[0], 0, partitions={t: 1 for t in topology.topics},
                       collector=collector, wall_clock=lambda: 0,
                       settings=TaskSettings(store_backend="rocksdb", state_dir=str(tmp_path), caching=True))
    task.process("t", [(0, 100, b"a", b"1", None), (1, 101, b"a", b"2", None), (2, 102, b"b", b"3", None)])
    task.stores.flush()
    assert _outputs(collector) == [("a", [2, 20], 101), ("b", [3, 30], 102)]
    task.stores.persist({})
    task.process("t", [(3, 200, b"a", None, None), (4, 201, b"b", b"4", None)])
    task.stores.flush()
    outputs = [(k.decode(), None if v is None else orjson.loads(v), ts)
               for topic, _p, records in collector.drain() if topic == "out" for k, v, ts, _h in records]
    assert outputs == [("a", None, 200), ("b", [4, 40], 201)]
    task.stores.close()
