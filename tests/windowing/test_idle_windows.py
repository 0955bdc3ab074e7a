"""close_idle_windows_after: a task whose input is idle advances its stream time by
the wall clock, so its windows close and suppressed results go out.

Every case is a list of steps: a record piped in (``rec(key, value, timestamp)``) or the
wall clock moved on (``wall(seconds)``), each with the exact records emitted right after
it and the ``idle_stream_time_advances`` metric then. The wall clock starts at 0.

Windows are tumbling, 10 s with 2 s grace: [0,10000) closes at stream time 12000.
"""
from __future__ import annotations

from datetime import timedelta
from typing import Any, Callable, List, Optional, Tuple

import pytest

import streamkit as sk
from streamkit.serdes import Bytes
from streamkit.testing import TopologyTestDriver

SEC = timedelta(seconds=1)
W = sk.Windowed
TUMBLING = sk.TumblingWindows(size=10 * SEC, grace=2 * SEC)

Action = Tuple[Any, ...]
Step = Tuple[Action, List[Tuple[Any, Any, int]], int]


def rec(key: Any, value: Any, timestamp: int) -> Action:
    return ("rec", key, value, timestamp)


def wall(seconds: float) -> Action:
    return ("wall", seconds)


def counts(*, idle: Optional[timedelta] = None, suppress: bool = False,
           repartition: bool = False) -> Callable[[sk.StreamsBuilder], None]:
    """Windowed count "agg" (per-operation close_idle_windows_after=idle), optionally
    followed by suppress(until_window_closes) "final"; late records go to "late"."""
    def build(b: sk.StreamsBuilder) -> None:
        stream = b.stream("in")
        grouped = stream.group_by(lambda k, v: v) if repartition else stream.group_by_key()
        table = grouped.windowed_by(TUMBLING).count(name="agg", late_records_topic="late",
                                                   close_idle_windows_after=idle)
        if suppress:
            table = table.suppress(sk.Suppressed.until_window_closes(), name="final")
        table.to_stream().to("out")
    return build


def rate_limited(limit: timedelta) -> Callable[[sk.StreamsBuilder], None]:
    def build(b: sk.StreamsBuilder) -> None:
        (b.stream("in").group_by_key().count(name="agg")
         .suppress(sk.Suppressed.until_time_limit(limit), name="limited").to_stream().to("out"))
    return build


def make_driver(build: Callable[[sk.StreamsBuilder], None], app_idle: Optional[timedelta]) -> TopologyTestDriver:
    app = sk.App("t", close_idle_windows_after=app_idle)
    app.topology(build)
    return TopologyTestDriver(app)


def run_steps(driver: TopologyTestDriver, steps: List[Step]) -> None:
    source = driver.input_topic("in")
    out = driver.output_topic("out")
    for index, (action, expected, advances) in enumerate(steps):
        if action[0] == "rec":
            _, key, value, timestamp = action
            source.pipe_input(key, value, timestamp)
        else:
            driver.advance_wall_clock(timedelta(seconds=action[1]))
        where = f"after step {index} {action} (wall clock {driver.wall_clock} ms)"
        assert [(r.key, r.value, r.timestamp) for r in out.read_records()] == expected, where
        assert driver.metrics()["idle_stream_time_advances"] == advances, where


CASES = [
    pytest.param(counts(suppress=True), None, [
        (rec("a", 1, 1000), [], 0),
        (wall(60), [], 0),
        (wall(3600), [], 0),
        (rec("a", 1, 4000), [], 0),                  # stream time never moved: [0,10000) still open
        (rec("b", 1, 12000), [(W("a", 0, 10000), 2, 4000)], 0),
    ], 0, id="off-by-default-suppressed"),
    pytest.param(counts(), None, [
        (rec("a", 1, 1000), [(W("a", 0, 10000), 1, 1000)], 0),
        (wall(600), [], 0),
        (rec("a", 1, 2000), [(W("a", 0, 10000), 2, 2000)], 0),   # not late
    ], 0, id="off-by-default-not-late"),
    pytest.param(counts(suppress=True), 5 * SEC, [
        (rec("a", 1, 1000), [], 0),
        (rec("a", 1, 3000), [], 0),                  # last input at wall clock 0, stream time 3000
        (wall(4), [], 0),                            # idle 4 s < 5 s
        (wall(4), [], 1),                            # idle 8 s: stream time 3000 + 8000 = 11000
        (wall(2), [(W("a", 0, 10000), 2, 3000)], 2),  # + 2000 = 13000 >= 12000
        (wall(1), [], 3),                            # 14000
        (wall(0), [], 3),                            # no time passed: no advance
        (rec("a", 1, 4000), [], 3),                  # late now: dropped
        (rec("a", 1, 14500), [], 3),                 # [10000,20000) is open
    ], 1, id="app-level-suppressed"),
    pytest.param(counts(idle=5 * SEC, suppress=True), None, [
        (rec("a", 1, 1000), [], 0),
        (rec("a", 1, 3000), [], 0),
        (wall(4), [], 0),
        (wall(4), [], 1),
        (wall(2), [(W("a", 0, 10000), 2, 3000)], 2),
        (wall(1), [], 3),
        (rec("a", 1, 4000), [], 3),
    ], 1, id="per-operation-suppressed"),
    pytest.param(counts(idle=5 * SEC), None, [
        (rec("a", 1, 1000), [(W("a", 0, 10000), 1, 1000)], 0),
        (wall(12), [], 1),                           # stream time 1000 + 12000 = 13000
        (rec("a", 1, 2000), [], 1),                  # late
        (rec("a", 1, 13500), [(W("a", 10000, 20000), 1, 13500)], 1),
        (wall(3), [], 1),                            # idle again, only 3 s
    ], 1, id="per-operation-late-after-idle"),
    pytest.param(counts(idle=20 * SEC, suppress=True), 5 * SEC, [
        # The operation's own setting wins over the app default, suppression or not.
        (rec("a", 1, 1000), [], 0),
        (wall(10), [], 0),
        (wall(9), [], 0),
        (wall(1), [(W("a", 0, 10000), 1, 1000)], 1),  # idle 20 s: stream time 21000
    ], 0, id="per-operation-longer-than-app-default-suppressed"),
    pytest.param(counts(idle=20 * SEC), 5 * SEC, [
        (rec("a", 1, 1000), [(W("a", 0, 10000), 1, 1000)], 0),
        (wall(10), [], 0),
        (wall(10), [], 1),
        (rec("a", 1, 2000), [], 1),                  # late
    ], 1, id="per-operation-longer-than-app-default"),
    pytest.param(counts(idle=5 * SEC, suppress=True), 20 * SEC, [
        (rec("a", 1, 1000), [], 0),
        (wall(5), [], 1),                            # 6000
        (wall(6), [(W("a", 0, 10000), 1, 1000)], 2),  # 12000
    ], 0, id="per-operation-shorter-than-app-default"),
    pytest.param(counts(suppress=True), 5 * SEC, [
        (rec("a", 1, 1000), [], 0),
        (wall(4), [], 0),
        (rec("b", 1, 2000), [], 0),                  # input at wall clock 4 s: idle again from there
        (wall(4), [], 0),
        (wall(1), [], 1),                            # idle 5 s: stream time 2000 + 5000 = 7000
        (wall(5), [(W("a", 0, 10000), 1, 1000), (W("b", 0, 10000), 1, 2000)], 2),  # 12000
    ], 0, id="input-resets-the-idle-timer"),
    pytest.param(counts(suppress=True), 5 * SEC, [
        (wall(60), [], 0),                           # no record yet: no stream time to advance
        (rec("a", 1, 1000), [], 0),                  # last input at wall clock 60 s
        (wall(11), [(W("a", 0, 10000), 1, 1000)], 1),
    ], 0, id="no-advance-before-the-first-record"),
    pytest.param(counts(suppress=True, repartition=True), 5 * SEC, [
        (rec("u1", "home", 1000), [], 0),
        (rec("u2", "home", 2000), [], 0),
        (wall(5), [], 1),                            # only the aggregating task advances
        (wall(5), [(W("home", 0, 10000), 2, 2000)], 2),
    ], 0, id="after-repartition"),
    pytest.param(rate_limited(10 * SEC), 5 * SEC, [
        (rec("a", 1, 1000), [], 0),                  # due at stream time 11000
        (rec("a", 1, 1500), [], 0),
        (wall(5), [], 1),                            # 6500
        (wall(5), [("a", 2, 1500)], 2),              # 11500
    ], 0, id="time-limited-suppression-released"),
]


@pytest.mark.parametrize("build, app_idle, steps, late", CASES)
def test_idle_windows(build: Callable[[sk.StreamsBuilder], None], app_idle: Optional[timedelta],
                      steps: List[Step], late: int) -> None:
    driver = make_driver(build, app_idle)
    run_steps(driver, steps)
    assert driver.metrics()["late_records_dropped"] == late


def test_record_late_after_an_idle_advance_goes_to_the_late_topic() -> None:
    driver = make_driver(counts(suppress=True), 5 * SEC)
    run_steps(driver, [
        (rec("a", 1, 1000), [], 0),
        (wall(15), [(W("a", 0, 10000), 1, 1000)], 1),   # stream time 16000
        (rec("a", 7, 9000), [], 1),
    ])
    late = driver.output_topic("late", key_serde=Bytes(), value_serde=Bytes()).read_records()
    assert [(r.key, r.value, r.timestamp, dict(r.headers)) for r in late] == [
        (b"a", b"7", 9000, {
            "streamkit.late.node": b"agg", "streamkit.late.topic": b"in", "streamkit.late.partition": b"0",
            "streamkit.late.offset": b"1", "streamkit.late.timestamp": b"9000",
            "streamkit.late.stream_time": b"16000"})]
    assert driver.metrics()["late_records_dropped"] == 1


def test_idle_advance_closes_windows_for_the_store_too() -> None:
    driver = make_driver(counts(), 5 * SEC)
    driver.input_topic("in").pipe_input("a", 1, 1000)
    driver.advance_wall_clock(30 * SEC)                  # stream time 31000: [0,10000) expired (retention 12 s)
    assert list(driver.store("agg").fetch("a", 0, 100_000)) == []
    assert driver.metrics()["idle_stream_time_advances"] == 1


def test_idle_time_counts_from_when_the_task_starts_running_not_from_its_creation() -> None:
    """A worker creates a task, then restores its stores (maybe for minutes): that wait is
    not idle input, so it must not advance stream time."""
    from streamkit.runtime.task.factory import TaskSettings, create_task
    from streamkit.runtime.context.collector import RecordCollector

    app = sk.App("idle-restore", close_idle_windows_after=5 * SEC)

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        (b.stream(app.topic("in", partitions=1)).group_by_key()
          .windowed_by(sk.TumblingWindows(10 * SEC)).count(name="agg").to_stream().to("out"))
    topology = app.build()
    clock = [0]
    task = create_task(topology, topology.sub_topologies[0], 0, partitions={t: 1 for t in topology.topics},
                       collector=RecordCollector(), wall_clock=lambda: clock[0],
                       settings=TaskSettings(close_idle_windows_after_ms=5_000))
    task.stores.record_stream_time(1_000)  # as restored from the changelog
    clock[0] = 60_000  # the restore took a minute
    task.punctuate_wall_clock()
    assert task.stream_time == 1_000 and task.metrics.idle_stream_time_advances == 0
    clock[0] = 66_000
    task.punctuate_wall_clock()
    assert task.stream_time == 7_000 and task.metrics.idle_stream_time_advances == 1
