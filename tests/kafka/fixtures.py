"""Fixtures giving tests a real Kafka broker: Apache Kafka itself, started by the suite.

Registered once for the whole suite by tests/conftest.py (``pytest_plugins``), so every
folder shares one session broker per pytest process: importing these fixtures into another
conftest would register them again and start a second broker for that folder.

``kafka``               session-wide single-node Apache Kafka (KRaft, transactions on):
                        ``STREAMKIT_TEST_KAFKA=host:port`` points it at an external broker.
``kafka_tls``           session-wide Apache Kafka whose listener speaks TLS only
                        (generated CA in ``.cafile``); skipped with an external broker.
``kafka_sasl``          session-wide Apache Kafka with a SASL_SSL listener, SCRAM-SHA-512
                        users and Kafka's ACL authorizer (``.cluster`` makes users/ACLs).
``kafka_cluster``       per-test three-node Apache Kafka (RF 3, min.insync.replicas 2) whose
                        nodes can be killed and restarted: the failover tests.
``kafka_cluster_proxied`` ``kafka_cluster`` plus a listener per node behind a ``FaultProxy``
                        (``.proxied_bootstrap``): cuts one client off the cluster.
``kafka_behind_proxy``  per-test ``(broker, FaultProxy)``: Apache Kafka whose clients all go
                        through a proxy that can ``cut()`` the network.
``tansu``               session-wide Tansu 0.6.0, for the Kafka-compatible-broker smoke test.
``transactional_kafka`` ``kafka``, checked to support transactions (else the test fails).
``unique_name``         ``unique_name(prefix)``: collision-free topic/group names.

Apache Kafka's jars come from Maven Central through ``scripts/ensure-kafka`` (``make test``
runs it; a missing download fails the suite rather than skipping the Kafka tests). What a
broker can do is still probed (``kafka.supports(...)``) where a test reports it.
Test topics keep their records (``retention.ms=-1``): create them with tests/kafka/topics.py.
"""
from __future__ import annotations

import os
from typing import Callable, Iterator, Tuple

import pytest

from .apache_kafka import ApacheKafkaCluster, start_apache_kafka
from .broker import ENV_VAR, KafkaTestBroker, external_broker, start_tansu, unique_name as _unique_name
from .certs import generate_test_certs
from .proxy import FaultProxy


def _external() -> str:
    return os.environ.get(ENV_VAR, "").strip()


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaTestBroker]:
    """The session's broker: a single Apache Kafka node, or ``STREAMKIT_TEST_KAFKA``."""
    if _external():
        broker = external_broker(_external())
    else:
        broker = start_apache_kafka(1, directory=tmp_path_factory.mktemp("kafka")).broker
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def kafka_tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaTestBroker]:
    """Apache Kafka reachable only via TLS, with a throwaway CA in ``.cafile``."""
    if _external():
        pytest.skip(f"kafka_tls needs a broker whose TLS the suite configures; "
                    f"{ENV_VAR} points at an external broker")
    directory = tmp_path_factory.mktemp("kafka-tls")
    certs = generate_test_certs(directory / "certs")
    broker = start_apache_kafka(1, directory=directory / "kafka", certs=certs).broker
    try:
        yield broker
    finally:
        broker.stop()


#: SCRAM-SHA-512 users of the ``kafka_sasl`` broker (besides its super user ``admin``).
SASL_USERS = {"pageviews": "pageviews-secret", "stranger": "stranger-secret"}


@pytest.fixture(scope="session")
def kafka_sasl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaTestBroker]:
    """Apache Kafka with one SASL_SSL listener: SCRAM-SHA-512 users :data:`SASL_USERS` and
    ``admin`` (a super user, the handle's own credentials), ACLs checked by Kafka's
    StandardAuthorizer, nothing allowed without an ACL."""
    if _external():
        pytest.skip(f"kafka_sasl needs a broker whose users and ACLs the suite configures; "
                    f"{ENV_VAR} points at an external broker")
    directory = tmp_path_factory.mktemp("kafka-sasl")
    certs = generate_test_certs(directory / "certs")
    broker = start_apache_kafka(1, directory=directory / "kafka", certs=certs, scram_users=SASL_USERS).broker
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def kafka_cluster(tmp_path) -> Iterator[ApacheKafkaCluster]:
    """A fresh three-node Apache Kafka cluster (RF 3, min.insync.replicas 2) for failover tests."""
    if _external():
        pytest.skip(f"kafka_cluster kills and restarts brokers the suite started; {ENV_VAR} points "
                    f"at an external broker")
    cluster = start_apache_kafka(3, directory=tmp_path / "cluster")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def kafka_cluster_proxied(tmp_path) -> Iterator[ApacheKafkaCluster]:
    """``kafka_cluster`` whose nodes also have a ``PROXIED`` listener behind a
    :class:`FaultProxy` each (``.proxies``, ``.proxied_bootstrap``): a client bootstrapped
    there reaches the cluster only through the proxies, which can ``cut()`` it off alone."""
    if _external():
        pytest.skip(f"kafka_cluster_proxied needs brokers that advertise the proxies; {ENV_VAR} points "
                    f"at an external broker")
    cluster = start_apache_kafka(3, directory=tmp_path / "cluster", proxied=True)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def kafka_behind_proxy(tmp_path) -> Iterator[Tuple[KafkaTestBroker, FaultProxy]]:
    """A fresh Apache Kafka whose clients all connect through a :class:`FaultProxy`: the
    broker listens on a private port and advertises the proxy's."""
    if _external():
        pytest.skip(f"kafka_behind_proxy needs a broker that advertises the proxy; {ENV_VAR} points "
                    f"at an external broker")
    from .broker import HOST, free_port

    listen = free_port()
    proxy = FaultProxy((HOST, listen))
    try:
        broker = start_apache_kafka(1, directory=tmp_path / "kafka", external_ports=[listen],
                                    advertised_ports=[proxy.port]).broker
    except BaseException:
        proxy.close()
        raise
    try:
        yield broker, proxy
    finally:
        broker.stop()
        proxy.close()


@pytest.fixture(scope="session")
def tansu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaTestBroker]:
    """Tansu 0.6.0 (in-memory engine): a Kafka-compatible broker for the compatibility smoke
    test and the tests that pin down what it lacks."""
    broker = start_tansu(log_path=tmp_path_factory.mktemp("tansu") / "tansu.log")
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def transactional_kafka(kafka: KafkaTestBroker) -> KafkaTestBroker:
    """``kafka``, probed for transactions (a transactional producer's InitProducerId and an
    empty transaction). The suite's own broker has them: a broker without them fails the
    test rather than hiding it behind a skip; only an external broker may lack them (skip)."""
    if not kafka.supports_transactions:
        if kafka.kind == "external":
            pytest.skip(f"{ENV_VAR} broker without transactions: {kafka.why_no_transactions}")
        pytest.fail(f"the suite's Apache Kafka refused transactions: {kafka.why_no_transactions}")
    return kafka


@pytest.fixture
def unique_name() -> Callable[[str], str]:
    """``unique_name(prefix)`` -> a topic/group name no other test uses."""
    return _unique_name
