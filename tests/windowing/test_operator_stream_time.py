"""Stream time per operator (issue 18 item 7), as Kafka Streams keeps it: a windowed
aggregation, a suppression and a stream-stream join each advance their own stream time
only with records that reach them. A record dropped upstream (a None key, a filter,
another branch of the task) closes none of their windows. Each case lists the exact
output after every input record."""
from __future__ import annotations

import json
from datetime import timedelta
from typing import Any, Callable, List, Sequence, Tuple

import orjson
import pytest

import streamkit as sk
from streamkit.runtime.task.factory import TaskSettings, create_task
from streamkit.runtime.context.collector import RecordCollector
from streamkit.testing import TopologyTestDriver

MS = timedelta(milliseconds=1)
W = sk.Windowed

Record = Tuple[Any, Any, int]
Step = Tuple[Record, List[Record]]


def run(driver: TopologyTestDriver, steps: Sequence[Step], topic: str = "in") -> None:
    source, actual, expected = driver.input_topic(topic), [], []
    for (key, value, timestamp), outputs in steps:
        source.pipe_input(key, value, timestamp)
        actual.append(((key, value, timestamp),
                       [(r.key, r.value, r.timestamp) for r in driver.output_topic("out").read_records()]))
        expected.append(((key, value, timestamp), outputs))
    assert actual == expected


def counted(windows: Any, upstream: Callable[[sk.Stream], sk.Stream] = lambda s: s) -> TopologyTestDriver:
    app = sk.App("op-time")

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        upstream(b.stream("in")).group_by_key().windowed_by(windows).count(name="c").to_stream().to("out")
    return TopologyTestDriver(app)


def test_a_none_key_does_not_make_a_sliding_windows_record_late() -> None:
    """The issue's case: difference 7, grace 0, ``null-key@37, a@31``: a@[24,31] counts."""
    driver = counted(sk.SlidingWindows(time_difference=7 * MS))
    run(driver, [((None, "x", 37), []), (("a", "x", 31), [(W("a", 24, 31), 1, 31)])])
    assert driver.metrics()["null_key_records_dropped"] == 1
    assert driver.metrics()["late_records_dropped"] == 0


def test_a_none_value_does_not_move_a_sliding_aggregation_either() -> None:
    """Sliding windows skip None values before they count towards stream time, as Kafka does."""
    driver = counted(sk.SlidingWindows(time_difference=7 * MS))
    run(driver, [(("a", None, 37), []), (("a", "x", 31), [(W("a", 24, 31), 1, 31)])])


@pytest.mark.parametrize("windows, last", [
    (sk.TumblingWindows(size=10 * MS), [(W("a", 10, 20), 1, 12)]),
    (sk.SessionWindows(inactivity_gap=3 * MS), [(W("a", 12, 12), 1, 12)]),
], ids=["tumbling", "session"])
def test_a_record_filtered_upstream_or_without_a_key_does_not_close_windows(windows: Any, last: List[Record]
                                                                            ) -> None:
    driver = counted(windows, lambda s: s.filter(lambda k, v: v != "skip"))
    run(driver, [(("a", "skip", 50), []), ((None, "x", 60), []), (("a", "x", 12), last)])
    assert driver.metrics()["late_records_dropped"] == 0
    assert driver.metrics()["null_key_records_dropped"] == 1


def test_each_branch_of_a_task_has_its_own_windows_stream_time() -> None:
    """Two aggregations in one task: x's records far ahead do not make y's late."""
    app = sk.App("op-time-branches")

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        branches = (b.stream("in").split().branch(lambda k, v: k.startswith("x"), name="x")
                    .default_branch(name="y"))
        for name, stream in branches.items():
            (stream.group_by_key().windowed_by(sk.TumblingWindows(size=10 * MS)).count(name=f"c-{name}")
             .to_stream().to("out"))
    driver = TopologyTestDriver(app)
    run(driver, [(("x1", 1, 100), [(W("x1", 100, 110), 1, 100)]),
                 (("y1", 1, 5), [(W("y1", 0, 10), 1, 5)]),
                 (("y1", 1, 12), [(W("y1", 10, 20), 1, 12)]),
                 (("y1", 1, 7), [])])                     # late for y's aggregation: [0,10) closed at 12
    assert driver.metrics()["late_records_dropped"] == 1


def test_a_suppression_releases_only_when_its_own_updates_move_its_stream_time() -> None:
    """A None key at 100 never reaches the aggregation or the suppression: the window
    [0,10) is released by a@12, the first update the suppression sees past its close."""
    app = sk.App("op-time-suppress")

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        (b.stream("in").group_by_key().windowed_by(sk.TumblingWindows(size=10 * MS)).count(name="c")
         .suppress(sk.Suppressed.until_window_closes()).to_stream().to("out"))
    run(TopologyTestDriver(app), [
        (("a", 1, 5), []),
        ((None, 1, 100), []),
        (("b", 1, 9), []),                                # on time for the aggregation (its time is 5)
        (("a", 1, 12), [(W("a", 0, 10), 1, 5), (W("b", 0, 10), 1, 9)]),
    ])


def test_a_late_record_does_not_reach_the_suppression() -> None:
    """Grace 0: ``a@20`` closes [0,10); the late ``b@3`` is dropped by the aggregation and
    moves nothing downstream."""
    app = sk.App("op-time-late")

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        (b.stream("in").group_by_key().windowed_by(sk.TumblingWindows(size=10 * MS)).count(name="c")
         .suppress(sk.Suppressed.until_window_closes()).to_stream().to("out"))
    driver = TopologyTestDriver(app)
    run(driver, [(("a", 1, 5), []), (("a", 1, 20), [(W("a", 0, 10), 1, 5)]), (("b", 1, 3), []),
                 (("a", 1, 31), [(W("a", 20, 30), 1, 20)])])
    assert driver.metrics()["late_records_dropped"] == 1


def test_a_stream_stream_join_is_not_moved_by_a_record_filtered_before_it() -> None:
    """Before/after 5, grace 0: ``l:a@0``, a filtered ``r@100``, ``r:a@3``: they join."""
    app = sk.App("op-time-join")

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        right = b.stream("right").filter(lambda k, v: v != "skip")
        b.stream("left").join(right, lambda l, r: f"{l}+{r}", sk.JoinWindows.of(5 * MS), name="j").to("out")
    driver = TopologyTestDriver(app)
    driver.input_topic("left").pipe_input("a", "l", 0)
    driver.input_topic("right").pipe_input("z", "skip", 100)
    driver.input_topic("right").pipe_input("a", "r", 3)
    assert [(r.key, r.value, r.timestamp) for r in driver.output_topic("out").read_records()] == [("a", "l+r", 3)]


# -- restart: each operator resumes its own stream time -------------------------------------------

def _branch_task(tmp_path: Any) -> Tuple[Any, RecordCollector]:
    app = sk.App("op-time-restart")

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        branches = (b.stream(app.topic("in", partitions=1)).split()
                    .branch(lambda k, v: k.startswith("x"), name="x").default_branch(name="y"))
        for name, stream in branches.items():
            (stream.group_by_key().windowed_by(sk.TumblingWindows(size=10 * MS)).count(name=f"c-{name}")
             .to_stream().to("out"))
    topology = app.build()
    collector = RecordCollector()
    task = create_task(topology, topology.sub_topologies[0], 0, partitions={t: 1 for t in topology.topics},
                       collector=collector, wall_clock=lambda: 0,
                       settings=TaskSettings(store_backend="rocksdb", state_dir=str(tmp_path), caching=False))
    return task, collector


def _outputs(collector: RecordCollector) -> List[Tuple[Any, int]]:
    return [(json.loads(k)["key"], orjson.loads(v)) for topic, _p, records in collector.drain() if topic == "out"
            for k, v, _ts, _h in records]


def test_a_restarted_task_resumes_each_operators_own_stream_time(tmp_path: Any) -> None:
    task, collector = _branch_task(tmp_path)
    task.process("in", [(0, 100, b"x1", b"1", None), (1, 12, b"y1", b"1", None)])
    task.prepare_commit()
    task.stores.persist({})
    task.stores.close()
    assert _outputs(collector) == [("x1", 1), ("y1", 1)]

    task, collector = _branch_task(tmp_path)
    # y's time is 12: y1@1 is late ([0,10) closed), y1@95 is not (it would be at the task's 100).
    task.process("in", [(2, 1, b"y1", b"1", None), (3, 95, b"y1", b"1", None)])
    assert _outputs(collector) == [("y1", 1)]
    assert task.metrics.late_records_dropped == 1
    assert task.stream_time == 100
    task.stores.close()


# -- property: records that never reach an operator change nothing -------------------------------

def _suppressed_counts(windows: Any, skip: bool) -> TopologyTestDriver:
    app = sk.App("op-time-property")

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        stream = b.stream("in")
        if skip:
            stream = stream.filter(lambda k, v: v != "skip")
        counts = stream.group_by_key().windowed_by(windows).count(name="c")
        counts.to_stream().to("out")
        counts.suppress(sk.Suppressed.until_window_closes()).to_stream().to("final")
    return TopologyTestDriver(app)


@pytest.mark.parametrize("windows", [
    sk.TumblingWindows(size=10 * MS, grace=2 * MS),
    sk.HoppingWindows(size=10 * MS, advance=5 * MS),
    sk.SlidingWindows(time_difference=6 * MS, grace=1 * MS),
    sk.SessionWindows(inactivity_gap=4 * MS, grace=2 * MS),
], ids=["tumbling", "hopping", "sliding", "session"])
def test_records_filtered_out_or_without_a_key_change_no_output(windows: Any) -> None:
    """Invariant: inserting records that never reach the aggregation (filtered out, or
    with a None key) anywhere in the input, at any timestamp, leaves every output record
    (updates and suppressed finals, in order) as it was."""
    import random
    rng = random.Random(f"operator time {windows!r}")
    for _case in range(40):
        clean: List[Record] = []
        noisy: List[Record] = []
        clock = 0
        for _ in range(rng.randint(5, 40)):
            clock += rng.randint(0, 4)
            record = (rng.choice("ab"), "v", max(0, clock - rng.choice([0, 0, 1, 3, 8, 15])))
            clean.append(record)
            noisy.append(record)
            if rng.random() < 0.3:
                noisy.append(("a", "skip", clock + rng.randint(0, 60)) if rng.random() < 0.5
                             else (None, "v", clock + rng.randint(0, 60)))
        outputs = []
        for records in (clean, noisy):
            driver = _suppressed_counts(windows, skip=True)
            for key, value, timestamp in records:
                driver.input_topic("in").pipe_input(key, value, timestamp)
            outputs.append([[(r.key, r.value, r.timestamp) for r in driver.output_topic(t).read_records()]
                            for t in ("out", "final")])
        assert outputs[0] == outputs[1], (clean, noisy)
