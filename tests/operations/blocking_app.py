"""The app of the loop-blocking and key-encoding tests: JSON keys of any shape counted
per key (a key-value store on RocksDB), with a step that blocks the worker's event loop
in plain synchronous code while a record asks it to (until the test releases it)."""
from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import streamkit as sk
from streamkit.serdes import Json

PARTITIONS = 3
BLOCKING = threading.Event()
"""Set by the step while it blocks the worker's loop."""
RELEASE = threading.Event()
"""The test sets it to let the blocked step return."""

app = sk.App("ops-any-keys", store_backend="rocksdb", caching=False, default_key_serde=Json(),
             commit_interval=timedelta(milliseconds=100))
events = app.topic("events", partitions=PARTITIONS)


def block_when_asked(key: Any, value: Any) -> None:
    """A blocking call in user code (as ``time.sleep(30)`` would be), for ``{"block": true}``."""
    if isinstance(value, dict) and value.get("block"):
        BLOCKING.set()
        RELEASE.wait(120)
        BLOCKING.clear()


@app.topology
def build(b: sk.StreamsBuilder) -> None:
    b.stream(events).peek(block_when_asked).group_by_key().count(name="counts")
