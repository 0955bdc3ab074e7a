"""/history's ring (streamkit.operations.history): rates from consecutive samples of the
worker's counters, per task, per sub-topology and for the worker; a restarted counter or
a task that moved counts no negative rate; ``since`` gives only newer samples; restores
in progress get a rate and an ETA."""
from __future__ import annotations

from streamkit.operations.history import Moment, Sample, TaskSample, WorkerHistory


def _task(processed: int, late: int = 0, dead: int = 0, lag: int = 0) -> TaskSample:
    return TaskSample(processed, late, dead, 0, lag)


def _moment(at: float, restoring=None, since=None) -> Moment:
    return Moment(restoring or {}, since or {}, [(at, 0.002, 10)], [("1_0", 500, 1.5, at - 5)], at)


def test_rates_per_task_sub_topology_and_worker() -> None:
    history = WorkerHistory(window_s=10, every_s=1)
    history.add(Sample(100.0, {"0_0": _task(0), "0_1": _task(0), "1_0": _task(0)}, {}))
    history.add(Sample(101.0, {"0_0": _task(100, late=2, lag=7), "0_1": _task(50, dead=1, lag=3),
                               "1_0": _task(10)}, {}))
    history.add(Sample(102.0, {"0_0": _task(5), "1_0": _task(30)}, {}))  # 0_0 restarted here, 0_1 moved away
    body = history.snapshot(_moment(102.0))
    assert body["times"] == [101_000, 102_000]
    assert body["tasks"]["0_0"]["records_per_second"] == [100, 0]
    assert body["tasks"]["0_1"]["records_per_second"] == [50, None]
    assert body["tasks"]["0_0"]["late_per_second"] == [2, 0]
    assert body["sub_topologies"]["0"] == {"records_per_second": [150, 0], "lag": [10, 0]}
    assert body["sub_topologies"]["1"]["records_per_second"] == [10, 20]
    assert body["worker"]["records_per_second"] == [160, 20]
    assert body["worker"]["dead_lettered_per_second"] == [1, 0]
    assert body["totals"]["records_processed"] == 35
    assert body["commits"] == [{"ended": 102_000, "seconds": 0.002, "records": 10}]
    assert body["finished_restores"] == [{"task": "1_0", "records": 500, "seconds": 1.5, "ended": 97_000}]
    newer = history.snapshot(_moment(102.0), since_ms=101_000)
    assert newer["times"] == [102_000] and newer["tasks"]["0_0"]["records_per_second"] == [0]


def test_the_ring_keeps_the_window() -> None:
    history = WorkerHistory(window_s=5, every_s=1)
    for second in range(20):
        history.add(Sample(float(second), {"0_0": _task(second * 10)}, {}))
    body = history.snapshot(_moment(19.0))
    assert body["times"] == [s * 1000 for s in range(15, 20)]
    assert body["tasks"]["0_0"]["records_per_second"] == [10] * 5


def test_a_restore_in_progress_has_a_rate_and_an_eta() -> None:
    history = WorkerHistory(window_s=60, every_s=1)
    history.add(Sample(10.0, {"0_0": _task(0)}, {"0_0": (1_000, 9_000)}))
    history.add(Sample(11.0, {"0_0": _task(0)}, {"0_0": (3_000, 7_000)}))
    body = history.snapshot(_moment(12.0, {"0_0": (5_000, 5_000)}, {"0_0": 9.5}))
    assert body["restores"] == [{"task": "0_0", "restored": 5_000, "total": 10_000, "records_per_second": 2_000.0,
                                 "eta_seconds": 2.5, "started": 9_500}]
    # no sample of it yet: measured from its start
    fresh = WorkerHistory().snapshot(_moment(12.0, {"0_1": (400, 1_600)}, {"0_1": 11.0}))
    assert fresh["restores"][0]["records_per_second"] == 400.0 and fresh["restores"][0]["eta_seconds"] == 4.0
