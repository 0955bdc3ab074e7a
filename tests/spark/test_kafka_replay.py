"""A replay reading its input from the suite's Apache Kafka (Spark's Kafka source, whose jars
``scripts/ensure-spark-kafka`` fetches) reads what a live worker reads, and writes what it writes.

The input topic is written as exactly-once producers leave topics: committed transactions,
aborted ones (their records stay in the log, with the transaction markers between them),
and plain records in between; headers of every shape (none, a null value, an empty value),
timestamps that go back in offset order, and a partition that stays empty. So:

- :func:`~streamkit.spark.kafka_input.read_kafka` gives exactly the records a
  ``read_committed`` consumer reads, with their partitions, offsets, timestamps and headers
  (Spark's Kafka source reads ``read_uncommitted`` unless told otherwise: aborted records
  included), and the topic's partition count counts the empty partition;
- a replay from Kafka writes, partition by partition, the records a live exactly-once
  worker on the same Kafka wrote: same keys, values, timestamps and headers, in the same order;
- ``streamkit replay --input TOPIC=kafka:HOST:PORT`` finds the jars through
  ``STREAMKIT_SPARK_JARS``, and without them says what to run.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import pytest

import streamkit as sk
from streamkit.broker.broker import EmbeddedBroker
from streamkit.serdes import String
from streamkit.spark import KafkaTopic, replay
from streamkit.spark.kafka_input import kafka_partition_count, read_kafka
from streamkit.spark.session import JARS_ENV_VAR
from streamkit.transport.base import TopicPartition
from streamkit.core.partitioner import partition_for_key

from ..kafka.broker import KafkaTestBroker, run_sync
from ..kafka.topics import create_app_topics, create_test_topic, kafka_transport
from .fixtures import REPO, spark_kafka_jars

pytestmark = pytest.mark.spark

PARTITIONS = 3
EMPTY_PARTITION = 2
START_MS = 1_700_000_000_000
ABORTED_FROM = 1_000_000
"""Records of aborted transactions have ``n`` from here on (no committed one does)."""

Headers = Optional[Tuple[Tuple[str, Optional[bytes]], ...]]
Read = Tuple[int, int, Optional[bytes], Optional[bytes], Headers]
"""(offset, timestamp, key, value, headers) of one record read back."""


def users_outside(partition: int, count: int) -> List[str]:
    """``count`` user keys whose default partition (of :data:`PARTITIONS`) is not ``partition``."""
    users = (f"u{i}" for i in range(10_000))
    return [u for u in users if partition_for_key(String().serialize(u), PARTITIONS) != partition][:count]


def headers_of(n: int) -> Headers:
    return (None, (("source", b"kafka"),), (("a", None), ("b", b"")), ())[n % 4] or None


def write_input(broker: KafkaTestBroker, topic: str, *, batches: int = 12, per_batch: int = 25) -> None:
    """``topic`` (:data:`PARTITIONS` partitions, :data:`EMPTY_PARTITION` left empty) as an
    exactly-once producer leaves it: per batch a transaction, every third one aborted, and a
    few plain records after each; values ``{"n", "page"}``, keyed by user."""
    users = users_outside(EMPTY_PARTITION, 11)
    n = 0

    def records(count: int, *, aborted: bool = False) -> List[Tuple[str, int, list]]:
        nonlocal n
        by_partition: Dict[int, list] = {}
        for _ in range(count):
            number = n + ABORTED_FROM if aborted else n
            key = String().serialize(users[n % len(users)])
            value = json.dumps({"n": number, "page": f"p{n % 5}"}).encode()
            ts = START_MS + n * 1000 - (7000 if n % 6 == 5 else 0)   # some go back in time
            by_partition.setdefault(partition_for_key(key, PARTITIONS), []).append((key, value, ts, headers_of(n)))
            n += 1
        return [(topic, p, recs) for p, recs in sorted(by_partition.items())]

    async def write() -> None:
        plain = transport.producer()
        txn = transport.producer(transactional_id=f"{topic}-writer")
        try:
            for batch in range(batches):
                await txn.begin_transaction()
                aborted = batch % 3 == 1
                await txn.send(records(per_batch, aborted=aborted))
                await txn.flush()                                # in the log before the abort
                if aborted:
                    await txn.abort_transaction()
                else:
                    await txn.commit_transaction(f"{topic}-writer", {})
                await plain.send(records(3))
                await plain.flush()
        finally:
            await txn.aclose()
            await plain.aclose()

    with kafka_transport(broker) as transport:
        create_test_topic(transport.admin, topic, PARTITIONS)
        run_sync(write)


def read_topic(broker: KafkaTestBroker, topic: str, *, read_committed: bool = True) -> Dict[int, List[Read]]:
    """Every record of ``topic`` per partition, in offset order, as a worker's consumer reads it."""
    out: Dict[int, List[Read]] = {}
    with kafka_transport(broker) as transport:
        count = transport.admin.topic(topic).partitions
        ends = {TopicPartition(topic, p): transport.admin.partition_offsets(topic, p).end for p in range(count)}

        async def read() -> None:
            reader = transport.reader(read_committed=read_committed)
            try:
                reader.assign(list(ends), {})
                while any(reader.position(tp) < end for tp, end in ends.items()):
                    for batch in await reader.fetch(1.0):
                        out.setdefault(batch.partition, []).extend(
                            (o, ts, k, v, tuple(h) if h else None) for o, ts, k, v, h in batch.records)
            finally:
                await reader.aclose()
        run_sync(read)
    return {p: out.get(p, []) for p in range(count)}


def replayed_topic(directory: Path, topic: str) -> Dict[int, List[Read]]:
    """What a replay appended to ``topic`` of the embedded broker in ``directory``."""
    out: Dict[int, List[Read]] = {}
    with EmbeddedBroker(str(directory)) as broker:
        for p in range(broker.topic(topic).partitions):
            reader = broker.reader(topic, p)
            records: List[Read] = []
            while batch := reader.read(10_000):
                records.extend((o, ts, k, v, tuple(h) if h else None) for o, ts, k, v, h in batch)
            reader.close()
            out[p] = records
    return out


def without_offsets(records: Dict[int, List[Read]]) -> Dict[int, List[tuple]]:
    """Per partition, (key, value, timestamp, headers) in offset order: a transactional
    writer's offsets have gaps (its markers), a replay's have none."""
    return {p: [(k, v, ts, h) for _o, ts, k, v, h in recs] for p, recs in records.items()}


def numbers(records: Dict[int, List[Read]]) -> List[int]:
    return sorted(json.loads(v)["n"] for recs in records.values() for *_, v, _h in recs)


def test_read_kafka_gives_the_records_a_read_committed_consumer_reads(spark_kafka, transactional_kafka,
                                                                     unique_name):
    kafka = transactional_kafka                                         # write_input writes transactions
    topic = unique_name("spark-kafka-read")
    write_input(kafka, topic)
    committed = read_topic(kafka, topic)
    everything = read_topic(kafka, topic, read_committed=False)
    # the log has aborted records (and markers: offsets the committed records skip)
    assert any(n >= ABORTED_FROM for n in numbers(everything))
    assert all(n < ABORTED_FROM for n in numbers(committed)) and len(numbers(committed)) == 12 * 25 * 2 // 3 + 36
    assert any(b[0] - a[0] > 1 for recs in committed.values() for a, b in zip(recs, recs[1:]))
    assert committed[EMPTY_PARTITION] == []

    source = KafkaTopic(kafka.bootstrap, topic)
    assert kafka_partition_count(spark_kafka, source) == PARTITIONS    # the empty partition counts
    rows = read_kafka(spark_kafka, source).collect()
    from streamkit.spark.arrow_rows import decode_headers

    got: Dict[int, List[Read]] = {p: [] for p in range(PARTITIONS)}
    pmax: Dict[int, List[int]] = {p: [] for p in range(PARTITIONS)}
    for r in sorted(rows, key=lambda r: (r["partition"], r["offset"])):
        headers = decode_headers(r["headers"]) if r["headers"] is not None else None
        got[r["partition"]].append((r["offset"], r["timestamp"], r["key"], r["value"], headers or None))
        pmax[r["partition"]].append(r["pmax"])
    assert got == committed
    for p, recs in committed.items():                                   # running maximum in offset order
        assert pmax[p] == [max(ts for _o, ts, *_ in recs[:i + 1]) for i in range(len(recs))]


APP = textwrap.dedent("""
    from datetime import timedelta
    import streamkit as sk

    app = sk.App({app_id!r}, caching=False, processing_guarantee="exactly_once",
                 commit_interval=timedelta(milliseconds=200))
    app.topic({source!r}, key_serde=sk.serdes.String(), value_serde=sk.serdes.Json())

    @app.topology
    def build(b):
        views = b.stream({source!r})
        views.map_values(lambda v: {{"n": v["n"], "page": v["page"].upper()}}).to({ids!r})
        views.group_by_key().count(name="views").to_stream().to({counts!r})
""")


def write_app(directory: Path, app_id: str, source: str) -> Tuple[str, str, str]:
    """An exactly-once app module reading ``source``: its module name and output topics."""
    module = app_id.replace("-", "_")
    ids, counts = f"{app_id}-ids", f"{app_id}-counts"
    (directory / f"{module}.py").write_text(APP.format(app_id=app_id, source=source, ids=ids, counts=counts))
    return module, ids, counts


def load_module_app(directory: Path, module: str) -> sk.App:
    from ..kafka.topics import load_app

    return load_app(directory / f"{module}.py")


def test_replay_from_kafka_writes_what_the_live_worker_wrote(spark_kafka, transactional_kafka, unique_name,
                                                            tmp_path):
    """An exactly-once worker on Kafka, then a replay reading the same topic from Kafka:
    each output partition has one writer (the key decides it, in both runs), so the two
    runs' outputs are equal record for record."""
    kafka = transactional_kafka
    source, app_id = unique_name("spark-kafka-views"), unique_name("spark-kafka-app")
    module, ids, counts = write_app(tmp_path, app_id, source)
    write_input(kafka, source)
    app = load_module_app(tmp_path, module)
    create_app_topics(kafka, app)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}", "STREAMKIT_BROKER": kafka.url,
           **kafka.streamkit_env()}
    done = subprocess.run([sys.executable, "-m", "streamkit", "worker", module, "--until-idle", "3",
                           "--state-dir", str(tmp_path / "state")], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    live = {topic: read_topic(kafka, topic) for topic in (ids, counts)}
    assert numbers(live[ids]) == numbers(read_topic(kafka, source))    # every committed record, no aborted one

    replayed_dir = tmp_path / "replayed"
    result = replay(app, inputs={source: KafkaTopic(kafka.bootstrap, source)}, output=f"embedded:{replayed_dir}",
                    spark=spark_kafka, output_stores=False)
    assert result.input_records == len(numbers(live[ids]))
    for topic in (ids, counts):
        replayed = replayed_topic(replayed_dir, topic)
        assert sorted(replayed) == list(range(PARTITIONS)), topic        # the empty partition counted
        assert without_offsets(replayed) == without_offsets(live[topic]), topic
    assert sum(len(r) for r in live[counts].values()) == len(numbers(live[ids]))


def test_the_replay_command_reads_kafka_with_the_jars_of_streamkit_spark_jars(spark_kafka, transactional_kafka,
                                                                            unique_name, tmp_path):
    """``streamkit replay --input TOPIC=kafka:HOST:PORT``: without ``STREAMKIT_SPARK_JARS`` it
    fails saying what to run; pointed at scripts/ensure-spark-kafka's folder, it replays."""
    kafka = transactional_kafka
    source, app_id = unique_name("spark-kafka-cli"), unique_name("spark-kafka-cli-app")
    module, ids, _counts = write_app(tmp_path, app_id, source)
    write_input(kafka, source, batches=3, per_batch=10)
    env = {k: v for k, v in os.environ.items() if k != JARS_ENV_VAR}
    env.update(PYTHONPATH=f"{tmp_path}{os.pathsep}{REPO}", STREAMKIT_BROKER=f"embedded://{tmp_path / 'app'}",
               STREAMKIT_SPARK_DRIVER_MEMORY="1g")
    command = [sys.executable, "-m", "streamkit", "replay", module, "--master", "local[1]", "--no-stores",
               "--input", f"{source}=kafka:{kafka.bootstrap}"]

    missing = subprocess.run(command + ["--output", str(tmp_path / "none")], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=300)
    assert missing.returncode != 0
    assert "scripts/ensure-spark-kafka" in missing.stderr and JARS_ENV_VAR in missing.stderr, missing.stderr[-3000:]

    jars = spark_kafka_jars()
    assert jars is not None
    done = subprocess.run(command + ["--output", str(tmp_path / "out")], cwd=tmp_path,
                          env={**env, JARS_ENV_VAR: jars}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    import pyarrow.parquet as pq

    rows = pq.read_table(str(tmp_path / "out" / "topics" / ids)).to_pylist()
    assert sorted(json.loads(r["value"])["n"] for r in rows) == numbers(read_topic(kafka, source))


@pytest.mark.parametrize("entries, expected", [
    (["folder"], ["folder/a.jar", "folder/b.jar"]),
    (["folder/b.jar", "folder"], ["folder/b.jar", "folder/a.jar"]),
])
def test_spark_jars_names_every_jar_of_a_folder_once(tmp_path, entries: Sequence[str], expected: List[str]):
    from streamkit.spark.session import configured_jars, spark_jars

    (tmp_path / "folder").mkdir()
    for name in ("a.jar", "b.jar", "notes.txt"):
        (tmp_path / "folder" / name).write_text("")
    assert spark_jars([str(tmp_path / e) for e in entries]) == [str(tmp_path / e) for e in expected]
    joined = os.pathsep.join(str(tmp_path / e) for e in entries)
    assert configured_jars({JARS_ENV_VAR: joined}) == [str(tmp_path / e) for e in expected]
    assert configured_jars({JARS_ENV_VAR: joined.replace(os.pathsep, ",")}) == [str(tmp_path / e) for e in expected]
    assert configured_jars({}) == []


def test_spark_jars_refuses_what_is_not_there(tmp_path):
    from streamkit.errors import ConfigError
    from streamkit.spark.session import spark_jars

    with pytest.raises(ConfigError, match="neither a jar file nor a folder"):
        spark_jars([str(tmp_path / "missing")])
    with pytest.raises(ConfigError, match="has no .jar file"):
        spark_jars([str(tmp_path)])
