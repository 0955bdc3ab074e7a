"""A task whose store has no changelog and lost its local state is rebuilt from its input
up to the committed offsets with outputs muted (issue 19 item 7): the rebuild sends no
dead letter again, and with record caching the rebuilt aggregates become the committed
baseline, so the next commit forwards only what changed after the rebuild."""
from __future__ import annotations

import asyncio
import shutil
from datetime import timedelta
from pathlib import Path
from typing import List, Tuple

import orjson

import streamkit as sk
from streamkit.broker import EmbeddedBroker
from streamkit.transport.embedded.transport import EmbeddedTransport

from .crashes import committed_records

USERS = 10


def _app() -> sk.App:
    app = sk.App("rebuild", caching=True, commit_interval=timedelta(milliseconds=100),
                 deserialization_error_handler="dead_letter")
    events = app.topic("events", key_serde=sk.serdes.String(), value_serde=sk.serdes.Json(), partitions=1)

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        per_user = b.stream(events).group_by_key().count(name="per-user", changelog=False)
        per_user.to_stream().to("per-user")
        (per_user.group_by(lambda user, n: ("total", n), key_serde=sk.serdes.String(), value_serde=sk.serdes.Json())
         .reduce(lambda a, c: a + c, lambda a, c: a - c, name="total").to_stream().to("total"))
    return app


def _produce(directory: Path, records: List[Tuple[bytes, bytes]]) -> None:
    with EmbeddedBroker(directory) as broker:
        broker.create_topic("events", 1, exist_ok=True)
        broker.append("events", 0, [(key, value, 1_000 + i, None) for i, (key, value) in enumerate(records)])


def _run(directory: Path, state: Path) -> None:
    transport = EmbeddedTransport(str(directory))
    try:
        asyncio.run(_app().worker(transport, until_idle=1.0, state_dir=str(state)).run())
    finally:
        transport.close()


def _values(directory: Path, topic: str) -> List[Tuple[str, object]]:
    return [(k.decode(), orjson.loads(v)) for k, v in committed_records(directory, topic, 1)]


def test_a_rebuild_repeats_no_dead_letter_and_forwards_only_what_changed(tmp_path: Path) -> None:
    directory, state = tmp_path / "broker", tmp_path / "state"
    _produce(directory, [(f"u{n % USERS}".encode(), b"{}") for n in range(3 * USERS)] + [(b"u0", b"not json")])
    _run(directory, state)
    assert len(committed_records(directory, "rebuild-dlq", 1)) == 1
    assert _values(directory, "total")[-1] == ("total", 3 * USERS)
    forwarded = len(_values(directory, "per-user"))

    shutil.rmtree(state)  # the unlogged per-user counts are gone: rebuilt from the input
    _produce(directory, [(b"u0", b"{}")])
    _run(directory, state)
    assert len(committed_records(directory, "rebuild-dlq", 1)) == 1            # not dead-lettered again
    assert _values(directory, "per-user")[forwarded:] == [("u0", 4)]           # only what changed
    assert _values(directory, "total")[-1] == ("total", 3 * USERS + 1)         # not 61: nothing added twice
