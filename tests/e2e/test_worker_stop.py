"""How a worker stops (issue 19 items 8 and 9): ``--until-idle`` does not exit with its own
final cache flush unread, and the transport's housekeeping stops with the worker, so
another worker can run on the same transport afterwards."""
from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Dict

import orjson

import streamkit as sk
from streamkit.broker import EmbeddedBroker
from streamkit.transport.embedded.transport import EmbeddedTransport

from .crashes import committed_records


def _two_stage_app(app_id: str) -> sk.App:
    """Counts per user (cached: forwarded at commits), re-keyed by count bucket through a
    repartition topic this worker also reads, counted again."""
    app = sk.App(app_id, store_backend="memory", caching=True,
                 commit_interval=timedelta(seconds=60))
    events = app.topic("events", key_serde=sk.serdes.String(), value_serde=sk.serdes.Json(), partitions=2)

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        per_user = b.stream(events).group_by_key().count(name="per-user")
        (per_user.group_by(lambda user, n: ("total", 1), key_serde=sk.serdes.String(),
                           value_serde=sk.serdes.Json())
         .reduce(lambda a, c: a + c, lambda a, c: a - c, name="users").to_stream().to("users"))
    return app


def _produce(directory: Path, users: int) -> None:
    with EmbeddedBroker(directory) as broker:
        broker.create_topic("events", 2, exist_ok=True)
        for partition in (0, 1):
            broker.append("events", partition, [(f"u{i}".encode(), b"{}", 1_000 + i, None)
                                                for i in range(partition, users, 2)])


def _latest(directory: Path, topic: str) -> Dict[str, object]:
    broker = EmbeddedBroker(directory)
    try:
        partitions = broker.topic(topic).partitions
    finally:
        broker.close()
    return {key.decode(): None if value is None else orjson.loads(value)
            for key, value in committed_records(directory, topic, partitions)}


def test_until_idle_processes_what_its_final_commit_flushed_to_its_own_input(tmp_path: Path) -> None:
    directory = tmp_path / "broker"
    _produce(directory, 40)
    transport = EmbeddedTransport(str(directory))
    try:
        # The commit interval (60 s) never comes: only the final commit flushes per-user counts,
        # into the repartition topic of the second aggregation.
        asyncio.run(_two_stage_app("flush").worker(transport, until_idle=0.5,
                           state_dir=str(tmp_path / "state")).run())
    finally:
        transport.close()
    assert _latest(directory, "users") == {"total": 40}


def test_housekeeping_stops_with_the_worker(tmp_path: Path) -> None:
    directory = tmp_path / "broker"
    _produce(directory, 10)
    transport = EmbeddedTransport(str(directory))
    try:
        for run in range(2):  # the second worker used to fail: "housekeeping is already running"
            asyncio.run(_two_stage_app("housekeeping").worker(transport, until_idle=0.3,
                               state_dir=str(tmp_path / f"state-{run}")).run())
            assert transport.broker._housekeeper._thread is None
    finally:
        transport.close()
    assert _latest(directory, "users") == {"total": 10}
