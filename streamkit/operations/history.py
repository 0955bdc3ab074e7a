"""The last minutes of a worker, for the live page: counters sampled once a second.

:class:`WorkerHistory` keeps a ring of samples of counters the worker keeps anyway
(per task: records processed, late drops, dead-lettered and skipped records, lag;
restores in progress), taken in the HTTP thread, so the processing path pays nothing
for it. A snapshot adds what the worker's observations say at that moment: restores in
progress (their rate and ETA measured over the samples), the latest finished restores
and commits (which the worker records once per restore and per commit). Rates are differences of consecutive samples
(a counter that went down, a task that moved here and restarted from 0, counts 0).
Series are per task, per sub-topology (the sum of its tasks) and for the worker.
``/history`` serves :meth:`WorkerHistory.snapshot`; a page that already holds the
samples up to ``since`` gets only the newer ones.
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Deque, Dict, List, Mapping, Optional, TYPE_CHECKING, Tuple

if TYPE_CHECKING:  # the runtime loads only when a worker runs
    from ..runtime.worker.observations import WorkerObservations
    from ..runtime.worker.view import WorkerView

SAMPLE_EVERY_S = 1.0
"""Seconds between samples."""
WINDOW_S = 300.0
"""Seconds of samples kept (and shown by the page)."""
COMMITS_SHOWN = 60
"""Latest commits in a snapshot."""
RESTORE_RATE_OVER_S = 10.0
"""A restore's rate (and so its ETA) is measured over this many seconds of samples."""


@dataclass(frozen=True)
class TaskSample:
    """One task's counters at one sample (cumulative since the task started here)."""

    processed: int
    late_dropped: int
    dead_lettered: int
    skipped: int
    lag: Optional[int]
    """Records behind the ends of the task's input partitions (None: not known yet)."""


@dataclass(frozen=True)
class Sample:
    at: float
    """Wall-clock time (seconds since the epoch)."""
    tasks: Mapping[str, TaskSample]
    restoring: Mapping[str, Tuple[int, int]]
    """Per restoring task: (records restored, records remaining)."""


def sub_topology_of(task_id: str) -> str:
    """The sub-topology of a task id ``S_P`` (``"0"`` of ``"0_3"``)."""
    return task_id.split("_", 1)[0]


@dataclass(frozen=True)
class Moment:
    """What the worker's observations say now, beside the samples (read in the HTTP
    thread when a snapshot is asked for)."""

    restoring: Mapping[str, Tuple[int, int]]
    """Per task restoring now: (records restored, records remaining)."""
    restoring_since: Mapping[str, float]
    """Per task restoring now: wall-clock time its restore started."""
    commits: List[Tuple[float, float, int]]
    """The latest commits, oldest first: (ended, seconds, records)."""
    restores: List[Tuple[str, int, float, float]]
    """The latest finished restores, oldest first: (task, records, seconds, ended)."""
    at: float


class WorkerHistory:
    """The ring of samples (see the module docstring); :meth:`add` and :meth:`snapshot`
    are called from one thread (the HTTP thread)."""

    def __init__(self, window_s: float = WINDOW_S, every_s: float = SAMPLE_EVERY_S) -> None:
        self.window_s = window_s
        self.every_s = every_s
        self.samples: Deque[Sample] = deque(maxlen=int(window_s / every_s) + 1)

    def add(self, sample: Sample) -> None:
        self.samples.append(sample)

    def snapshot(self, moment: Moment, since_ms: Optional[int] = None) -> Dict[str, Any]:
        """The series after ``since_ms`` (epoch ms; None: all kept), the restores in
        progress now with their rate and ETA (measured over the samples), the latest
        finished restores and the latest commits."""
        samples = list(self.samples)
        pairs = [(before, after) for before, after in zip(samples, samples[1:])
                 if since_ms is None or int(after.at * 1000) > since_ms]
        tasks = sorted({task for _, after in pairs for task in after.tasks})
        subs = sorted({sub_topology_of(task) for task in tasks}, key=_numeric_first)
        times = [int(after.at * 1000) for _, after in pairs]
        per_task: Dict[str, Dict[str, List[Optional[float]]]] = {
            task: {"records_per_second": [], "lag": [], "late_per_second": [], "dead_lettered_per_second": []}
            for task in tasks}
        per_sub: Dict[str, Dict[str, List[Optional[float]]]] = {
            sub: {"records_per_second": [], "lag": []} for sub in subs}
        totals: Dict[str, List[Optional[float]]] = {
            "records_per_second": [], "late_per_second": [], "dead_lettered_per_second": [],
            "skipped_per_second": [], "lag": []}
        for before, after in pairs:
            seconds = max(after.at - before.at, 1e-6)
            sub_rate: Dict[str, float] = {}
            sub_lag: Dict[str, Optional[int]] = {}
            sums = {"records_per_second": 0.0, "late_per_second": 0.0, "dead_lettered_per_second": 0.0,
                    "skipped_per_second": 0.0}
            lag_total: Optional[int] = None
            for task in tasks:
                now, then = after.tasks.get(task), before.tasks.get(task)
                series = per_task[task]
                if now is None:
                    for values in series.values():
                        values.append(None)
                    continue
                rates = {"records_per_second": _rate(now.processed, then and then.processed, seconds),
                         "late_per_second": _rate(now.late_dropped, then and then.late_dropped, seconds),
                         "dead_lettered_per_second": _rate(now.dead_lettered, then and then.dead_lettered,
                                                           seconds),
                         "skipped_per_second": _rate(now.skipped, then and then.skipped, seconds)}
                for name, value in rates.items():
                    if name in series:
                        series[name].append(round(value, 2))
                    sums[name] += value
                series["lag"].append(now.lag)
                sub = sub_topology_of(task)
                sub_rate[sub] = sub_rate.get(sub, 0.0) + rates["records_per_second"]
                if now.lag is not None:
                    sub_lag[sub] = (sub_lag.get(sub) or 0) + now.lag
                    lag_total = (lag_total or 0) + now.lag
            for sub in subs:
                per_sub[sub]["records_per_second"].append(round(sub_rate[sub], 2) if sub in sub_rate else None)
                per_sub[sub]["lag"].append(sub_lag.get(sub))
            for name, value in sums.items():
                totals[name].append(round(value, 2))
            totals["lag"].append(lag_total)
        last = samples[-1] if samples else None
        return {
            "every_s": self.every_s, "window_s": self.window_s,
            "now": int((last.at if last else time.time()) * 1000),
            "times": times, "tasks": per_task, "sub_topologies": per_sub, "worker": totals,
            "totals": _totals(last),
            "restores": self._restores(samples, moment),
            "finished_restores": [{"task": task, "records": records, "seconds": round(seconds, 3),
                                   "ended": int(ended * 1000)} for task, records, seconds, ended in moment.restores],
            "commits": [{"ended": int(ended * 1000), "seconds": round(seconds, 6), "records": records}
                        for ended, seconds, records in moment.commits[-COMMITS_SHOWN:]],
        }

    def _restores(self, samples: List[Sample], moment: Moment) -> List[Dict[str, Any]]:
        """The restores in progress now: progress, rate over the last RESTORE_RATE_OVER_S
        of samples (or since the restore started) and the ETA it gives (None while
        there is no rate yet)."""
        out = []
        for task, (restored, remaining) in sorted(moment.restoring.items()):
            started = moment.restoring_since.get(task, moment.at)
            earlier = next((s for s in samples if s.at >= moment.at - RESTORE_RATE_OVER_S and task in s.restoring
                            and s.at < moment.at), None)
            then_at, then_restored = (earlier.at, earlier.restoring[task][0]) if earlier else (started, 0)
            rate = None
            if moment.at - then_at >= 0.2:
                rate = max(restored - then_restored, 0) / (moment.at - then_at)
            out.append({"task": task, "restored": restored, "total": restored + remaining,
                        "records_per_second": None if rate is None else round(rate, 1),
                        "eta_seconds": round(remaining / rate, 1) if rate else None,
                        "started": int(started * 1000)})
        return out


def _rate(now: int, then: Optional[int], seconds: float) -> float:
    """Per second between two readings of a counter (0 when there is no earlier
    reading, or the counter restarted)."""
    if then is None or now < then:
        return 0.0
    return (now - then) / seconds


def _totals(sample: Optional[Sample]) -> Dict[str, int]:
    """The worker's counters at ``sample`` (its tasks' sums)."""
    tasks = sample.tasks.values() if sample is not None else ()
    return {"records_processed": sum(t.processed for t in tasks),
            "late_records_dropped": sum(t.late_dropped for t in tasks),
            "records_dead_lettered": sum(t.dead_lettered for t in tasks),
            "records_skipped": sum(t.skipped for t in tasks)}


def _numeric_first(name: str) -> Tuple[int, str]:
    return (int(name), "") if name.isdigit() else (1 << 30, name)


def take_moment(observations: WorkerObservations) -> Moment:
    """The observations' restores and commits now (from any thread; a container the
    worker changes meanwhile raises RuntimeError: the caller reads again)."""
    return Moment(dict(observations.restoring), dict(observations.restoring_since),
                  list(observations.recent_commits), list(observations.recent_restores), time.time())


def take_sample(worker: WorkerView, lag: Mapping[Any, int], at: Optional[float] = None) -> Sample:
    """The worker's counters now (plain numbers, read from any thread; a dict the worker
    resizes meanwhile raises RuntimeError: the caller reads again)."""
    tasks = {}
    for task_id, task in list(worker.tasks.items()):
        metrics = task.metrics
        partitions = task.input_partitions
        known = [lag[tp] for tp in partitions if tp in lag]
        tasks[task_id] = TaskSample(metrics.records_processed, metrics.late_records_dropped,
                                    metrics.records_dead_lettered, metrics.records_skipped,
                                    sum(known) if known else None)
    return Sample(time.time() if at is None else at, tasks, dict(worker.observations.restoring))
