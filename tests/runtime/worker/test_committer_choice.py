"""The worker's committer is chosen once, from the app's guarantee and the transport
(issue 35 item 1): at_least_once, exactly_once with one transaction per worker, or
with one per task; each commits the same counts."""
from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Dict, Type

import orjson
import pytest

import streamkit as sk
from streamkit.broker import EmbeddedBroker
from streamkit.runtime.worker.committer import (AtLeastOnceCommitter, Committer, PerTaskTransactionCommitter,
                                                SharedTransactionCommitter)
from streamkit.transport.embedded.transport import EmbeddedTransport

KEYS = ["a", "b", "c", "d"]


def _count_app(guarantee: str) -> sk.App:
    app = sk.App(f"choice-{guarantee}", store_backend="memory", commit_interval=timedelta(milliseconds=100),
                 processing_guarantee=guarantee)
    events = app.topic("events", key_serde=sk.serdes.String(), value_serde=sk.serdes.Json(), partitions=2)
    counts = app.topic("counts", key_serde=sk.serdes.String(), value_serde=sk.serdes.Json(), partitions=2)

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        b.stream(events).group_by_key().count(name="counts").to_stream().to(counts)

    return app


@pytest.mark.parametrize("guarantee, per_task, expected", [
    ("at_least_once", False, AtLeastOnceCommitter),
    ("exactly_once", False, SharedTransactionCommitter),
    ("exactly_once", True, PerTaskTransactionCommitter),
])
def test_the_guarantee_chooses_the_committer_and_each_commits_the_counts(
        tmp_path: Path, guarantee: str, per_task: bool, expected: Type[Committer]) -> None:
    directory = tmp_path / "broker"
    sent = [KEYS[i % len(KEYS)] for i in range(40)]
    with EmbeddedBroker(directory) as broker:
        broker.create_topic("events", 2)
        for partition in range(2):
            broker.append("events", partition, [(key.encode(), orjson.dumps({"n": n}), 1_000 + n, None)
                                                for n, key in enumerate(sent) if n % 2 == partition])
    app = _count_app(guarantee)
    transport = EmbeddedTransport(str(directory), transactional_id_per_task=per_task)
    try:
        worker = app.worker(transport, until_idle=1.0, state_dir=str(tmp_path / "state"))
        asyncio.run(worker.run())
    finally:
        transport.close()
    assert type(worker.committer) is expected
    latest: Dict[str, int] = {}
    with EmbeddedBroker(directory) as broker:
        for partition in range(2):
            reader = broker.reader("counts", partition, read_committed=True)
            while records := reader.read(10_000):
                latest.update((key.decode(), orjson.loads(value)) for _offset, _ts, key, value, _headers in records)
    assert latest == {key: sent.count(key) for key in KEYS}
