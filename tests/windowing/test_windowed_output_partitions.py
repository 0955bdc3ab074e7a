"""Where windowed results written with ``to()`` land: Kafka Streams' rule (its sink uses
WindowedStreamPartitioner whenever the key serde is windowed) hashes the record key alone,
so every window of a key shares one partition; a repartition topic hashes the whole
serialized key."""
from __future__ import annotations

import asyncio
from collections import defaultdict
from datetime import timedelta
from pathlib import Path
from typing import Dict, List, Set

import orjson

import streamkit as sk
from streamkit.runtime.ordering.repartition_stamps import read_stamp
from streamkit.broker import EmbeddedBroker
from streamkit.transport.embedded.transport import EmbeddedTransport
from streamkit.core.partitioner import partition_for_key

PARTITIONS = 4
KEYS = [f"page-{n}" for n in range(12)] + [7, 12345]


def _app(windows: object, key_serde: sk.serdes.Serde) -> sk.App:
    app = sk.App("windowed-partitions", store_backend="memory", caching=False)
    events = app.topic("events", key_serde=key_serde, value_serde=sk.serdes.Json(), partitions=PARTITIONS)

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        counts = b.stream(events).group_by_key(key_serde=key_serde).windowed_by(windows).count(name="counts")
        counts.to_stream().to("windowed-counts")
        # re-keyed by the whole windowed key through a repartition topic, then written plain
        (counts.to_stream().group_by(lambda window, n: window, key_serde=sk.WindowedSerde(key_serde))
         .count(name="per-window").to_stream()
         .map(lambda w, n: (f"{w.key}@{w.start}", n)).to("per-window"))
    return app


def _run(tmp_path: Path, windows: object, key_serde: sk.serdes.Serde, keys: List[object]) -> str:
    directory = str(tmp_path / "broker")
    with EmbeddedBroker(directory) as broker:
        broker.create_topic("events", PARTITIONS)
        for i in range(600):
            key = keys[i % len(keys)]
            data = key_serde.serialize(key)
            broker.append("events", partition_for_key(data, PARTITIONS),
                          [(data, orjson.dumps({"n": i}), 1_000 + 37 * i, None)])
    transport = EmbeddedTransport(directory)
    try:
        asyncio.run(_app(windows, key_serde).worker(transport, until_idle=0.5,
                                                    state_dir=str(tmp_path / "state")).run())
    finally:
        transport.close()
    return directory


def _partitions_by_key(directory: str, topic: str) -> Dict[object, Set[int]]:
    seen: Dict[object, Set[int]] = defaultdict(set)
    with EmbeddedBroker(directory) as broker:
        for partition in range(PARTITIONS):
            reader = broker.reader(topic, partition)
            for record in reader.read(100_000):
                seen[orjson.loads(record[2])["key"]].add(partition)
            reader.close()
    return seen


def test_every_window_of_a_key_lands_on_the_partition_of_its_record_key(tmp_path: Path) -> None:
    for name, windows in (("tumbling", sk.TumblingWindows(timedelta(seconds=2))),
                          ("hopping", sk.HoppingWindows(timedelta(seconds=2), advance=timedelta(seconds=1))),
                          ("sliding", sk.SlidingWindows(timedelta(seconds=1))),
                          ("session", sk.SessionWindows(timedelta(milliseconds=300)))):
        directory = _run(tmp_path / name, windows, sk.serdes.Json(), KEYS)
        seen = _partitions_by_key(directory, "windowed-counts")
        assert set(seen) == set(KEYS), name
        for key, partitions in seen.items():
            assert partitions == {partition_for_key(sk.serdes.Json().serialize(key), PARTITIONS)}, (name, key)


def test_a_string_keyed_window_uses_the_string_bytes(tmp_path: Path) -> None:
    keys = [f"user {n}" for n in range(10)]
    directory = _run(tmp_path, sk.TumblingWindows(timedelta(seconds=3)), sk.serdes.String(), keys)
    for key, partitions in _partitions_by_key(directory, "windowed-counts").items():
        assert partitions == {partition_for_key(key.encode(), PARTITIONS)}, key


def test_a_repartition_topic_hashes_the_whole_windowed_key(tmp_path: Path) -> None:
    directory = _run(tmp_path, sk.TumblingWindows(timedelta(seconds=2)), sk.serdes.Json(), KEYS)
    serde = sk.WindowedSerde(sk.serdes.Json())
    spread: Set[int] = set()
    with EmbeddedBroker(directory) as broker:
        topic = next(t.name for t in broker.list_topics() if t.name.endswith("-repartition"))
        for partition in range(PARTITIONS):
            reader = broker.reader(topic, partition)
            for record in reader.read(100_000):
                if read_stamp(record).is_marker:  # a writer's progress marker, no record
                    continue
                assert partition == partition_for_key(record[2], PARTITIONS)
                spread.add(partition)
                assert serde.deserialize(record[2]).key in KEYS
            reader.close()
    assert len(spread) > 1
