"""The librdkafka client (``kafka_client = "librdkafka"``) on a real broker: records round
trip unchanged and in order, partitions match Kafka's murmur2 partitioner, a worker gives
the same outputs as with aiokafka and loses nothing to a kill -9, and the setting is
chosen (or refused) clearly."""
from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka", reason="the 'librdkafka' extra (confluent-kafka) is "
                                      "not installed: pip install -e '.[librdkafka]'")

import streamkit as sk  # noqa: E402
from streamkit.errors import ConfigError  # noqa: E402
from streamkit.transport.base import TopicPartition  # noqa: E402
from streamkit.transport.kafka.config import KafkaClientConfig  # noqa: E402
from streamkit.transport.kafka.consumer import KafkaAssignedConsumer  # noqa: E402
from streamkit.transport.kafka.rdkafka_consumer import RdKafkaAssignedConsumer  # noqa: E402
from streamkit.transport.kafka.rdkafka_group import RdKafkaGroupMembership  # noqa: E402
from streamkit.transport.kafka.rdkafka_producer import RdKafkaProducer  # noqa: E402
from streamkit.core.partitioner import partition_for_key  # noqa: E402

from tests.kafka.topics import create_test_topic, kafka_transport  # noqa: E402
from tests.kafka.workers import KafkaApp, stop  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
LIBRDKAFKA = {"STREAMKIT_KAFKA_CLIENT": "librdkafka"}


async def _read_all(consumer, partitions: List[TopicPartition], count: int, timeout: float = 20.0) -> Dict:
    consumer.assign(partitions, {})
    got: Dict[int, list] = {tp.partition: [] for tp in partitions}
    deadline = time.monotonic() + timeout
    while sum(map(len, got.values())) < count and time.monotonic() < deadline:
        for batch in await consumer.fetch(0.2):
            got[batch.partition].extend(batch.records)
    return got


def test_records_round_trip_unchanged_and_in_order(kafka, unique_name) -> None:
    """What the librdkafka producer writes, both clients read back identically: order per
    partition, keys (None too), values (tombstones too), headers and timestamps."""
    topic = unique_name("rd-roundtrip")
    sent = {p: [(None if i % 7 == 0 else f"k{i}".encode(), None if i % 11 == 0 else f"v{p}-{i}".encode(),
                 1_700_000_000_000 + i, (("trace", f"t{i}".encode()), ("n", b"")) if i % 3 == 0 else None)
                for i in range(2000)] for p in (0, 1)}
    with kafka_transport(kafka, kafka_client="librdkafka") as transport:
        create_test_topic(transport.admin, topic, 2)

        async def run() -> tuple:
            producer = transport.producer()
            assert isinstance(producer, RdKafkaProducer)
            assert await producer.send([(topic, p, records) for p, records in sent.items()]) == {}
            ends = await producer.delivered()
            await producer.aclose()
            partitions = [TopicPartition(topic, p) for p in sent]
            rd, aio = transport.reader(), KafkaAssignedConsumer(transport.config, None, True)
            assert isinstance(rd, RdKafkaAssignedConsumer)
            try:
                return ends, await _read_all(rd, partitions, 4000), await _read_all(aio, partitions, 4000), \
                    rd.position(partitions[0]), rd.has_unread(partitions[0])
            finally:
                await rd.aclose()
                await aio.aclose()

        ends, by_rdkafka, by_aiokafka, position, unread = asyncio.run(run())
    assert ends == {TopicPartition(topic, 0): 2000, TopicPartition(topic, 1): 2000}
    for p, records in sent.items():
        expected = [(offset, ts, key, value, headers) for offset, (key, value, ts, headers) in enumerate(records)]
        assert by_rdkafka[p] == expected, f"partition {p} as librdkafka read it"
        assert by_aiokafka[p] == expected, f"partition {p} as aiokafka read it"
    assert position == 2000 and unread is False


def test_partitions_match_kafkas_murmur2_partitioner(kafka, unique_name) -> None:
    """streamkit computes every partition itself (murmur2 of the key) and the librdkafka
    producer writes exactly there; librdkafka's own murmur2 partitioner (Java's default)
    agrees with streamkit's for every key."""
    topic = unique_name("rd-partitions")
    keys = [f"user-{i}".encode() for i in range(300)]
    with kafka_transport(kafka) as transport:
        create_test_topic(transport.admin, topic, 6)
    placed: Dict[bytes, int] = {}
    producer = confluent_kafka.Producer({"bootstrap.servers": kafka.bootstrap, "partitioner": "murmur2_random"})
    for key in keys:
        producer.produce(topic, b"x", key, on_delivery=lambda err, msg: placed.__setitem__(msg.key(), msg.partition()))
    assert producer.flush(15) == 0
    assert placed == {key: partition_for_key(key, 6) for key in keys}
    with kafka_transport(kafka, kafka_client="librdkafka") as transport:
        async def run() -> Dict:
            producer = transport.producer()
            by_partition: Dict[int, list] = {}
            for key in keys:
                by_partition.setdefault(partition_for_key(key, 6), []).append((key, b"y", 1, None))
            await producer.send([(topic, p, records) for p, records in by_partition.items()])
            await producer.delivered()
            await producer.aclose()
            reader = transport.reader()
            try:
                return await _read_all(reader, [TopicPartition(topic, p) for p in range(6)], 2 * len(keys))
            finally:
                await reader.aclose()

        read = asyncio.run(run())
    for p, records in read.items():
        assert records and all(partition_for_key(key, 6) == p for _o, _t, key, _v, _h in records), p


def test_commits_of_an_assigned_consumer(kafka, unique_name) -> None:
    """Offsets committed for a group come back from both clients; no group, no commit."""
    topic, group = unique_name("rd-commit"), unique_name("rd-group")
    tp = TopicPartition(topic, 0)
    with kafka_transport(kafka, kafka_client="librdkafka") as transport:
        create_test_topic(transport.admin, topic, 1)

        async def run() -> tuple:
            consumer = transport.consumer(group)
            await consumer.commit({tp: 42}, {tp: "note"})
            mine = await consumer.committed([tp, TopicPartition(topic, 1)])
            notes = await consumer.committed_metadata([tp])
            await consumer.aclose()
            other = KafkaAssignedConsumer(transport.config, group, True)
            theirs = await other.committed([tp])
            await other.aclose()
            reader = transport.reader()
            with pytest.raises(sk.StreamkitError, match="no group"):
                await reader.commit({tp: 1})
            await reader.aclose()
            return mine, notes, theirs

        mine, notes, theirs = asyncio.run(run())
    assert mine == {tp: 42} and theirs == {tp: 42}
    stored, why = kafka.supports("offset_metadata")
    if stored:
        assert notes == {tp: "note"}
    else:
        print(f"\nnot checked: offset commit metadata ({why})")


def test_choosing_the_client(kafka, tmp_path) -> None:
    """kafka_client from the app, the config file or STREAMKIT_KAFKA_CLIENT (which wins);
    aiokafka by default; a wrong value names the choices; librdkafka swaps producers,
    consumers and the group's input consumer, not the group member."""
    url = kafka.url
    assert KafkaClientConfig.from_sources(url, environ={}).kafka_client == "aiokafka"
    assert KafkaClientConfig.from_sources(url, app_settings={"kafka_client": "librdkafka"},
                                          environ={}).kafka_client == "librdkafka"
    file = tmp_path / "streamkit.toml"
    file.write_text('[kafka]\nkafka_client = "LibRdKafka"\n')
    assert KafkaClientConfig.from_sources(url, config_file=file, environ={}).kafka_client == "librdkafka"
    assert KafkaClientConfig.from_sources(url, config_file=file, environ={"STREAMKIT_KAFKA_CLIENT": "aiokafka"}
                                          ).kafka_client == "aiokafka"
    with pytest.raises(ConfigError, match=r"kafka_client must be one of aiokafka, librdkafka, got 'rdkafka'"):
        KafkaClientConfig.from_sources(url, environ={"STREAMKIT_KAFKA_CLIENT": "rdkafka"})
    with pytest.raises(ConfigError, match="did you mean 'STREAMKIT_KAFKA_CLIENT'"):
        KafkaClientConfig.from_sources(url, environ={"STREAMKIT_KAFKA_KAFKA_CLIENT": "librdkafka"})
    with kafka_transport(kafka, kafka_client="librdkafka") as transport:
        from streamkit.transport.base import GroupPlan

        async def made() -> tuple:
            membership = transport.membership("g", GroupPlan(tasks={}))
            try:
                return type(membership), type(membership.consumer()).__name__
            finally:
                await membership.aclose()

        assert asyncio.run(made()) == (RdKafkaGroupMembership, "RdKafkaGroupConsumer")
        assert transport.describe()["kafka_client"] == "librdkafka"
        assert type(transport.producer()) is RdKafkaProducer


def test_exactly_once_with_librdkafka_is_refused_at_start(kafka, unique_name) -> None:
    """No transactional librdkafka producer yet: an exactly_once worker fails as it is made,
    saying what to do, before it joins the group or writes anything."""
    app = sk.App(unique_name("rd-eos"), processing_guarantee="exactly_once", store_backend="memory",
                 kafka_config={"kafka_client": "librdkafka"})
    events = app.topic(unique_name("rd-eos-in"), partitions=1)

    @app.topology
    def build(b) -> None:
        b.stream(events).to(app.topic(unique_name("rd-eos-out"), partitions=1))

    with kafka_transport(kafka, kafka_client="librdkafka") as transport:
        with pytest.raises(ConfigError, match="exactly_once is not supported with kafka_client 'librdkafka'.*"
                                              "use kafka_client 'aiokafka'"):
            app.worker(transport)
        with pytest.raises(ConfigError, match="exactly_once is not supported"):
            transport.producer(transactional_id="t")


def test_missing_confluent_kafka_names_the_extra(kafka) -> None:
    """Without confluent-kafka, choosing librdkafka fails when the config is read, naming
    the extra to install (checked in a process where the package cannot be imported)."""
    probe = ("import sys; sys.modules['confluent_kafka'] = None\n"
             "from streamkit.errors import ConfigError\n"
             "from streamkit.transport.kafka.config import KafkaClientConfig\n"
             "from streamkit.transport.kafka.rdkafka_common import confluent_kafka\n"
             f"for step in (lambda: KafkaClientConfig.from_sources({kafka.url!r}, environ="
             "{'STREAMKIT_KAFKA_CLIENT': 'librdkafka'}), confluent_kafka):\n"
             "    try:\n        step()\n    except ConfigError as exc:\n        print(exc)\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 2, out.stdout
    assert all("pip install 'streamkit[librdkafka]'" in line for line in lines), lines


def test_a_worker_gives_the_same_outputs_as_with_aiokafka(kafka, tmp_path, unique_name) -> None:
    """The counting app (a repartition and a changelogged count) run to completion once with
    each client: the same counts, every input reached the id sink."""
    results = {}
    for client in ("librdkafka", "aiokafka"):
        (tmp_path / client).mkdir()
        app = KafkaApp(kafka, tmp_path / client, unique_name(f"same-{client[:3]}"),
                       extra_env={"STREAMKIT_KAFKA_CLIENT": client})
        expected = app.produce_events(2000)
        done = app.run_until_idle("s")
        assert ("Kafka client: librdkafka" in done.stderr) == (client == "librdkafka"), done.stderr[-2000:]
        results[client] = _check_outputs(app, expected, 2000)
    assert results["librdkafka"] == results["aiokafka"]


def test_kill_9_loses_nothing_at_least_once(kafka, tmp_path, unique_name) -> None:
    """A librdkafka worker killed with SIGKILL after its first commit, then restarted: every
    input reaches the outputs and every count step is emitted (duplicates allowed)."""
    EVENTS = 15_000  # noqa: N806 - more than one fetch (10,000), slow enough (0.4 ms each) to kill mid-run
    app = KafkaApp(kafka, tmp_path, unique_name("rd-kill"), delay=0.0004, extra_env=LIBRDKAFKA)
    expected = app.produce_events(EVENTS)
    sources = [TopicPartition(app.source, p) for p in range(3)]
    worker = app.worker(state="s", log=tmp_path / "w1.log")

    async def kill_after_the_first_commit(transport) -> tuple:
        reader = KafkaAssignedConsumer(transport.config, app.app_id, True)  # OffsetFetch, no joining
        try:
            deadline = time.monotonic() + 60
            while sum((await reader.committed(sources)).values()) == 0:
                assert time.monotonic() < deadline, "no commit within 60 s"
                await asyncio.sleep(0.2)
            worker.send_signal(signal.SIGKILL)
            worker.wait(timeout=30)
            return sum((await reader.committed(sources)).values())
        finally:
            await reader.aclose()

    try:
        with kafka_transport(kafka) as transport:
            at_kill = asyncio.run(kill_after_the_first_commit(transport))
    finally:
        stop([worker])
    assert worker.returncode == -signal.SIGKILL
    assert 0 < at_kill < EVENTS, f"the kill came at {at_kill} committed inputs: not mid-run"
    done = app.run_until_idle("s")
    assert "Kafka client: librdkafka" in done.stderr
    _check_outputs(app, expected, EVENTS)
    print(f"\nkill -9 of a librdkafka worker after {at_kill} of {EVENTS} inputs were committed: nothing lost")


def _check_outputs(app: KafkaApp, expected: Dict[str, int], produced: int) -> Dict[str, int]:
    """Every input reached the id sink; every page's count went through 1 .. its true total
    and ended there. Returns the final counts."""
    ids = {n for values in app.read(app.ids).values() for n in values}
    assert ids == set(range(produced)), f"{produced - len(ids)} input record(s) missing from {app.ids}"
    counts = app.read(app.counts)
    for page, total in expected.items():
        gaps = set(range(1, total + 1)) - set(counts.get(page, ()))
        assert not gaps, f"page {page}: counts {sorted(gaps)[:10]} never emitted"
    final = {page: values[-1] for page, values in counts.items()}
    assert final == expected
    return final
