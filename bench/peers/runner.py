"""One verified measurement: fresh topics, pre-produced input, one timed child, the output
read back and checked against the true result. A figure that fails its check raises.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from typing import Dict, List, Optional, Sequence

from bench.kafka_throughput import committed_total, create_topics, delete_topics, produce, read_topic
from bench.peers.workload import PARTITIONS, SCENARIOS, Event

log = logging.getLogger("bench.peers")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHILD_TIMEOUT_S = 900.0
COMMIT_INTERVAL_S = 1.0
CLIENT_ENV = {"STREAMKIT_KAFKA_SESSION_TIMEOUT_MS": "6000", "STREAMKIT_KAFKA_HEARTBEAT_INTERVAL_MS": "1000"}
"""Group settings for streamkit and the raw loop (the caller's environment wins): on Tansu a
group join takes about half the session timeout, outside the timed window."""


class VerificationError(AssertionError):
    """A framework's output differs from the true result: its figure is not reported."""


def child_env() -> Dict[str, str]:
    """A child's environment: this checkout importable, the group settings unless set."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    for key, value in CLIENT_ENV.items():
        env.setdefault(key, value)
    return env


def run_child(spec: dict) -> dict:
    """Run ``bench.peers.child`` with ``spec``; return its figures."""
    command = [sys.executable, "-m", "bench.peers.child", json.dumps(spec)]
    out = subprocess.run(command, capture_output=True, text=True, check=False, env=child_env(),
                         timeout=CHILD_TIMEOUT_S)
    if spec.get("verbose") and out.stderr:
        sys.stderr.write(out.stderr)
    if out.returncode != 0:
        raise RuntimeError(f"{spec['framework']} {spec['scenario']}: child exited {out.returncode}:\n"
                           f"{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def produce_with_exact_ends(bootstrap: str, topic: str, records: Sequence[Event]) -> None:
    """Produce ``records`` with each partition's last record in a batch of its own.

    Tansu reports a partition's end offset as its last batch's first offset + 1. A framework
    that waits for a table to be read up to the end offset before joining events (streamkit's
    timestamp synchronization, Quix's join_asof) would stop waiting early and miss rows; with
    a last batch of one record the reported end is exact. Apache Kafka needs none of this."""
    from streamkit.core.partitioner import partition_for_key

    last: Dict[int, int] = {partition_for_key(key, PARTITIONS): i for i, (key, _, _) in enumerate(records)}
    tails = set(last.values())
    asyncio.run(produce(bootstrap, topic, [r for i, r in enumerate(records) if i not in tails]))
    asyncio.run(produce(bootstrap, topic, [records[i] for i in sorted(tails)]))


def run_once(framework: str, scenario: str, bootstrap: str, events: Sequence[Event], table: Sequence[Event],
             expected: Counter, *, caching: bool = False, verbose: bool = False,
             profile: Optional[str] = None, group_offsets: bool = True) -> dict:
    """Fresh topics, pre-produced input, one timed child, verified output. ``caching``: the
    output is checked as coalesced (final values exact, fewer updates allowed);
    ``group_offsets=False``: the framework keeps its input offsets outside the consumer
    group (Bytewax, Pathway), so the group's committed offsets are not checked."""
    spec_of = SCENARIOS[scenario]
    run_id = f"bench-{framework}-{scenario}-{uuid.uuid4().hex[:8]}".lower()
    source, sink = f"{run_id}-events", f"{run_id}-out"
    pages = f"{run_id}-pages" if spec_of.table else None
    state_dir = tempfile.mkdtemp(prefix=f"sk-peers-{framework}-{scenario}-")
    try:
        # Tansu auto-creates unknown topics with 4 partitions: create every topic we read or write.
        asyncio.run(create_topics(bootstrap, [t for t in (source, sink, pages) if t]))
        started = time.perf_counter()
        if pages:
            produce_with_exact_ends(bootstrap, pages, table)
        asyncio.run(produce(bootstrap, source, events))
        log.info("%s %s: produced %d events in %.1f s", framework, scenario, len(events),
                 time.perf_counter() - started)
        spec = {"framework": framework, "scenario": scenario, "bootstrap": bootstrap, "app_id": run_id,
                "source": source, "sink": sink, "table": pages, "events": len(events), "state_dir": state_dir,
                "caching": caching, "commit_interval_s": COMMIT_INTERVAL_S, "verbose": verbose,
                "profile": profile}
        figures = run_child(spec)
        if figures["records"] != len(events):
            raise VerificationError(f"{framework} {scenario}: handed out {figures['records']:,} of "
                                    f"{len(events):,} input records")
        if group_offsets:
            committed = asyncio.run(committed_total(bootstrap, run_id, source))
            if committed != len(events):
                raise VerificationError(f"{framework} {scenario}: committed offsets cover {committed:,} of "
                                        f"{len(events):,} input records")
        # Coalesced (cached) output is shorter: read until the topic is quiet.
        output = asyncio.run(read_topic(bootstrap, sink, 1 if caching else sum(expected.values())))
        try:
            spec_of.check(output, expected, caching)
        except AssertionError as exc:
            raise VerificationError(f"{framework} {scenario}: {exc}") from None
        figures["outputs"] = len(output)
        figures["events_per_second"] = len(events) / figures["seconds"]
        log.info("%s %s%s: %.0f events/s over %.2f s, %d outputs, peak RSS %.0f MiB (verified)", framework,
                 scenario, " (caching)" if caching else "", figures["events_per_second"], figures["seconds"],
                 len(output), figures["peak_rss_mib"])
        return figures
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)
        try:
            asyncio.run(delete_topics(bootstrap, run_id))
        except Exception as exc:  # noqa: BLE001 - clean-up is best-effort; a fresh broker follows anyway
            log.warning("could not delete the topics of %s: %s", run_id, exc)


def summarize(runs: List[dict], events: int) -> dict:
    """The median of the reps' events/s, the highest peak RSS, and every rep."""
    rates = [r["events_per_second"] for r in runs]
    return {"events_per_second": statistics.median(rates), "reps": rates,
            "seconds": [r["seconds"] for r in runs],
            "cpu_us_per_event": statistics.median(r["cpu_seconds"] / events * 1e6 for r in runs),
            "peak_rss_mib": max(r["peak_rss_mib"] for r in runs), "outputs": runs[-1]["outputs"]}
