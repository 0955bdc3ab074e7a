"""Apache Kafka brokers (KRaft) started by the test suite from the jars of ``scripts/ensure-kafka``.

:func:`start_apache_kafka` starts ``nodes`` combined broker+controller processes on free
loopback ports and returns an :class:`ApacheKafkaCluster`; its :attr:`~ApacheKafkaCluster.broker`
is the :class:`~tests.kafka.broker.KafkaTestBroker` handle the tests use. Each node has three
listeners:

* ``EXTERNAL``: what clients use: ``PLAINTEXT``, ``SSL`` (``certs=``) or ``SASL_SSL`` with
  SCRAM-SHA-512 users created at format time (``certs=`` and ``scram_users=``), where Kafka's
  own ``StandardAuthorizer`` checks ACLs (``allow.everyone.if.no.acl.found=false``). Its
  advertised port may differ from the port it listens on (``advertised_ports=``), so a
  :class:`~tests.kafka.proxy.FaultProxy` can stand in front of it.
* ``INTERNAL``: replication between brokers, plaintext; its principal (``User:ANONYMOUS``) is
  a super user, so the authorizer never stands between brokers.
* ``CONTROLLER``: the KRaft quorum (every node is a voter).
* ``PROXIED`` (only with ``proxied=True``): a second plaintext client listener whose
  advertised port is a :class:`~tests.kafka.proxy.FaultProxy` in front of it. Kafka answers
  metadata with the addresses of the listener a request came in on, so a client
  bootstrapped at :attr:`~ApacheKafkaCluster.proxied_bootstrap` reaches every node only
  through :attr:`~ApacheKafkaCluster.proxies`: cutting them isolates that client while
  the brokers and the other clients keep talking.

A node can be killed (SIGKILL), stopped (SIGTERM, a controlled shutdown) and started again
on the same ports and data, which is how the failover tests move partition leaders.

Broker settings chosen for tests: internal topics with 8 partitions (50 by default; creating
them is the slowest step of a first transaction or group), ``group.initial.rebalance.delay.ms=0``,
replication factor and ``min.insync.replicas`` from the node count (3 nodes: RF 3, ISR 2).
"""
from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Union

from .broker import HOST, KafkaTestBroker, _die_with_parent, _kill_at_exit, _probe_ready, free_port, run_sync
from .certs import TestCerts
from .proxy import FaultProxy

#: Folder of the broker's jars (default: where ``scripts/ensure-kafka`` puts them).
LIBS_ENV_VAR = "STREAMKIT_KAFKA_LIBS"
_REPO = Path(__file__).resolve().parents[2]
_ENSURE_KAFKA = _REPO / "scripts" / "ensure-kafka"
#: SCRAM user the suite creates on a SASL listener: a super user, for the tests' own admin work.
ADMIN_USER = ("admin", "admin-secret")

_LOG4J2 = """\
Configuration:
  Appenders:
    Console:
      name: STDOUT
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Logger:
      - name: kafka.request.logger
        level: WARN
      - name: state.change.logger
        level: WARN
      - name: org.apache.kafka.controller
        level: WARN
      - name: kafka.log.LogCleaner
        level: WARN
    Root:
      level: INFO
      AppenderRef:
        - ref: STDOUT
"""


def kafka_libs() -> Path:
    """The folder holding Apache Kafka's jars, fetched by ``scripts/ensure-kafka`` if needed."""
    configured = os.environ.get(LIBS_ENV_VAR, "").strip()
    try:
        result = subprocess.run([str(_ENSURE_KAFKA)], check=True, capture_output=True, text=True,
                                timeout=600, env={**os.environ, **({LIBS_ENV_VAR: configured} if configured else {})})
    except subprocess.CalledProcessError as exc:
        raise RuntimeError(f"scripts/ensure-kafka failed (exit {exc.returncode}):\n{exc.stderr}") from exc
    libs = Path(result.stdout.strip().splitlines()[-1])
    if not any(libs.glob("kafka_2.13-*.jar")):
        raise RuntimeError(f"scripts/ensure-kafka left no kafka_2.13 jar in {libs}")
    return libs


def java_executable() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    return "java"


@dataclass(eq=False)
class KafkaNode:
    """One KRaft node (broker and controller) of an :class:`ApacheKafkaCluster`."""

    node_id: int
    directory: Path
    external_port: int
    advertised_port: int
    internal_port: int
    controller_port: int
    #: The ``PROXIED`` listener's port and the :class:`FaultProxy` clients are told to use instead.
    proxied_port: Optional[int] = None
    proxy: Optional[FaultProxy] = None
    process: Optional[subprocess.Popen] = None

    @property
    def log_path(self) -> Path:
        return self.directory / "server.log"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


@dataclass(eq=False)
class ApacheKafkaCluster:
    """``nodes`` Apache Kafka processes forming one KRaft cluster on loopback."""

    libs: Path
    directory: Path
    nodes: List[KafkaNode]
    security_protocol: str = "PLAINTEXT"
    certs: Optional[TestCerts] = None
    extra_config: Dict[str, str] = field(default_factory=dict)
    cluster_id: str = ""
    heap: str = "384m"

    # ------------------------------------------------------------------ handles

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{HOST}:{node.advertised_port}" for node in self.nodes)

    @property
    def proxies(self) -> List[FaultProxy]:
        """The :class:`FaultProxy` in front of each node's ``PROXIED`` listener, in node order."""
        if any(node.proxy is None for node in self.nodes):
            raise RuntimeError("this cluster has no PROXIED listener: start it with proxied=True")
        return [node.proxy for node in self.nodes]

    @property
    def proxied_bootstrap(self) -> str:
        """Bootstrap servers of the ``PROXIED`` listeners: a client using them only ever talks
        to the cluster through :attr:`proxies`."""
        return ",".join(proxy.address for proxy in self.proxies)

    @property
    def broker(self) -> KafkaTestBroker:
        """The handle tests use; its ``stop()`` stops the whole cluster."""
        if self._broker is None:
            self._broker = KafkaTestBroker(
                bootstrap=self.bootstrap, kind="apache-kafka",
                tls=self.security_protocol in ("SSL", "SASL_SSL"),
                cafile=self.certs.ca_file if self.certs else None,
                sasl=("SCRAM-SHA-512",) + ADMIN_USER if self.security_protocol == "SASL_SSL" else None,
                log_path=self.nodes[0].log_path)
            self._broker.cluster = self
            self._broker._cleanups.append(self.stop)
        return self._broker

    _broker: Optional[KafkaTestBroker] = field(default=None, repr=False)

    def node(self, node_id: int) -> KafkaNode:
        return next(n for n in self.nodes if n.node_id == node_id)

    # --------------------------------------------------------------- lifecycle

    def format(self, scram_users: Mapping[str, str]) -> None:
        """Write each node's config and format its log dir (all nodes at once)."""
        self.cluster_id = self.cluster_id or _random_cluster_id()
        (self.directory / "log4j2.yaml").write_text(_LOG4J2)
        formats = []
        for node in self.nodes:
            node.directory.mkdir(parents=True, exist_ok=True)
            (node.directory / "server.properties").write_text(self._properties(node))
            cmd = [java_executable(), "-Xmx128m", "-cp", f"{self.libs}/*", "kafka.tools.StorageTool", "format",
                   f"--cluster-id={self.cluster_id}", "-c", str(node.directory / "server.properties"), "--ignore-formatted"]
            for user, password in scram_users.items():
                cmd += ["--add-scram", f"SCRAM-SHA-512=[name={user},password={password}]"]
            formats.append((node, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                                   stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)))
        for node, process in formats:
            output, _ = process.communicate(timeout=120)
            if process.returncode != 0:
                raise RuntimeError(f"formatting Kafka node {node.node_id} failed:\n{output.decode(errors='replace')}")

    def start_node(self, node_id: int) -> None:
        """Start (or restart after :meth:`kill_node`/:meth:`stop_node`) one node's process."""
        node = self.node(node_id)
        if node.running:
            return
        cmd = [java_executable(), f"-Xmx{self.heap}", "-Xms64m", "-XX:+UseG1GC", "-Djava.awt.headless=true",
               f"-Dlog4j2.configurationFile={self.directory / 'log4j2.yaml'}",
               f"-Dkafka.logs.dir={node.directory}",
               "-cp", f"{self.libs}/*", "kafka.Kafka", str(node.directory / "server.properties")]
        with open(node.log_path, "ab") as log:
            log.write(("$ " + " ".join(cmd) + "\n").encode())
            log.flush()
            node.process = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                            preexec_fn=_die_with_parent, cwd=str(node.directory))
        _kill_at_exit(node.process)

    def kill_node(self, node_id: int) -> None:
        """SIGKILL one node: no controlled shutdown, its leaderships move after the session times out."""
        node = self.node(node_id)
        if node.process is not None and node.process.poll() is None:
            node.process.send_signal(signal.SIGKILL)
            node.process.wait(timeout=30)

    def stop_node(self, node_id: int, timeout: float = 60) -> None:
        """SIGTERM one node: a controlled shutdown that hands its leaderships over first."""
        node = self.node(node_id)
        if node.process is not None and node.process.poll() is None:
            node.process.terminate()
            try:
                node.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                node.process.kill()
                node.process.wait(timeout=30)

    def wait_ready(self, timeout: float = 90.0, nodes: Optional[Sequence[int]] = None) -> None:
        """Until every running node (or ``nodes``) answers metadata and the cluster has them all."""
        deadline = time.monotonic() + timeout
        wanted = list(nodes) if nodes is not None else [n.node_id for n in self.nodes if n.process is not None]
        for node_id in wanted:
            node = self.node(node_id)
            config = self.broker.client_config(bootstrap_servers=f"{HOST}:{node.advertised_port}")
            try:
                while True:
                    if not node.running:
                        raise RuntimeError(f"Kafka node {node_id} exited with status {node.process.returncode}")
                    if _listening(node.external_port):
                        break
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"Kafka node {node_id} did not listen on {node.external_port}")
                    time.sleep(0.1)
                run_sync(lambda: _probe_ready(config, max(1.0, deadline - time.monotonic())))
            except Exception as exc:
                raise RuntimeError(f"Apache Kafka node {node_id} not ready: {exc}\n"
                                   f"--- {node.log_path} (tail) ---\n{node.log_tail()}") from exc
        run_sync(lambda: _wait_brokers_registered(self.broker.client_config(), len(wanted),
                                                  max(1.0, deadline - time.monotonic())))

    def restart_node(self, node_id: int, *, kill: bool = False) -> None:
        """Stop (or kill) one node, start it again and wait until it serves."""
        (self.kill_node if kill else self.stop_node)(node_id)
        self.start_node(node_id)
        self.wait_ready(nodes=[node_id])

    def stop(self) -> None:
        """Stop every node (SIGTERM, then SIGKILL) and remove the data; idempotent."""
        for node in self.nodes:
            if node.process is not None and node.process.poll() is None:
                node.process.terminate()
        for node in self.nodes:
            if node.process is not None:
                try:
                    node.process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    node.process.kill()
                    node.process.wait(timeout=10)
        for node in self.nodes:
            if node.proxy is not None:
                node.proxy.close()
        if self._owns_directory:
            import shutil

            shutil.rmtree(self.directory, ignore_errors=True)

    _owns_directory: bool = field(default=False, repr=False)

    # ------------------------------------------------------------------ config

    def _properties(self, node: KafkaNode) -> str:
        count = len(self.nodes)
        replication = min(3, count)
        isr = 2 if count >= 3 else 1
        voters = ",".join(f"{n.node_id}@{HOST}:{n.controller_port}" for n in self.nodes)
        listeners = (f"EXTERNAL://{HOST}:{node.external_port},INTERNAL://{HOST}:{node.internal_port},"
                     f"CONTROLLER://{HOST}:{node.controller_port}")
        advertised = f"EXTERNAL://{HOST}:{node.advertised_port},INTERNAL://{HOST}:{node.internal_port}"
        protocols = f"EXTERNAL:{self.security_protocol},INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT"
        if node.proxy is not None:
            listeners += f",PROXIED://{HOST}:{node.proxied_port}"
            advertised += f",PROXIED://{HOST}:{node.proxy.port}"
            protocols += ",PROXIED:PLAINTEXT"
        props: Dict[str, str] = {
            "process.roles": "broker,controller",
            "node.id": str(node.node_id),
            "controller.quorum.voters": voters,
            "listeners": listeners,
            "advertised.listeners": advertised,
            "listener.security.protocol.map": protocols,
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "INTERNAL",
            "log.dirs": str(node.directory / "data"),
            "num.partitions": "1",
            "default.replication.factor": str(replication),
            "min.insync.replicas": str(isr),
            "offsets.topic.replication.factor": str(replication),
            "offsets.topic.num.partitions": "8",
            "transaction.state.log.replication.factor": str(replication),
            "transaction.state.log.min.isr": str(isr),
            "transaction.state.log.num.partitions": "8",
            "share.coordinator.state.topic.replication.factor": str(replication),
            "share.coordinator.state.topic.min.isr": str(isr),
            "group.initial.rebalance.delay.ms": "0",
            "log.segment.bytes": str(64 * 1024 * 1024),
            "num.network.threads": "2",
            "num.io.threads": "4",
            "num.recovery.threads.per.data.dir": "1",
        }
        if self.certs is not None:
            props.update({
                "ssl.keystore.type": "PEM",
                "ssl.keystore.certificate.chain": _pem_one_line(Path(self.certs.cert_file)),
                "ssl.keystore.key": _pem_one_line(Path(self.certs.key_file)),
                "ssl.truststore.type": "PEM",
                "ssl.truststore.certificates": _pem_one_line(Path(self.certs.ca_file)),
            })
        if self.security_protocol == "SASL_SSL":
            props.update({
                "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                "listener.name.external.scram-sha-512.sasl.jaas.config":
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;",
                "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                "super.users": f"User:ANONYMOUS;User:{ADMIN_USER[0]}",
                "allow.everyone.if.no.acl.found": "false",
            })
        props.update(self.extra_config)
        return "".join(f"{key}={value}\n" for key, value in props.items())


def start_apache_kafka(nodes: int = 1, *, directory: Optional[Union[str, Path]] = None,
                       certs: Optional[TestCerts] = None, scram_users: Optional[Mapping[str, str]] = None,
                       advertised_ports: Optional[Sequence[int]] = None,
                       external_ports: Optional[Sequence[int]] = None,
                       config: Optional[Mapping[str, str]] = None,
                       proxied: bool = False,
                       heap: str = "384m",
                       ready_timeout: float = 90.0) -> ApacheKafkaCluster:
    """Format and start ``nodes`` Apache Kafka nodes; return once all serve metadata.

    ``certs``: the EXTERNAL listener speaks TLS (``SSL``); with ``scram_users`` too it is
    ``SASL_SSL`` with those SCRAM-SHA-512 users (plus :data:`ADMIN_USER`) and ACLs enforced.
    ``external_ports``/``advertised_ports``: where EXTERNAL listens and what clients are told
    (a proxy's port); free ports by default. ``config`` overrides broker settings.
    ``proxied``: each node also gets a plaintext ``PROXIED`` listener behind a
    :class:`FaultProxy` (:attr:`ApacheKafkaCluster.proxies`, ``.proxied_bootstrap``);
    ``cluster.stop()`` closes the proxies. ``heap``: each node's JVM heap limit (``-Xmx``).
    Logs: ``<directory>/node-<id>/server.log``.
    """
    if scram_users is not None and certs is None:
        raise ValueError("a SASL_SSL listener needs certs")
    owns = directory is None
    root = Path(directory) if directory is not None else Path(tempfile.mkdtemp(prefix="streamkit-kafka-"))
    root.mkdir(parents=True, exist_ok=True)
    protocol = "SASL_SSL" if scram_users is not None else "SSL" if certs is not None else "PLAINTEXT"
    users = dict(scram_users or {})
    if protocol == "SASL_SSL":
        users.setdefault(*ADMIN_USER)
    libs = kafka_libs()
    last_error: Optional[BaseException] = None
    for attempt in range(3):  # free ports can be taken by someone else before the JVM binds them
        members = []
        for index in range(nodes):
            external = external_ports[index] if external_ports else free_port()
            proxied_port = free_port() if proxied else None
            members.append(KafkaNode(node_id=index + 1, directory=root / f"attempt-{attempt}" / f"node-{index + 1}",
                                     external_port=external,
                                     advertised_port=advertised_ports[index] if advertised_ports else external,
                                     internal_port=free_port(), controller_port=free_port(),
                                     proxied_port=proxied_port,
                                     proxy=FaultProxy((HOST, proxied_port)) if proxied_port else None))
        cluster = ApacheKafkaCluster(libs=libs, directory=root, nodes=members, security_protocol=protocol,
                                     certs=certs, extra_config=dict(config or {}), heap=heap)
        cluster._owns_directory = owns
        try:
            cluster.format(users)
            for member in members:
                cluster.start_node(member.node_id)
            cluster.wait_ready(timeout=ready_timeout)
            return cluster
        except Exception as exc:
            last_error = exc
            in_use = any("Address already in use" in m.log_tail(400) for m in members)
            cluster._owns_directory = False
            cluster.stop()
            if not in_use or external_ports:
                raise
    raise RuntimeError(f"Apache Kafka did not start after 3 attempts: {last_error}")


def _random_cluster_id() -> str:
    """A KRaft cluster id (base64 of a UUID). It may start with '-': passed as
    ``--cluster-id=ID`` so that kafka-storage never reads it as an option."""
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _pem_one_line(path: Path) -> str:
    """PEM text as a properties value: newlines escaped, as Kafka's PEM keystore reads it."""
    return path.read_text().strip().replace("\n", "\\n")


def _listening(port: int) -> bool:
    import socket

    try:
        socket.create_connection((HOST, port), timeout=0.5).close()
        return True
    except OSError:
        return False


async def _wait_brokers_registered(config: dict, count: int, timeout: float) -> None:
    """Until the cluster's metadata lists ``count`` brokers (a restarted node re-registers)."""
    import asyncio

    from aiokafka.admin import AIOKafkaAdminClient

    deadline = time.monotonic() + timeout
    seen = 0
    while time.monotonic() < deadline:
        admin = AIOKafkaAdminClient(request_timeout_ms=5000, **config)
        try:
            await asyncio.wait_for(admin.start(), 10)
            described = await asyncio.wait_for(admin.describe_cluster(), 10)
            seen = len(described.get("brokers", []))
            if seen >= count:
                return
        except Exception:
            pass
        finally:
            await admin.close()
        await asyncio.sleep(0.2)
    raise TimeoutError(f"the cluster lists {seen} of {count} brokers after {timeout:.0f}s")
