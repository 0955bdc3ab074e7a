"""at_least_once commits of tasks without stores finish in the background while the
worker goes on processing and sending (issue 36): the offsets taken at a commit point are
committed only once the broker acknowledged the outputs of every record below them.

A worker is killed (SIGKILL) right after such a background offset commit, while it is
processing and sending later records. Before it is started again, every input record
below the group's committed offsets must already have its output in the output topic
(nothing acknowledged late or lost). Started again, it loses nothing, and repeats only
records at or past those offsets: at most what at_least_once allows."""
from __future__ import annotations

import asyncio
import textwrap
from collections import Counter
from pathlib import Path
from typing import Dict, Tuple

from .broker import KafkaTestBroker
from .workers import KafkaApp, stop

APP = textwrap.dedent("""
    import os
    import time
    from datetime import timedelta
    import streamkit as sk
    from streamkit import faults

    app = sk.App({app_id!r}, caching=False, commit_interval=timedelta(milliseconds=100))
    events = app.topic({source!r}, partitions=3)
    armed = [] if os.environ.get("TEST_CRASH_IN_BACKGROUND_COMMIT") else [False]

    def slow(key, value):
        if not armed:  # counted from the first record: the commits of the group join carry no offsets
            armed.append(True)
            faults.arm({crash_point!r}, {nth}, kill=True)
        time.sleep(0.0002)

    @app.topology
    def build(b):
        b.stream(events).peek(slow).map_values(lambda v: v["n"]).to({ids!r})
""")
EVENTS = 20_000
CRASH_POINT, NTH = "commit.after_transaction", 1  # in the background: the loop is processing meanwhile


def _committed_and_sources(broker: KafkaTestBroker, group: str, source: str
                           ) -> Tuple[Dict[int, int], Dict[Tuple[int, int], int]]:
    """The group's committed offset per partition of ``source``, and each input record's
    ``n`` by (partition, offset)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient

    async def read() -> Tuple[Dict[int, int], Dict[Tuple[int, int], int]]:
        admin = AIOKafkaAdminClient(**broker.client_config())
        await admin.start()
        try:
            offsets = await admin.list_consumer_group_offsets(group)
        finally:
            await admin.close()
        committed = {tp.partition: meta.offset for tp, meta in offsets.items() if tp.topic == source}
        reader = AIOKafkaConsumer(**broker.client_config(), enable_auto_commit=False)
        await reader.start()
        try:
            partitions = [TopicPartition(source, p) for p in range(3)]
            reader.assign(partitions)
            await reader.seek_to_beginning(*partitions)
            ends = await reader.end_offsets(partitions)
            records: Dict[Tuple[int, int], int] = {}
            while len(records) < sum(ends.values()):
                for tp, batch in (await reader.getmany(timeout_ms=1000)).items():
                    for record in batch:
                        records[(tp.partition, record.offset)] = _n(record.value)
        finally:
            await reader.stop()
        return committed, records

    return asyncio.run(read())


def _n(value: bytes) -> int:
    import json

    return json.loads(value)["n"]


def _outputs(app: KafkaApp) -> Counter:
    return Counter(n for values in app.read(app.ids).values() for n in values)


def test_worker_killed_during_a_background_commit_loses_nothing(kafka, tmp_path: Path, unique_name) -> None:
    name = unique_name("bgcommit")
    app = KafkaApp(kafka, tmp_path, name)
    (tmp_path / f"{app.module}.py").write_text(APP.format(app_id=name, source=app.source, ids=app.ids,
                                                              crash_point=CRASH_POINT, nth=NTH))
    app.produce_events(EVENTS)
    log = tmp_path / "w.log"
    worker = app.worker("--until-idle", "10", state="s", log=log, TEST_CRASH_IN_BACKGROUND_COMMIT="1")
    try:
        worker.wait(timeout=120)
    finally:
        stop([worker])
    assert worker.returncode == -9, f"the worker did not die at {CRASH_POINT}: {log.read_text()[-3000:]}"

    committed, inputs = _committed_and_sources(kafka, name, app.source)
    assert len(inputs) == EVENTS
    below = [n for (partition, offset), n in inputs.items() if offset < committed.get(partition, 0)]
    assert 0 < len(below) < EVENTS, f"the crash came at no useful point: {len(below)} record(s) committed"
    before = _outputs(app)
    unacknowledged = sorted(n for n in below if before[n] == 0)
    assert not unacknowledged, (f"{len(unacknowledged)} record(s) below the committed offsets {committed} had no "
                                f"output when the worker died: {unacknowledged[:10]}")

    app.run_until_idle("s")
    after = _outputs(app)
    missing = sorted(set(range(EVENTS)) - set(after))
    assert not missing, f"{len(missing)} input record(s) never reached {app.ids}: {missing[:10]}"
    repeated = sorted(n for n in below if after[n] != 1)
    assert not repeated, f"records below the committed offsets were processed again: {repeated[:10]}"
    print(f"\nkilled after a background commit ({len(below)} of {EVENTS} records committed): nothing lost, "
          f"{sum(after.values()) - EVENTS} duplicate(s), all past the committed offsets")
