"""The app the lag tests run as real workers (``streamkit worker tests.operations.lag_app``).

It copies each event of ``lag-events`` to ``lag-copies`` and commits every 100 ms. An
event whose value has ``"poison": true`` hangs it: the function retries forever, as
one calling a service that can never accept that record would.
"""
import time
from datetime import timedelta

import streamkit as sk

app = sk.App("lag-app", commit_interval=timedelta(milliseconds=100))
events = app.topic("lag-events", partitions=2)


def copy_unless_poison(value: dict) -> dict:
    while value.get("poison"):
        time.sleep(0.05)
    return value


@app.topology
def build(b: sk.StreamsBuilder) -> None:
    b.stream(events).map_values(copy_unless_poison).to("lag-copies")
