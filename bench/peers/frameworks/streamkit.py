"""streamkit: the scenarios as a user writes them, run by the worker as ``streamkit worker``
runs it (on Kafka through aiokafka here; ``bench.peers.embedded`` runs the same apps on
the embedded broker).

Stateful scenarios keep state in RocksDB (logged to changelog topics) and run with the
record cache off (one update per event, the peers' work) or on (``caching``: the default,
fewer coalesced updates, as Kafka Streams does).
"""
from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Optional

import streamkit as sk
from bench.peers.frameworks import transactions_missing
from bench.peers.probe import Probe
from bench.peers.workload import GRACE_MS, PARTITIONS, WINDOW_MS, Scenario, enrich_value, filter_map_value

NAME = "streamkit"


def version() -> str:
    return f"streamkit {sk.__version__}"


def unsupported(scenario: Scenario, transactions: bool) -> Optional[str]:
    return transactions_missing(scenario, transactions)


def build_app(scenario: str, app_id: str, source: str, sink: str, table: Optional[str] = None, *,
              caching: bool = False, commit_interval_s: Optional[float] = None,
              fetch_max_wait_ms: Optional[int] = None, partitions: int = PARTITIONS,
              exactly_once: bool = False) -> sk.App:
    """The app of ``scenario`` (S0 .. S5) reading ``source`` and writing ``sink`` (topics
    of ``partitions`` partitions when the app creates them); S5, or any scenario with
    ``exactly_once``, runs under exactly_once."""
    app = sk.App(app_id, store_backend="rocksdb", caching=caching,
                 processing_guarantee="exactly_once" if scenario == "S5" or exactly_once else "at_least_once",
                 commit_interval=None if commit_interval_s is None else timedelta(seconds=commit_interval_s),
                 kafka_config={} if fetch_max_wait_ms is None else {"fetch_max_wait_ms": fetch_max_wait_ms})
    raw = scenario == "S0"
    events = app.topic(source, partitions=partitions, value_serde=sk.serdes.Bytes() if raw else None)
    output = app.topic(sink, partitions=partitions, value_serde=sk.serdes.Bytes() if raw else None)
    pages = app.topic(table, partitions=PARTITIONS) if table else None
    window = sk.TumblingWindows(timedelta(milliseconds=WINDOW_MS), grace=timedelta(milliseconds=GRACE_MS))

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        stream = b.stream(events)
        if scenario == "S0":
            stream.to(output)
        elif scenario == "S1":
            stream.filter(lambda k, v: v["amount"] > 10).map_values(filter_map_value).to(output)
        elif scenario in ("S2", "S5"):
            stream.group_by_key().count(name="counts").to_stream().to(output)
        elif scenario == "S3":
            (stream.group_by_key().windowed_by(window).count(name="window-counts").to_stream()
                   .map(lambda k, n: (k.key, {"start": k.start, "count": n}))
                   .to(output))
        elif scenario == "S4":
            assert pages is not None, "S4 needs the pages table"
            stream.join(b.table(pages, name="pages"), enrich_value).to(output)
        else:
            raise ValueError(f"unknown scenario {scenario}")
    return app


def run(spec: dict, probe: Probe) -> None:
    from streamkit.runtime.worker import Worker, tune_gc_for_streaming
    from streamkit.transport.factory import open_transport

    app = build_app(spec["scenario"], spec["app_id"], spec["source"], spec["sink"], spec.get("table"),
                    caching=spec.get("caching", False), commit_interval_s=spec.get("commit_interval_s"),
                    fetch_max_wait_ms=spec.get("fetch_max_wait_ms"), exactly_once=spec.get("exactly_once", False))
    tune_gc_for_streaming()
    transport = open_transport(f"kafka://{spec['bootstrap']}", kafka_config=app.kafka_config)
    worker = app.worker(transport, until_idle=spec.get("safety_idle_s", 30.0), state_dir=spec["state_dir"])
    probe.count_aiokafka_fetches(spec["source"])
    probe.wrap_async_commit(Worker, "_commit")  # one commit round: every task, flush or transactions
    # Stop once every input record was fetched and none waits in a task's input buffer (a
    # join's stream side waits there for its table side): the worker then commits and
    # leaves the group, and that commit ends the window.
    process_available = Worker._process_available

    async def process_then_stop_when_done(self: Worker) -> bool:
        processed = await process_available(self)
        if probe.all_fetched and self.task_manager is not None and not self.task_manager.input_pending():
            self.stop()
        return processed

    Worker._process_available = process_then_stop_when_done  # type: ignore[method-assign]
    try:
        asyncio.run(worker.run())
    finally:
        transport.close()
