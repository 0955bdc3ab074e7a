"""The embedded-broker column: the same streamkit apps on streamkit's own log.

Pre-produces the events (and the pages table) into a fresh broker directory, runs one
worker process over it until the input is consumed and committed, reads the output back
and checks it. Timed from worker start to its last commit (the worker opens its stores
and joins no group: there is no group join to leave out on this transport).
"""
from __future__ import annotations

import json
import logging
import shutil
import sys
import tempfile
from collections import Counter
from typing import Optional, Sequence

from bench.embedded_throughput import run_worker_process, time_worker
from bench.join_throughput import produce_to
from bench.peers.frameworks.streamkit import build_app
from bench.peers.runner import VerificationError
from bench.peers.workload import SCENARIOS, Event, Output
from streamkit.transport.base import TopicPartition
from streamkit.transport.embedded.transport import EmbeddedTransport

log = logging.getLogger("bench.peers")

SOURCE, SINK, TABLE = "events", "out", "pages"
KEEP_FOREVER = {"retention.ms": "-1"}
"""The events' times are from 2023: the default 7-day time retention would delete them."""


def app_for(scenario: str, caching: bool):  # noqa: ANN201 - sk.App
    return build_app(scenario, f"bench-embedded-{scenario.lower()}", SOURCE, SINK,
                     TABLE if SCENARIOS[scenario].table else None, caching=caching)


def read_output(transport: EmbeddedTransport, topic: str) -> Output:
    out: Output = []
    spec = transport.admin.topic(topic)
    for partition in range(spec.partitions if spec else 0):
        reader = transport.broker.reader(topic, partition)
        while True:
            records = reader.read(50_000)
            if not records:
                break
            out.extend((partition, r[2], r[3]) for r in records)
        reader.close()
    return out


def run_once(scenario: str, events: Sequence[Event], table: Sequence[Event], expected: Counter, *,
             caching: bool = False) -> dict:
    directory = tempfile.mkdtemp(prefix=f"sk-peers-embedded-{scenario}-")
    try:
        transport = EmbeddedTransport(directory)
        if SCENARIOS[scenario].table:
            produce_to(transport, TABLE, list(table), KEEP_FOREVER)
        produce_to(transport, SOURCE, list(events), KEEP_FOREVER)
        figures = run_worker_process(json.dumps({"scenario": scenario, "caching": caching}), directory,
                                     module="bench.peers.embedded")
        if figures["records"] < len(events):
            raise VerificationError(f"embedded {scenario}: processed {figures['records']:,} of {len(events):,}")
        committed = transport.admin.committed_offsets(app_for(scenario, caching).id)
        total = sum(committed.get(TopicPartition(SOURCE, p), 0) for p in range(3))
        if total != len(events):
            raise VerificationError(f"embedded {scenario}: committed offsets cover {total:,} of {len(events):,}")
        output = read_output(transport, SINK)
        transport.close()
        try:
            SCENARIOS[scenario].check(output, expected, caching)
        except AssertionError as exc:
            raise VerificationError(f"embedded {scenario}: {exc}") from None
        figures["outputs"] = len(output)
        figures["events_per_second"] = len(events) / figures["seconds"]
        log.info("embedded %s%s: %.0f events/s over %.2f s, %d outputs, peak RSS %.0f MiB (verified)", scenario,
                 " (caching)" if caching else "", figures["events_per_second"], figures["seconds"],
                 len(output), figures["peak_rss_mib"])
        return figures
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def child(spec_json: str, directory: str) -> None:
    spec = json.loads(spec_json)
    time_worker(app_for(spec["scenario"], spec["caching"]), directory)


def main(argv: Optional[Sequence[str]] = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) == 3 and argv[0] == "--child":
        child(argv[1], argv[2])


if __name__ == "__main__":
    main()
