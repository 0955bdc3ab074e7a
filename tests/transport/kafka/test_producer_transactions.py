"""KafkaProducer's transactions (issue 19 items 2 and 3): ``transaction_timeout_ms`` reaches
aiokafka, and a commit that fails leaves the transaction open so that ``abort_transaction``
aborts it on the broker.

No broker the CI machine can run supports transactions (Tansu 0.6.0 rejects InitProducerId),
so these tests use real ``AIOKafkaProducer`` objects, never started, whose broker-facing
transaction methods (``start``, ``begin_transaction``, ``send_offsets_to_transaction``,
``commit_transaction``, ``abort_transaction``) are replaced by :class:`FakeCoordinator`: it
stands in for a transactional broker and injects faults at the aiokafka boundary. It drives
aiokafka's own ``TransactionManager`` through the states aiokafka's sender would put it in
for each fault (ABORTABLE_ERROR, FATAL_ERROR when the sender task dies, ...), so what
KafkaProducer reads from aiokafka is real. The end-to-end exactly-once tests in tests/kafka
run against a real transactional broker (``STREAMKIT_TEST_KAFKA``).
"""
from __future__ import annotations

import asyncio
from typing import Callable, Dict, List, Optional

import pytest
from aiokafka.errors import (GroupAuthorizationFailedError, InvalidTransactionTimeout, KafkaConnectionError,
                             KafkaError, ProducerFenced)
from aiokafka.producer.sender import InitPIDHandler
from aiokafka.protocol.transaction import InitProducerIdRequest_v0

from streamkit.errors import ConfigError, ProducerUnusableError, StreamkitError, TaskMigratedError
from streamkit.transport.base import TopicPartition
from streamkit.transport.kafka.config import KafkaClientConfig
from streamkit.transport.kafka.producer import KafkaProducer

URL = "kafka://127.0.0.1:9"  # never connected to
TID = "orders-app-0_2"
GROUP = "orders-app"
OFFSETS = {TopicPartition("orders", 2): 17}


def config(**settings) -> KafkaClientConfig:
    return KafkaClientConfig.from_sources(URL, app_settings=settings, environ={})


Fault = Callable[["FakeCoordinator"], BaseException]


class FakeCoordinator:
    """A transactional broker's transaction coordinator, for a CI machine that cannot run one.

    Replaces the transaction methods of a real, unstarted AIOKafkaProducer. ``calls`` lists
    the broker-facing calls in order; ``faults[name]`` makes the call ``name`` fail with the
    exception it returns, after moving aiokafka's TransactionManager as aiokafka would."""

    def __init__(self, producer: KafkaProducer) -> None:
        self.kafka = producer._kafka
        self.manager = self.kafka._txn_manager
        self.calls: List[str] = []
        self.faults: Dict[str, Fault] = {}
        self.commit_started: Optional[asyncio.Event] = None
        self.kafka.start = self.start
        self.kafka.begin_transaction = self.begin_transaction
        self.kafka.send_offsets_to_transaction = self.send_offsets_to_transaction
        self.kafka.commit_transaction = self.commit_transaction
        self.kafka.abort_transaction = self.abort_transaction

    def _fault(self, name: str) -> None:
        fault = self.faults.pop(name, None)
        if fault is not None:
            exc = fault(self)
            waiter = self.manager._transaction_waiter
            if waiter is not None and waiter.done():
                waiter.exception()  # retrieved, as aiokafka's caller awaiting it would
            raise exc

    async def start(self) -> None:                  # InitProducerId
        self.calls.append("init_producer_id")
        self._fault("init_producer_id")
        self.manager.set_pid_and_epoch(4711, 0)

    async def begin_transaction(self) -> None:
        self.calls.append("begin")
        self.manager.begin_transaction()

    async def send_offsets_to_transaction(self, offsets, group_id) -> None:  # AddOffsetsToTxn + TxnOffsetCommit
        self.calls.append("send_offsets")
        assert self.manager.is_in_transaction() and group_id == GROUP
        self._fault("send_offsets")

    async def commit_transaction(self) -> None:      # EndTxn(COMMIT)
        self.calls.append("commit")
        self.manager.committing_transaction()          # raises an earlier abortable error, as aiokafka does
        if self.commit_started is not None:
            self.commit_started.set()
            await asyncio.Event().wait()               # a commit that never completes (until cancelled)
        self._fault("commit")
        self.manager.complete_transaction()

    async def abort_transaction(self) -> None:       # EndTxn(ABORT): the broker-abort call
        self.calls.append("abort")
        self.manager.aborting_transaction()            # asserts, as aiokafka does, on a state it cannot abort from
        self._fault("abort")
        self.manager.complete_transaction()


# Faults, each as aiokafka's sender reports it.
def transient(_: FakeCoordinator) -> BaseException:
    """The request did not get through; aiokafka's transaction state is left as it was."""
    return KafkaConnectionError("Connection at 127.0.0.1:9 closed")


def abortable(fake: FakeCoordinator) -> BaseException:
    """AddOffsetsToTxn/TxnOffsetCommit refused for the group: aiokafka's error_transaction()."""
    exc = GroupAuthorizationFailedError(GROUP)
    fake.manager.error_transaction(exc)
    return exc


def fatal(fake: FakeCoordinator) -> BaseException:
    """An unexpected error in a transactional request: aiokafka's sender task dies and
    Sender._fail_all() puts the manager in FATAL_ERROR."""
    exc = KafkaError("Unexpected error during batch delivery")
    fake.manager.fatal_error(exc)
    return exc


def fenced(fake: FakeCoordinator) -> BaseException:
    """A newer producer with the same transactional id bumped the epoch (the sender re-raises
    ProducerFenced and dies)."""
    exc = ProducerFenced()
    fake.manager.fatal_error(exc)
    return exc


def producer_with_fake(**settings) -> "tuple[KafkaProducer, FakeCoordinator]":
    producer = KafkaProducer(config(**settings), transactional_id=TID)
    return producer, FakeCoordinator(producer)


# ---------------------------------------------------------------- transaction_timeout_ms

@pytest.mark.parametrize("settings, environ, expected", [
    ({}, {}, 60000),
    ({"transaction_timeout_ms": 120000}, {}, 120000),
    ({"transaction_timeout_ms": 120000}, {"STREAMKIT_KAFKA_TRANSACTION_TIMEOUT_MS": " 15000 "}, 15000),
])
def test_transaction_timeout_reaches_aiokafkas_init_producer_id(settings, environ, expected) -> None:
    cfg = KafkaClientConfig.from_sources(URL, app_settings=settings, environ=environ)
    assert cfg.transaction_timeout_ms == expected and cfg.describe()["transaction_timeout_ms"] == expected

    async def build():
        transactional = KafkaProducer(cfg, transactional_id=TID)
        plain = KafkaProducer(cfg)
        try:
            # what aiokafka's sender puts in the InitProducerId request it sends on start()
            request = InitPIDHandler(transactional._kafka._sender).create_request()
            wire = InitProducerIdRequest_v0.decode(request.build(InitProducerIdRequest_v0).encode())
            return (transactional.transaction_timeout_ms, transactional._kafka._txn_manager.transaction_timeout_ms,
                    wire.transactional_id, wire.transaction_timeout_ms,
                    plain.transaction_timeout_ms, plain._kafka._txn_manager)
        finally:
            await transactional.aclose()
            await plain.aclose()
    attribute, manager, request_id, request_timeout, plain_attribute, plain_manager = asyncio.run(build())
    assert attribute == manager == request_timeout == expected and isinstance(attribute, int)
    assert request_id == TID
    assert plain_attribute == expected and plain_manager is None  # only transactional producers use it


def test_transaction_timeout_from_the_config_file(tmp_path) -> None:
    path = tmp_path / "streamkit.toml"
    path.write_text("[kafka]\ntransaction_timeout_ms = 30000\n")
    assert KafkaClientConfig.from_sources(URL, config_file=path, environ={}).transaction_timeout_ms == 30000


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "60000", None])
def test_an_invalid_transaction_timeout_is_a_clear_error(value) -> None:
    with pytest.raises(ConfigError) as error:
        config(transaction_timeout_ms=value)
    message = str(error.value)
    assert "app setting kafka_config['transaction_timeout_ms']" in message
    assert "transaction_timeout_ms must be an integer >= 1" in message and repr(value) in message


@pytest.mark.parametrize("text", ["abc", "0", "-100", "1e5"])
def test_an_invalid_transaction_timeout_in_the_environment_is_a_clear_error(text) -> None:
    with pytest.raises(ConfigError) as error:
        KafkaClientConfig.from_sources(URL, environ={"STREAMKIT_KAFKA_TRANSACTION_TIMEOUT_MS": text})
    message = str(error.value)
    assert "environment variable STREAMKIT_KAFKA_TRANSACTION_TIMEOUT_MS" in message
    assert "transaction_timeout_ms must be an integer >= 1" in message


def test_the_transaction_timeout_must_exceed_the_commit_interval() -> None:
    cfg = config(transaction_timeout_ms=1000)
    cfg.check_commit_interval(999)
    config().check_commit_interval(100)  # the defaults: 60 s against exactly_once's 100 ms
    for interval in (1000, 30000):
        with pytest.raises(ConfigError) as error:
            cfg.check_commit_interval(interval, "the app's commit_interval")
        message = str(error.value)
        assert f"transaction_timeout_ms (1000) must be larger than the app's commit_interval ({interval} ms)" \
            in message
        assert "STREAMKIT_KAFKA_TRANSACTION_TIMEOUT_MS" in message
    for nonsense in (0, -5, float("nan"), True):
        with pytest.raises(ConfigError, match="positive number of milliseconds"):
            cfg.check_commit_interval(nonsense)


def test_a_timeout_above_the_brokers_limit_is_a_clear_error() -> None:
    async def scenario():
        producer, fake = producer_with_fake(transaction_timeout_ms=3_600_000)
        fake.faults["init_producer_id"] = lambda _: InvalidTransactionTimeout()
        try:
            with pytest.raises(ConfigError) as error:
                await producer.begin_transaction()
            return str(error.value), fake.calls, producer._kafka._closed
        finally:
            await producer.aclose()
    message, calls, closed = asyncio.run(scenario())
    assert calls == ["init_producer_id"] and closed
    assert "transaction_timeout_ms=3600000" in message and TID in message
    assert "transaction.max.timeout.ms" in message


# ---------------------------------------------------------------- a failed commit is aborted on the broker

@pytest.mark.parametrize("where, fault, state_after_commit", [
    ("send_offsets", transient, "IN_TRANSACTION"),
    ("send_offsets", abortable, "ABORTABLE_ERROR"),
    ("before_commit", abortable, "ABORTABLE_ERROR"),  # an earlier abortable error, raised by the commit
])
def test_after_a_failed_commit_abort_reaches_the_broker_exactly_once(where, fault, state_after_commit) -> None:
    async def scenario():
        producer, fake = producer_with_fake()
        try:
            await producer.begin_transaction()
            if where == "before_commit":
                fault(fake)
            else:
                fake.faults[where] = fault
            with pytest.raises(StreamkitError) as error:
                await producer.commit_transaction(GROUP, OFFSETS)
            assert not isinstance(error.value, (TaskMigratedError, ProducerUnusableError))
            assert TID in str(error.value) and "committing" in str(error.value)
            state = fake.manager.state.name
            await producer.abort_transaction()
            await producer.abort_transaction()  # nothing is open any more: no second broker abort
            aborts = fake.calls.count("abort")
            # aborted, the producer is usable again
            await producer.begin_transaction()
            await producer.commit_transaction(GROUP, OFFSETS)
            return state, aborts, fake.manager.state.name, fake.calls, producer.unusable
        finally:
            await producer.aclose()
    state, aborts, final_state, calls, unusable = asyncio.run(scenario())
    assert state == state_after_commit
    assert aborts == 1
    assert final_state == "READY" and unusable is None
    assert calls[-3:] == ["begin", "send_offsets", "commit"]


def test_a_failed_delivery_leaves_the_transaction_to_abort_on_the_broker() -> None:
    """The output's acks fail before the commit: the transaction stays open and is aborted."""
    async def scenario():
        producer, fake = producer_with_fake()
        try:
            await producer.begin_transaction()
            loop = asyncio.get_running_loop()
            failed, handed_over = loop.create_future(), loop.create_future()
            failed.set_exception(KafkaConnectionError("Connection at 127.0.0.1:9 closed"))
            handed_over.set_result([(3, failed)])
            producer._pending.append(("orders-out", 0, handed_over))  # a batch whose ack failed
            with pytest.raises(StreamkitError, match=r"producing to orders-out\[0\]"):
                await producer.commit_transaction(GROUP, OFFSETS)
            await producer.abort_transaction()
            return fake.calls
        finally:
            await producer.aclose()
    assert asyncio.run(scenario()) == ["init_producer_id", "begin", "abort"]


@pytest.mark.parametrize("where", ["send_offsets", "commit"])
def test_after_fencing_abort_does_not_reach_the_broker(where) -> None:
    async def scenario():
        producer, fake = producer_with_fake()
        try:
            await producer.begin_transaction()
            fake.faults[where] = fenced
            with pytest.raises(TaskMigratedError, match=f"producer {TID} was fenced"):
                await producer.commit_transaction(GROUP, OFFSETS)
            await producer.abort_transaction()  # quiet: the newer producer aborted it already
            with pytest.raises(TaskMigratedError):
                await producer.begin_transaction()  # a fenced producer never works again
            return fake.calls
        finally:
            await producer.aclose()
    calls = asyncio.run(scenario())
    assert "abort" not in calls and calls.count("begin") == 1


def test_an_abort_answered_with_fencing_is_quiet() -> None:
    async def scenario():
        producer, fake = producer_with_fake()
        try:
            await producer.begin_transaction()
            fake.faults["abort"] = fenced
            await producer.abort_transaction()
            await producer.abort_transaction()
            return fake.calls.count("abort"), producer._in_transaction
        finally:
            await producer.aclose()
    assert asyncio.run(scenario()) == (1, False)


def test_after_a_successful_commit_abort_does_not_reach_the_broker() -> None:
    async def scenario():
        producer, fake = producer_with_fake()
        try:
            await producer.abort_transaction()  # never begun
            await producer.begin_transaction()
            await producer.commit_transaction(GROUP, OFFSETS)
            await producer.abort_transaction()
            return fake.calls
        finally:
            await producer.aclose()
    assert asyncio.run(scenario()) == ["init_producer_id", "begin", "send_offsets", "commit"]


# ---------------------------------------------------------------- when aiokafka cannot abort

def _assert_restart_message(message: str) -> None:
    assert f"transactional producer {TID} on 127.0.0.1:9" in message
    assert "restart the task with a new producer" in message
    assert "transaction_timeout_ms=60000" in message


def test_after_aiokafkas_sender_died_the_producer_must_be_replaced() -> None:
    """A commit that failed fatally (FATAL_ERROR: aiokafka's sender task is gone) cannot be
    aborted by this producer: the abort says so, naming the transactional id, and the
    producer refuses any further use instead of being reused silently."""
    async def scenario():
        producer, fake = producer_with_fake()
        try:
            await producer.begin_transaction()
            fake.faults["commit"] = fatal
            with pytest.raises(StreamkitError, match="Unexpected error during batch delivery"):
                await producer.commit_transaction(GROUP, OFFSETS)
            with pytest.raises(ProducerUnusableError) as aborted:
                await producer.abort_transaction()
            refusals = []
            for attempt in (producer.abort_transaction, producer.begin_transaction,
                            lambda: producer.send([("orders-out", 0, [(b"k", b"v", 1, None)])]),
                            lambda: producer.commit_transaction(GROUP, OFFSETS)):
                with pytest.raises(ProducerUnusableError) as refused:
                    await attempt()
                refusals.append(str(refused.value))
            return str(aborted.value), refusals, fake.calls, producer.unusable
        finally:
            await producer.aclose()  # closes without raising
    message, refusals, calls, unusable = asyncio.run(scenario())
    _assert_restart_message(message)
    assert "FATAL_ERROR" in message and "Unexpected error during batch delivery" in message
    assert refusals == [message] * 4 and unusable == message
    assert "abort" not in calls  # aiokafka would assert (or, under -O, hang): never called


def test_an_interrupted_commit_cannot_be_aborted_by_this_producer() -> None:
    """The caller stopped waiting for a commit (cancelled it): aiokafka is COMMITTING and
    cannot abort from there."""
    async def scenario():
        producer, fake = producer_with_fake()
        try:
            await producer.begin_transaction()
            fake.commit_started = asyncio.Event()
            commit = asyncio.ensure_future(producer.commit_transaction(GROUP, OFFSETS))
            await fake.commit_started.wait()
            commit.cancel()
            with pytest.raises(asyncio.CancelledError):
                await commit
            with pytest.raises(ProducerUnusableError) as aborted:
                await producer.abort_transaction()
            return str(aborted.value), fake.calls
        finally:
            await producer.aclose()
    message, calls = asyncio.run(scenario())
    _assert_restart_message(message)
    assert "COMMITTING_TRANSACTION" in message and "abort" not in calls


def test_an_abort_that_fails_makes_the_producer_unusable() -> None:
    async def scenario():
        producer, fake = producer_with_fake()
        try:
            await producer.begin_transaction()
            fake.faults["send_offsets"] = transient
            with pytest.raises(StreamkitError):
                await producer.commit_transaction(GROUP, OFFSETS)
            fake.faults["abort"] = fatal
            with pytest.raises(ProducerUnusableError) as aborted:
                await producer.abort_transaction()
            with pytest.raises(ProducerUnusableError):
                await producer.abort_transaction()  # says so again, without another broker call
            with pytest.raises(ProducerUnusableError):
                await producer.begin_transaction()
            return str(aborted.value), fake.calls.count("abort")
        finally:
            await producer.aclose()
    message, aborts = asyncio.run(scenario())
    _assert_restart_message(message)
    assert "aborting the transaction failed: KafkaError" in message
    assert aborts == 1


def test_closing_an_unusable_producer_stops_its_client_without_raising(caplog) -> None:
    async def scenario():
        producer, fake = producer_with_fake()
        await producer.begin_transaction()
        fake.faults["commit"] = fatal
        with pytest.raises(StreamkitError):
            await producer.commit_transaction(GROUP, OFFSETS)
        await producer.aclose()  # the first to find out: logs the warning
        return producer._kafka._closed, fake.calls
    with caplog.at_level("WARNING", logger="streamkit.transport.kafka.producer"):
        closed, calls = asyncio.run(scenario())
    assert closed and "abort" not in calls
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and TID in warnings[0] and "restart the task with a new producer" in warnings[0]
