"""The app the HTTP endpoint tests run: clicks counted per user (a key-value store)
and per user per 10 s window (a window store), on a 4-partition topic."""
from __future__ import annotations

from datetime import timedelta

import streamkit as sk

PARTITIONS = 4

app = sk.App("ops-clicks", store_backend="rocksdb", caching=False,
             commit_interval=timedelta(milliseconds=100))
clicks = app.topic("clicks", partitions=PARTITIONS)


@app.topology
def build(b: sk.StreamsBuilder) -> None:
    stream = b.stream(clicks)
    stream.group_by_key().count(name="clicks-per-user").to_stream().to("clicks-per-user")
    (stream.group_by_key().windowed_by(sk.TumblingWindows(timedelta(seconds=10)))
     .count(name="clicks-per-window"))

