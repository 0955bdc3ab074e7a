"""Scale-out on the embedded broker: the peers' S1 and S2 with one worker process, then two.

``python -m bench scaling [--events N] [--partitions P] [--scenarios S1,S2] [--kafka [--broker HOST:PORT]]``

For each scenario and worker count, a fresh broker directory gets ``N`` events
(default 2,000,000; bench.peers.workload's events) in a topic of ``P`` partitions
(default 6, so two workers get three tasks each), then that many ``streamkit worker``-
like child processes start at once on it (bench.embedded_throughput's time_worker,
``until_idle`` 2 s, not counted). Workers on one directory share the tasks fairly
(transport.embedded.EmbeddedMembership): a worker that took more than its share gives
the rest back, committed, as soon as it sees the other.

Timed: from the earliest worker's start (each child reports it, wall clock) until the
group's committed offsets cover every event (this process looks every 5 ms), so a slow
hand-over counts and the workers' idle wait before exiting does not. Both runs commit
every 100 ms (the peers benchmark: every second), so the end is seen within that. events/s = N / that. The ratio
is two workers' events/s over one worker's, measured one after the other on the same
machine (2 cores: two workers can at best double one).

Verified before a figure counts: the group's committed offsets cover all N events,
the workers processed exactly N records together, and the output passes the
scenario's check (bench.peers.workload). Results: bench/results/scaling.json ("embedded";
``--kafka`` runs the same on a Kafka-protocol broker, bench.scaling_kafka, kept under "kafka").
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence

from bench.embedded_throughput import ROOT, time_worker
from bench.peers.embedded import KEEP_FOREVER, read_output
from bench.peers.frameworks.streamkit import build_app
from bench.peers.workload import SCENARIOS, make_events
from streamkit.transport.base import TopicPartition
from streamkit.transport.embedded.transport import EmbeddedTransport
from streamkit.core.partitioner import partition_for_key

SOURCE, SINK = "events", "out"
UNTIL_IDLE = 2.0
RESULTS = os.path.join(ROOT, "bench", "results", "scaling.json")


COMMIT_INTERVAL_S = 0.1
"""The run ends when the commits cover every event: a short interval keeps that within
a tenth of a second of the processing's end, for one worker and two alike."""


def _app(scenario: str, partitions: int):  # noqa: ANN202 - sk.App
    return build_app(scenario, f"bench-scaling-{scenario.lower()}", SOURCE, SINK, partitions=partitions,
                     commit_interval_s=COMMIT_INTERVAL_S)


def _produce(transport: EmbeddedTransport, events: list, partitions: int) -> None:
    for topic in (SOURCE, SINK):
        transport.admin.create_topic(topic, partitions, KEEP_FOREVER)
    per_partition: Dict[int, list] = {p: [] for p in range(partitions)}
    for key, value, ts in events:
        per_partition[partition_for_key(key, partitions)].append((key, value, ts, None))
    for p, batch in per_partition.items():
        for i in range(0, len(batch), 5000):
            transport.broker.append(SOURCE, p, batch[i:i + 5000])
    transport.broker.sync()


def run_once(scenario: str, events: list, partitions: int, workers: int) -> dict:
    directory = tempfile.mkdtemp(prefix=f"sk-bench-scaling-{scenario}-{workers}-")
    try:
        transport = EmbeddedTransport(directory)
        _produce(transport, events, partitions)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
        spec = json.dumps({"scenario": scenario, "partitions": partitions})
        children = [subprocess.Popen([sys.executable, "-m", "bench.scaling", "--child", spec, directory],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
                    for _ in range(workers)]
        group = _app(scenario, partitions).id
        ended = _wait_until_committed(transport, group, partitions, len(events), children)
        figures = child_figures(scenario, children)
        processed = sum(f["records"] for f in figures)
        if processed != len(events):
            raise RuntimeError(f"{scenario} x{workers}: the workers processed {processed:,} records "
                               f"for {len(events):,} events")
        covered = _covered(transport, group, partitions)
        if covered != len(events):
            raise RuntimeError(f"{scenario} x{workers}: committed offsets cover {covered:,} of {len(events):,}")
        SCENARIOS[scenario].check(read_output(transport, SINK), SCENARIOS[scenario].expect(events, []), False)
        transport.close()
        first = min(f["started_at"] for f in figures)
        seconds = ended - first
        return {"workers": workers, "seconds": seconds, "events_per_second": len(events) / seconds,
                "records_per_worker": [f["records"] for f in figures],
                "worker_started_after": [round(f["started_at"] - first, 3) for f in figures],
                "worker_busy_seconds": [round(f["seconds"], 3) for f in figures],
                "cpu_seconds": sum(f["cpu_seconds"] for f in figures)}
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def child_figures(scenario: str, children: List[subprocess.Popen]) -> List[dict]:
    """Each worker child's figures (its last stdout line, JSON) once it exited; a child
    that failed fails the run with its log."""
    figures = []
    for child in children:
        out, err = child.communicate(timeout=900)
        if child.returncode != 0:
            raise RuntimeError(f"{scenario}: a worker failed:\n{err[-3000:]}")
        figures.append(json.loads(out.strip().splitlines()[-1]))
    return figures


def _median(runs: List[dict]) -> dict:
    return sorted(runs, key=lambda run: run["events_per_second"])[len(runs) // 2]


def _covered(transport: EmbeddedTransport, group: str, partitions: int) -> int:
    committed = transport.admin.committed_offsets(group)
    return sum(committed.get(TopicPartition(SOURCE, p), 0) for p in range(partitions))


def _wait_until_committed(transport: EmbeddedTransport, group: str, partitions: int, total: int,
                          children: List[subprocess.Popen]) -> float:
    """The wall-clock time at which the group's commits first covered every event (looked
    at every 5 ms): the end of the work, whatever the workers do afterwards (a worker
    waits ``until_idle``, or takes over the finished tasks of one that stopped)."""
    while _covered(transport, group, partitions) < total:
        if all(child.poll() is not None for child in children):
            errors = "".join(child.stderr.read()[-2000:] for child in children if child.stderr)
            raise RuntimeError(f"the workers stopped with {_covered(transport, group, partitions):,} of "
                               f"{total:,} events committed:\n{errors}")
        time.sleep(0.005)
    return time.time()


def child(spec_json: str, directory: str) -> None:
    spec = json.loads(spec_json)
    time_worker(_app(spec["scenario"], spec["partitions"]), directory, until_idle=UNTIL_IDLE)


def main(argv: Optional[Sequence[str]] = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) == 3 and argv[0] == "--child":
        child(argv[1], argv[2])
        return
    parser = argparse.ArgumentParser(prog="python -m bench scaling", description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--scenarios", default="S1,S2")
    parser.add_argument("--reps", type=int, default=3, help="runs of each, interleaved; the median counts")
    parser.add_argument("--kafka", action="store_true", help="on a Kafka-protocol broker (bench.scaling_kafka) "
                        "instead of the embedded broker")
    parser.add_argument("--broker", metavar="HOST:PORT", help="with --kafka: this broker; 'tansu': a fresh Tansu "
                        "(default: a fresh Apache Kafka)")
    parser.add_argument("--results", default=RESULTS, help="where to write the JSON (a small trial run: elsewhere)")
    args = parser.parse_args(argv)
    events = make_events(args.events)
    results: Dict[str, List[dict]] = {}
    broker = None
    if args.kafka:
        from bench import scaling_kafka
        from bench.kafka_throughput import broker_description, open_broker

        broker = open_broker(args.broker)
        where = f"{broker_description(args.broker, 'started by the bench')} at {broker.bootstrap}"

        def run(scenario: str, workers: int) -> dict:
            # the broker process this benchmark started (Tansu, or Apache Kafka's one node), for its CPU share
            cluster = getattr(broker, "cluster", None)
            process = cluster.nodes[0].process if cluster is not None else getattr(broker, "process", None)
            return scaling_kafka.run_once(scenario, broker.bootstrap, events, args.partitions, workers,
                                          broker_pid=process.pid if process is not None else None)
    else:
        where = "embedded broker"

        def run(scenario: str, workers: int) -> dict:
            return run_once(scenario, events, args.partitions, workers)
    print(f"{where}, {args.events:,} events, {args.partitions} partitions, {os.cpu_count()} cores")
    try:
        for scenario in args.scenarios.split(","):
            reps: Dict[int, List[dict]] = {1: [], 2: []}
            for _ in range(args.reps):  # interleaved: a slow spell of the machine hits both
                for workers in (1, 2):
                    reps[workers].append(run(scenario, workers))
            runs = [_median(reps[1]), _median(reps[2])]
            results[scenario] = [{**run_, "reps_events_per_second": [r["events_per_second"]
                                                                     for r in reps[run_["workers"]]]}
                                 for run_ in runs]
            ratio = runs[1]["events_per_second"] / runs[0]["events_per_second"]
            print(f"  {scenario}  1 worker {runs[0]['events_per_second']:>9,.0f} events/s   "
                  f"2 workers {runs[1]['events_per_second']:>9,.0f} events/s "
                  f"(records {runs[1]['records_per_worker']})   x{ratio:.2f}  (target x1.7; median of {args.reps})")
    finally:
        if broker is not None:
            broker.stop()
    recorded = {}
    if os.path.exists(args.results):
        with open(args.results) as f:
            recorded = json.load(f)
    recorded = {key: recorded[key] for key in ("embedded", "kafka") if key in recorded}
    recorded["kafka" if args.kafka else "embedded"] = {
        "where": where, "events": args.events, "partitions": args.partitions, "cores": os.cpu_count(),
        "reps": args.reps, "scenarios": results}
    with open(args.results, "w") as f:
        json.dump(recorded, f, indent=2)
    print(f"  results written to {os.path.relpath(args.results, ROOT)}")


if __name__ == "__main__":
    main()
