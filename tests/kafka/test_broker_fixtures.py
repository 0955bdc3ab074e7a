"""The broker fixtures against real aiokafka clients, and Tansu's capabilities.

The tests taking ``kafka`` run on the session's Apache Kafka (or ``STREAMKIT_TEST_KAFKA``);
the tests taking ``tansu`` run on a Tansu of their own and pin down the limitations
documented in ``tests/kafka/broker.py`` (the suite's Kafka-compatible-broker smoke test).
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
import subprocess
import time
from typing import AsyncIterator, Dict, List, Tuple

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic, RecordsToDelete
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment, ConsumerProtocolMemberMetadata
from aiokafka.errors import IncompatibleBrokerVersion, KafkaConnectionError, KafkaError, UnknownError
from aiokafka.helpers import create_ssl_context

from .broker import (KEEP_RECORDS, TANSU_NO_DELETE_RECORDS, TANSU_NO_OFFSET_METADATA, TANSU_NO_TRANSACTIONS,
                     KafkaTestBroker, probe_transactions, start_tansu, tansu_binary)
from .certs import generate_test_certs

TIMEOUT = 15


@contextlib.asynccontextmanager
async def admin_client(broker: KafkaTestBroker) -> AsyncIterator[AIOKafkaAdminClient]:
    admin = AIOKafkaAdminClient(**broker.client_config())
    await admin.start()
    try:
        yield admin
    finally:
        await admin.close()


@contextlib.asynccontextmanager
async def started(client):
    await asyncio.wait_for(client.start(), TIMEOUT)
    try:
        yield client
    finally:
        await client.stop()


async def create_topic(broker: KafkaTestBroker, name: str, partitions: int, **configs: str) -> None:
    """Create a test topic (``retention.ms=-1`` unless ``configs`` say otherwise)."""
    async with admin_client(broker) as admin:
        response = await admin.create_topics([NewTopic(name, partitions, 1,
                                                       topic_configs={**KEEP_RECORDS, **configs})])
    assert [(t, code) for t, code, *_ in response.topic_errors] == [(name, 0)]


async def consume(consumer: AIOKafkaConsumer, count: int, timeout: float = TIMEOUT) -> list:
    """Read ``count`` records (fails on timeout)."""
    records: list = []
    deadline = time.monotonic() + timeout
    while len(records) < count:
        assert time.monotonic() < deadline, f"only {len(records)} of {count} records after {timeout}s"
        batches = await consumer.getmany(timeout_ms=200)
        for batch in batches.values():
            records.extend(batch)
    return records


# ------------------------------------------------------------------ basics

def test_tansu_binary_is_bundled_and_executable():
    path = tansu_binary()
    assert path.name == "tansu" and os.access(path, os.X_OK)


def test_broker_handle(kafka):
    assert kafka.url == f"kafka://{kafka.bootstrap}"
    host, port = kafka.bootstrap.rsplit(":", 1)
    assert (kafka.host, kafka.port) == (host, int(port))
    assert not kafka.tls and kafka.cafile is None
    if kafka.kind == "apache-kafka":
        assert all(node.running for node in kafka.cluster.nodes)
        assert kafka.host == "127.0.0.1"


def test_unique_names_do_not_collide(unique_name):
    names = {unique_name("topic") for _ in range(100)}
    assert len(names) == 100 and all(n.startswith("topic-") for n in names)


def test_keyed_records_with_headers_round_trip_through_a_group(kafka, unique_name):
    topic, group = unique_name("orders"), unique_name("group")

    async def scenario():
        await create_topic(kafka, topic, 3)
        sent = {}
        async with started(AIOKafkaProducer(**kafka.client_config())) as producer:
            for i in range(30):
                key = f"customer-{i % 7}".encode()
                headers = [("trace", f"t{i}".encode()), ("bin", bytes([0, i, 255]))]
                meta = await producer.send_and_wait(topic, f"order-{i}".encode(), key=key, headers=headers)
                sent[f"order-{i}".encode()] = (key, meta.partition, meta.offset, headers)
        assert {p for _, p, _, _ in sent.values()} == {0, 1, 2}

        consumer = AIOKafkaConsumer(topic, group_id=group, auto_offset_reset="earliest",
                                    enable_auto_commit=False, **kafka.group_config())
        async with started(consumer):
            records = await consume(consumer, 30)
            assert consumer.assignment() == {TopicPartition(topic, p) for p in range(3)}
            await consumer.commit()
        assert len(records) == 30
        for record in records:
            key, partition, offset, headers = sent[record.value]
            assert (record.key, record.partition, record.offset) == (key, partition, offset)
            assert list(record.headers) == headers
        partitions_by_key: Dict[bytes, set] = {}
        for key, partition, _, _ in sent.values():
            partitions_by_key.setdefault(key, set()).add(partition)
        assert all(len(ps) == 1 for ps in partitions_by_key.values())

        tps = [TopicPartition(topic, p) for p in range(3)]
        async with started(AIOKafkaConsumer(**kafka.client_config())) as reader:
            end = await reader.end_offsets(tps)
            assert await reader.beginning_offsets(tps) == {tp: 0 for tp in tps}
        assert sum(end.values()) == 30
        async with admin_client(kafka) as admin:
            committed = await admin.list_consumer_group_offsets(group, partitions=tps)
        assert {tp: om.offset for tp, om in committed.items()} == end

    asyncio.run(scenario())


class TaggedAssignor(AbstractPartitionAssignor):
    """Custom protocol name; member and assignment ``user_data`` carry a tag."""

    name = "streamkit-test-v1"
    version = 0

    def __init__(self, tag: bytes) -> None:
        self.tag = tag
        self.seen_user_data: Dict[str, bytes] = {}
        self.received: Tuple[list, bytes] = ([], b"")

    def metadata(self, topics) -> ConsumerProtocolMemberMetadata:
        return ConsumerProtocolMemberMetadata(self.version, sorted(topics), self.tag)

    def assign(self, cluster, members) -> Dict[str, ConsumerProtocolMemberAssignment]:
        self.seen_user_data = {member: meta.user_data for member, meta in members.items()}
        topics = sorted({t for meta in members.values() for t in meta.subscription})
        tps = [(t, p) for t in topics for p in sorted(cluster.partitions_for_topic(t))]
        ids = sorted(members)
        result = {}
        for i, member in enumerate(ids):
            mine: Dict[str, List[int]] = {}
            for t, p in tps[i::len(ids)]:
                mine.setdefault(t, []).append(p)
            result[member] = ConsumerProtocolMemberAssignment(
                self.version, sorted(mine.items()), b"for:" + members[member].user_data)
        return result

    def on_assignment(self, assignment: ConsumerProtocolMemberAssignment) -> None:
        self.received = (assignment.partitions(), assignment.user_data)


def test_custom_assignment_protocol_passes_user_data_both_ways(kafka, unique_name):
    topic, group = unique_name("assign"), unique_name("group")
    first, second = TaggedAssignor(b"A\x00\xff"), TaggedAssignor(b"B\x01")

    def member(assignor):
        return AIOKafkaConsumer(topic, group_id=group, partition_assignment_strategy=[assignor],
                                **kafka.group_config())

    async def scenario():
        await create_topic(kafka, topic, 4)
        async with started(member(first)) as c1, started(member(second)) as c2:
            deadline = time.monotonic() + TIMEOUT
            while not (len(c1.assignment()) == 2 and len(c2.assignment()) == 2):
                assert time.monotonic() < deadline, (c1.assignment(), c2.assignment())
                await asyncio.sleep(0.05)
            leader = first if first.seen_user_data else second
            assert sorted(leader.seen_user_data.values()) == [b"A\x00\xff", b"B\x01"]
            assert first.received[1] == b"for:A\x00\xff" and second.received[1] == b"for:B\x01"
            assert set(first.received[0]) == c1.assignment()
            assert set(second.received[0]) == c2.assignment()
            assert c1.assignment() | c2.assignment() == {TopicPartition(topic, p) for p in range(4)}

    asyncio.run(scenario())


def test_static_membership_is_accepted(kafka, unique_name):
    topic, group = unique_name("static"), unique_name("group")

    async def scenario():
        await create_topic(kafka, topic, 2)
        consumer = AIOKafkaConsumer(topic, group_id=group, group_instance_id="instance-1",
                                    **kafka.group_config())
        async with started(consumer):
            deadline = time.monotonic() + TIMEOUT
            while not consumer.assignment():
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
            assert consumer.assignment() == {TopicPartition(topic, 0), TopicPartition(topic, 1)}
            assert consumer._coordinator.member_id.startswith("instance-1-")

    asyncio.run(scenario())


def test_commit_offsets_for_a_group_without_members(kafka, unique_name):
    topic, group = unique_name("offsets"), unique_name("group")
    tps = [TopicPartition(topic, p) for p in range(3)]

    async def scenario():
        await create_topic(kafka, topic, 3)
        consumer = AIOKafkaConsumer(group_id=group, enable_auto_commit=False, **kafka.client_config())
        async with started(consumer):
            consumer.assign(tps)
            await consumer.commit({tps[0]: 5, tps[1]: 7})
            assert await consumer.committed(tps[0]) == 5
            assert await consumer.committed(tps[2]) is None
        async with admin_client(kafka) as admin:
            offsets = await admin.list_consumer_group_offsets(group, partitions=tps)
            groups = [g for g, _ in await admin.list_consumer_groups()]
        assert {tp: om.offset for tp, om in offsets.items()} == {tps[0]: 5, tps[1]: 7, tps[2]: -1}
        assert group in groups

    asyncio.run(scenario())


def test_topic_administration(kafka, unique_name):
    compacted, plain = unique_name("table"), unique_name("stream")

    async def scenario():
        await create_topic(kafka, compacted, 1, **{"cleanup.policy": "compact", "retention.ms": "60000"})
        await create_topic(kafka, plain, 2)
        async with admin_client(kafka) as admin:
            again = await admin.create_topics([NewTopic(plain, 2, 1)])
            assert again.topic_errors[0][1] == 36  # TOPIC_ALREADY_EXISTS
            [described] = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, compacted)])
            configs = {entry[0]: entry[1] for entry in described.resources[0][4]}
            assert configs["cleanup.policy"] == "compact" and configs["retention.ms"] == "60000"
            [topic] = await admin.describe_topics([plain])
            assert sorted(p["partition"] for p in topic["partitions"]) == [0, 1]
            assert {compacted, plain} <= set(await admin.list_topics())
            deleted = await admin.delete_topics([compacted])
            assert deleted.topic_error_codes == [(compacted, 0)]
            # Kafka answers DeleteTopics once the controller has the deletion; a broker's
            # metadata follows a moment later
            deadline = time.monotonic() + 15
            while compacted in await admin.list_topics():
                assert time.monotonic() < deadline, f"{compacted} still listed 15 s after its deletion"
                await asyncio.sleep(0.1)

    asyncio.run(scenario())


# ------------------------------------------------------- Tansu limitations

def test_tansu_rejects_transactional_and_idempotent_producers(tansu):
    ok, reason = asyncio.run(probe_transactions(tansu.client_config(), timeout=10))
    assert not ok and "UnknownError" in reason, reason
    assert not tansu.supports_transactions and "InitProducerId" in tansu.why_no_transactions

    async def idempotent():
        producer = AIOKafkaProducer(enable_idempotence=True, **tansu.client_config())
        try:
            with pytest.raises(UnknownError):
                await asyncio.wait_for(producer.start(), TIMEOUT)
        finally:
            await producer.stop()
    asyncio.run(idempotent())


def test_capability_probes_find_what_tansu_lacks(tansu):
    """The probes behind every capability skip decide by asking the broker, and on Tansu find
    exactly the gaps documented in tests/kafka/broker.py (each reason says what the probe saw)."""
    transactions = tansu.supports("transactions")
    delete_records = tansu.supports("delete_records")
    offset_metadata = tansu.supports("offset_metadata")
    assert transactions[0] is False and "UnknownError" in transactions[1]
    assert TANSU_NO_TRANSACTIONS in transactions[1] and transactions[1].startswith(tansu.bootstrap)
    assert (tansu.supports_transactions, tansu.why_no_transactions) == transactions
    assert delete_records[0] is False and "DeleteRecords failed: KafkaConnectionError" in delete_records[1]
    assert TANSU_NO_DELETE_RECORDS in delete_records[1]
    assert offset_metadata[0] is False and "read back as OffsetAndMetadata(offset=1, metadata=''" \
        in offset_metadata[1]
    assert TANSU_NO_OFFSET_METADATA in offset_metadata[1]
    assert tansu.supports("delete_records") is delete_records  # probed once per broker


def test_the_suites_broker_has_every_capability_tansu_lacks(kafka):
    """What the Kafka tests need is there: no Kafka test may skip for a broker capability."""
    if kafka.kind == "external":
        pytest.skip(f"{kafka.bootstrap} is an external broker: its capabilities are its own")
    assert kafka.kind == "apache-kafka"
    for capability in ("transactions", "delete_records", "offset_metadata"):
        assert kafka.supports(capability) == (True, ""), capability


def test_transaction_commits_atomically(transactional_kafka, unique_name):
    broker, topic = transactional_kafka, unique_name("txn")

    async def scenario():
        await create_topic(broker, topic, 1)
        producer = AIOKafkaProducer(transactional_id=unique_name("txn-id"), **broker.client_config())
        async with started(producer):
            async with producer.transaction():
                for i in range(3):
                    await producer.send(topic, f"v{i}".encode())
        consumer = AIOKafkaConsumer(topic, isolation_level="read_committed", auto_offset_reset="earliest",
                                    **broker.client_config())
        async with started(consumer):
            assert [r.value for r in await consume(consumer, 3)] == [b"v0", b"v1", b"v2"]

    asyncio.run(scenario())


def test_tansu_admin_gaps(tansu, unique_name):
    topic, group = unique_name("gaps"), unique_name("group")
    tp = TopicPartition(topic, 0)

    async def scenario():
        await create_topic(tansu, topic, 1)
        consumer = AIOKafkaConsumer(group_id=group, enable_auto_commit=False, **tansu.client_config())
        async with started(consumer):
            consumer.assign([tp])
            await consumer.commit({tp: 1})
        async with admin_client(tansu) as admin:
            with pytest.raises(IncompatibleBrokerVersion, match="AlterConfigsRequest"):
                await admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                                          configs={"retention.ms": "1"})])
            with pytest.raises(IncompatibleBrokerVersion, match="CreatePartitionsRequest"):
                await admin.create_partitions({topic: NewPartitions(2)})
            # OffsetFetch with null topics: Tansu's reply lacks the topics array.
            with pytest.raises(KafkaConnectionError, match="closed"):
                await admin.list_consumer_group_offsets(group)
            # DeleteRecords: ``todo!()`` in tansu-storage, the connection drops.
            with pytest.raises(KafkaConnectionError, match="closed"):
                await admin.delete_records({tp: RecordsToDelete(1)})
            assert topic in await admin.list_topics()  # the broker survived

    asyncio.run(scenario())
    assert "not yet implemented" in tansu.log_tail(200)


# --------------------------------------------------------------------- TLS

def test_tls_produce_and_consume(kafka_tls, unique_name):
    topic = unique_name("tls")
    assert kafka_tls.tls and kafka_tls.cafile

    async def scenario():
        await create_topic(kafka_tls, topic, 1)
        config = dict(bootstrap_servers=kafka_tls.bootstrap, security_protocol="SSL",
                      ssl_context=create_ssl_context(cafile=kafka_tls.cafile))
        async with started(AIOKafkaProducer(**config)) as producer:
            await producer.send_and_wait(topic, b"secret", key=b"k", headers=[("h", b"1")])
        async with started(AIOKafkaConsumer(topic, auto_offset_reset="earliest", **config)) as consumer:
            [record] = await consume(consumer, 1)
        assert (record.key, record.value, list(record.headers)) == (b"k", b"secret", [("h", b"1")])

    asyncio.run(scenario())


def test_tls_rejects_an_untrusted_ca_and_plaintext(kafka_tls, tmp_path):
    other_ca = generate_test_certs(tmp_path / "other").ca_file

    async def scenario():
        untrusted = AIOKafkaProducer(bootstrap_servers=kafka_tls.bootstrap, security_protocol="SSL",
                                     ssl_context=create_ssl_context(cafile=other_ca), request_timeout_ms=3000)
        plaintext = AIOKafkaProducer(bootstrap_servers=kafka_tls.bootstrap, request_timeout_ms=3000)
        for producer in (untrusted, plaintext):
            try:
                with pytest.raises((KafkaError, asyncio.TimeoutError)):
                    await asyncio.wait_for(producer.start(), 8)
            finally:
                await producer.stop()

    asyncio.run(scenario())


def test_tls_server_certificate_names(kafka_tls):
    context = ssl.create_default_context(cafile=kafka_tls.cafile)
    for name in ("127.0.0.1", "localhost"):
        with socket.create_connection((kafka_tls.host, kafka_tls.port), timeout=5) as raw:
            with context.wrap_socket(raw, server_hostname=name) as tls:
                assert tls.version() in ("TLSv1.2", "TLSv1.3")


@pytest.mark.parametrize("key_format", ["rsa", "ec"])
def test_tls_key_formats(tmp_path, key_format):
    """PKCS#1 RSA and SEC1 EC keys work as well as the default PKCS#8."""
    certs = generate_test_certs(tmp_path, key_format=key_format)
    header = {"rsa": b"BEGIN RSA PRIVATE KEY", "ec": b"BEGIN EC PRIVATE KEY"}[key_format]
    assert header in open(certs.key_file, "rb").read()
    with start_tansu(cert=certs.cert_file, key=certs.key_file, cafile=certs.ca_file,
                     log_path=tmp_path / "tansu.log") as broker:
        assert broker.tls
        assert "tansu_cluster" in repr(asyncio.run(_describe_cluster(broker)))


async def _describe_cluster(broker: KafkaTestBroker) -> dict:
    async with admin_client(broker) as admin:
        return await admin.describe_cluster()


def test_tansu_cli_cannot_enable_tls_itself(tmp_path):
    certs = generate_test_certs(tmp_path)
    result = subprocess.run([str(tansu_binary()), "broker", "--listener-url", "tcp://127.0.0.1:1",
                             "--storage-engine", "memory://tansu/", "--cert", certs.cert_file,
                             "--key", certs.key_file], capture_output=True, text=True, timeout=10)
    assert result.returncode == 2 and "cannot be used with" in result.stderr


# ------------------------------------------------------------------- proxy

def test_proxy_outage_and_recovery(kafka_behind_proxy, unique_name):
    broker, proxy = kafka_behind_proxy
    topic = unique_name("outage")
    assert broker.bootstrap == proxy.address

    async def scenario():
        await create_topic(broker, topic, 1)
        producer = AIOKafkaProducer(request_timeout_ms=20000, retry_backoff_ms=100, **broker.client_config())
        async with started(producer):
            for i in range(5):
                await producer.send_and_wait(topic, f"before-{i}".encode())
            assert proxy.accepted >= 1 and proxy.open_connections >= 2

            proxy.cut()
            assert proxy.open_connections == 0
            pending = await producer.send(topic, b"during")
            await asyncio.sleep(1.5)
            assert not pending.done(), "a send cannot complete while the network is cut"
            admin = AIOKafkaAdminClient(request_timeout_ms=1000, **broker.client_config())
            try:
                with pytest.raises(KafkaConnectionError):
                    await asyncio.wait_for(admin.start(), 10)
            finally:
                await admin.close()
            assert proxy.refused >= 1

            proxy.restore()
            meta = await asyncio.wait_for(pending, TIMEOUT)
            assert meta.offset == 5
            await producer.send_and_wait(topic, b"after")

        consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **broker.client_config())
        async with started(consumer):
            values = [r.value for r in await consume(consumer, 7)]
        assert values == [f"before-{i}".encode() for i in range(5)] + [b"during", b"after"]

    asyncio.run(scenario())


def test_proxy_cut_drops_a_consumer_which_then_resumes(kafka_behind_proxy, unique_name):
    broker, proxy = kafka_behind_proxy
    topic = unique_name("resume")

    async def scenario():
        await create_topic(broker, topic, 1)
        async with started(AIOKafkaProducer(**broker.client_config())) as producer, \
                started(AIOKafkaConsumer(topic, auto_offset_reset="earliest",
                                         **broker.client_config())) as consumer:
            await producer.send_and_wait(topic, b"one")
            assert [r.value for r in await consume(consumer, 1)] == [b"one"]
            proxy.cut()
            assert await consumer.getmany(timeout_ms=1000) == {}
            proxy.restore()
            await producer.send_and_wait(topic, b"two")
            assert [r.value for r in await consume(consumer, 1)] == [b"two"]

    asyncio.run(scenario())
