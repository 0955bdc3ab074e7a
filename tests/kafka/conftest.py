"""Fixtures giving tests a real Kafka-protocol broker.

``kafka``               session-wide broker: ``STREAMKIT_TEST_KAFKA=host:port``
                        if set, else a Tansu process (stopped at session end).
``kafka_tls``           session-wide Tansu reachable only over TLS (generated
                        CA in ``.cafile``); skipped with an external broker.
``kafka_behind_proxy``  per-test ``(broker, FaultProxy)``: Tansu whose clients
                        all go through a proxy that can ``cut()`` the network.
``transactional_kafka`` ``kafka`` if it supports transactions, else a skip.
``unique_name``         ``unique_name(prefix)``: collision-free topic/group names.

What the broker can do is probed, not assumed from which broker it is:
``kafka.supports("transactions" | "delete_records" | "offset_metadata")`` asks it
once per session with plain aiokafka clients (tests/kafka/broker.py). Test topics
keep their records (``retention.ms=-1``): create them with tests/kafka/topics.py.

Every skip states its reason, printed in the summary of every run (``-rs`` in
setup.cfg's addopts, which also works under pytest-xdist).
"""
from __future__ import annotations

import os
from typing import Callable, Iterator, Tuple

import pytest

from .broker import ENV_VAR, KafkaTestBroker, external_broker, start_tansu, unique_name as _unique_name
from .certs import generate_test_certs
from .proxy import FaultProxy, start_tansu_behind_proxy


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaTestBroker]:
    """The session's broker (external if ``STREAMKIT_TEST_KAFKA`` is set)."""
    external = os.environ.get(ENV_VAR, "").strip()
    if external:
        broker = external_broker(external)
    else:
        broker = start_tansu(log_path=tmp_path_factory.mktemp("tansu") / "tansu.log")
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def kafka_tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaTestBroker]:
    """A Tansu reachable only via TLS, with a throwaway CA in ``.cafile``."""
    if os.environ.get(ENV_VAR, "").strip():
        pytest.skip(f"kafka_tls needs a broker whose TLS the suite configures; "
                         f"{ENV_VAR} points at an external broker")
    directory = tmp_path_factory.mktemp("tansu-tls")
    certs = generate_test_certs(directory / "certs")
    broker = start_tansu(cert=certs.cert_file, key=certs.key_file, cafile=certs.ca_file,
                         log_path=directory / "tansu.log")
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def kafka_behind_proxy(tmp_path) -> Iterator[Tuple[KafkaTestBroker, FaultProxy]]:
    """A fresh Tansu whose clients all connect through a :class:`FaultProxy`."""
    broker, proxy = start_tansu_behind_proxy(log_path=tmp_path / "tansu.log")
    try:
        yield broker, proxy
    finally:
        broker.stop()
        proxy.close()


@pytest.fixture
def transactional_kafka(kafka: KafkaTestBroker) -> KafkaTestBroker:
    """``kafka`` when it supports transactions (probed: a transactional producer's
    InitProducerId and an empty transaction); otherwise the test is skipped."""
    if not kafka.supports_transactions:
        pytest.skip(f"broker without transactions: {kafka.why_no_transactions}")
    return kafka


@pytest.fixture
def unique_name() -> Callable[[str], str]:
    """``unique_name(prefix)`` -> a topic/group name no other test uses."""
    return _unique_name
