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
from typing import Dict, List, NamedTuple, Optional, Sequence

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


class Inputs(NamedTuple):
    """Input topics already holding one scenario's events (and pages table): produced once,
    read by every framework and rep of that scenario, each in a consumer group of its own."""
    source: str
    table: Optional[str]
    events: int


def produce_inputs(bootstrap: str, scenario: str, events: Sequence[Event], table: Sequence[Event]) -> Inputs:
    """Create and fill the input topics of ``scenario``: the events, and the pages table when
    the scenario joins it. Producing 200,000 events costs seconds, so it is done once per
    scenario and size rather than once per run; no framework writes to these topics."""
    prefix = f"bench-input-{scenario}-{len(events)}-{uuid.uuid4().hex[:8]}".lower()
    source = f"{prefix}-events"
    pages = f"{prefix}-pages" if SCENARIOS[scenario].table else None
    asyncio.run(create_topics(bootstrap, [t for t in (source, pages) if t]))
    started = time.perf_counter()
    if pages:
        produce_with_exact_ends(bootstrap, pages, table)
    asyncio.run(produce(bootstrap, source, events))
    log.info("%s: produced %d events in %.1f s into %s", scenario, len(events), time.perf_counter() - started,
             source)
    return Inputs(source, pages, len(events))


def run_once(framework: str, scenario: str, bootstrap: str, events: Sequence[Event], table: Sequence[Event],
             expected: Counter, *, caching: bool = False, verbose: bool = False, profile: Optional[str] = None,
             group_offsets: bool = True, inputs: Optional[Inputs] = None) -> dict:
    """One timed child on ``events`` (and ``table``), its output verified. ``inputs``: topics
    already holding them (:func:`produce_inputs`), else this run produces its own.
    ``caching``: the output is checked as coalesced (final values exact, fewer updates
    allowed); ``group_offsets=False``: the framework keeps its input offsets outside the
    consumer group (Bytewax, Pathway), so the group's committed offsets are not checked."""
    spec_of = SCENARIOS[scenario]
    run_id = f"bench-{framework}-{scenario}-{uuid.uuid4().hex[:8]}".lower()
    sink = f"{run_id}-out"
    state_dir = tempfile.mkdtemp(prefix=f"sk-peers-{framework}-{scenario}-")
    own_inputs = inputs is None
    try:
        if inputs is None:
            inputs = produce_inputs(bootstrap, scenario, events, table)
        # Tansu auto-creates unknown topics with 4 partitions: create every topic we write.
        asyncio.run(create_topics(bootstrap, [sink]))
        spec = {"framework": framework, "scenario": scenario, "bootstrap": bootstrap, "app_id": run_id,
                "source": inputs.source, "sink": sink, "table": inputs.table, "events": inputs.events,
                "state_dir": state_dir, "caching": caching, "commit_interval_s": COMMIT_INTERVAL_S,
                "verbose": verbose, "profile": profile}
        figures = run_child(spec)
        if figures["records"] != inputs.events:
            raise VerificationError(f"{framework} {scenario}: handed out {figures['records']:,} of "
                                    f"{inputs.events:,} input records")
        if group_offsets:
            committed = asyncio.run(committed_total(bootstrap, run_id, inputs.source))
            if committed != inputs.events:
                raise VerificationError(f"{framework} {scenario}: committed offsets cover {committed:,} of "
                                        f"{inputs.events:,} input records")
        # Coalesced (cached) output is shorter: read until the topic is quiet.
        output = asyncio.run(read_topic(bootstrap, sink, 1 if caching else sum(expected.values())))
        try:
            spec_of.check(output, expected, caching)
        except AssertionError as exc:
            raise VerificationError(f"{framework} {scenario}: {exc}") from None
        figures["outputs"] = len(output)
        figures["events_per_second"] = inputs.events / figures["seconds"]
        log.info("%s %s%s: %.0f events/s over %.2f s, %d outputs, peak RSS %.0f MiB (verified)", framework,
                 scenario, " (caching)" if caching else "", figures["events_per_second"], figures["seconds"],
                 len(output), figures["peak_rss_mib"])
        return figures
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)
        prefixes = [run_id] + ([inputs.source[:-len("-events")]] if own_inputs and inputs is not None else [])
        for prefix in prefixes:
            try:
                asyncio.run(delete_topics(bootstrap, prefix))
            except Exception as exc:  # noqa: BLE001 - clean-up is best-effort; a fresh broker follows anyway
                log.warning("could not delete the topics of %s: %s", prefix, exc)


def summarize(runs: List[dict], events: int) -> dict:
    """The median of the reps' events/s, the highest peak RSS, and every rep."""
    rates = [r["events_per_second"] for r in runs]
    return {"events_per_second": statistics.median(rates), "reps": rates,
            "seconds": [r["seconds"] for r in runs],
            "cpu_us_per_event": statistics.median(r["cpu_seconds"] / events * 1e6 for r in runs),
            "peak_rss_mib": max(r["peak_rss_mib"] for r in runs), "outputs": runs[-1]["outputs"]}
