"""streamkit on a secured Apache Kafka: a SASL_SSL listener (SCRAM-SHA-512), Kafka's own
StandardAuthorizer, nothing allowed without an ACL (``kafka_sasl``).

The ACLs are created with a third-party admin client (confluent-kafka's ``AdminClient``,
as the cluster's super user), exactly the list README.md gives under "ACLs a streamkit app
needs"; the app's user then runs a real worker under exactly_once and the CLI. A user
without those ACLs, a wrong password and a client that speaks no SASL (or no TLS) are
refused with an error that says so, promptly, instead of a hang or endless retries.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka", reason="confluent-kafka (the 'librdkafka' extra) is the "
                                      "third-party admin client that creates the ACLs: pip install -e "
                                      "'.[librdkafka]'")

from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,  # noqa: E402
                                   ResourcePatternType, ResourceType)

from .broker import KafkaTestBroker  # noqa: E402
from .fixtures import SASL_USERS  # noqa: E402
from .topics import create_test_topic, kafka_transport  # noqa: E402
from .workers import COUNTING_APP, KafkaApp  # noqa: E402

EOS = ("--guarantee", "exactly_once")
#: How long a refused worker may take to give up: its clients' first answers, not a retry loop.
REFUSAL_TIMEOUT = 120


def _admin_client(broker: KafkaTestBroker) -> AdminClient:
    """confluent-kafka's AdminClient as the broker's super user (``admin``), over SASL_SSL."""
    mechanism, username, password = broker.sasl
    return AdminClient({"bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_SSL",
                        "ssl.ca.location": broker.cafile, "sasl.mechanism": mechanism,
                        "sasl.username": username, "sasl.password": password})


def app_acls(user: str, app_id: str, sources: List[str], sinks: List[str]) -> List[AclBinding]:
    """The ACLs README.md lists for a streamkit app ``app_id`` run as ``user`` (Kafka's READ,
    WRITE and DELETE imply DESCRIBE)."""
    principal = f"User:{user}"
    read, write, create, delete = AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DELETE

    def allow(resource: ResourceType, name: str, operation: AclOperation, *,
              prefixed: bool = False) -> AclBinding:
        pattern = ResourcePatternType.PREFIXED if prefixed else ResourcePatternType.LITERAL
        return AclBinding(resource, name, pattern, principal, "*", operation, AclPermissionType.ALLOW)

    return ([allow(ResourceType.TOPIC, topic, read) for topic in sources]
            + [allow(ResourceType.TOPIC, topic, write) for topic in sinks]
            # internal topics <app-id>-...: created by the worker; DELETE purges repartition topics
            + [allow(ResourceType.TOPIC, f"{app_id}-", op, prefixed=True) for op in (create, read, write, delete)]
            + [allow(ResourceType.GROUP, app_id, read)]
            # exactly_once: a transactional producer per task, transactional.id <app-id>-<sub>-<partition>
            + [allow(ResourceType.TRANSACTIONAL_ID, f"{app_id}-", write, prefixed=True)])


def librdkafka_acls(user: str, app_id: str) -> List[AclBinding]:
    """What ``kafka_client = "librdkafka"`` needs besides :func:`app_acls`: DESCRIBE on the
    group id of its fetcher (``<app-id>-librdkafka-fetcher``), whose coordinator librdkafka
    looks up although the fetcher never joins or commits."""
    return [AclBinding(ResourceType.GROUP, f"{app_id}-", ResourcePatternType.PREFIXED, f"User:{user}", "*",
                       AclOperation.DESCRIBE, AclPermissionType.ALLOW)]


def create_acls(broker: KafkaTestBroker, acls: List[AclBinding]) -> None:
    """Create ``acls`` with confluent-kafka's AdminClient; fail the test if any is refused."""
    admin = _admin_client(broker)  # referenced until the results are in: destroying it fails them
    futures = admin.create_acls(acls, request_timeout=30)
    for future in futures.values():
        future.result(timeout=60)  # raises KafkaException naming the refused binding


class SecuredApp(KafkaApp):
    """The counting app with topics outside its app id's prefix, as on a shared cluster:
    source ``pv-<id>-in``, sinks ``pv-<id>-ids`` / ``pv-<id>-counts``; app id ``<id>``."""

    def __init__(self, broker: KafkaTestBroker, directory: Path, name: str, user: Tuple[str, str]) -> None:
        super().__init__(broker, directory, name, extra_env={"STREAMKIT_KAFKA_SASL_USERNAME": user[0],
                                                             "STREAMKIT_KAFKA_SASL_PASSWORD": user[1]})
        self.source, self.ids, self.counts = f"pv-{name}-in", f"pv-{name}-ids", f"pv-{name}-counts"
        (directory / f"{self.module}.py").write_text(COUNTING_APP.format(
            app_id=name, standbys=0, handler="fail", source=self.source, ids=self.ids, counts=self.counts,
            delay=0.0))

    def admin_env(self) -> Dict[str, str]:
        """The CLI's environment as the broker's super user (for setting up the test)."""
        return self.env(STREAMKIT_KAFKA_SASL_USERNAME=self.broker.sasl[1],
                        STREAMKIT_KAFKA_SASL_PASSWORD=self.broker.sasl[2])

    def create_source_and_sinks(self) -> None:
        """The topics another team owns on a shared cluster, created by the super user."""
        with kafka_transport(self.broker) as transport:
            create_test_topic(transport.admin, self.source, 3)
            create_test_topic(transport.admin, self.ids, 3)
            create_test_topic(transport.admin, self.counts, 3)

    def produce_as_admin(self, count: int, pages: int = 20) -> Dict[str, int]:
        lines, expected = [], {}
        for n in range(count):
            page = f"p{n % pages}"
            lines.append(json.dumps({"user": f"u{n % 37}", "page": page, "n": n}))
            expected[page] = expected.get(page, 0) + 1
        done = self.cli("produce", self.source, "--key-field", "user", stdin="\n".join(lines) + "\n",
                        env=self.admin_env())
        assert done.returncode == 0, done.stderr
        return expected

    def read(self, topic: str, env: Optional[Dict[str, str]] = None) -> Dict[str, List]:
        """Every value of ``topic`` per key (read_committed), read with ``env`` (default: as the
        app's user)."""
        out = self.cli("consume", topic, "--from-beginning", "--timeout", "2", env=env)
        assert out.returncode == 0, out.stderr
        per_key: Dict[str, List] = {}
        for line in out.stdout.splitlines():
            record = json.loads(line)
            per_key.setdefault(record["key"], []).append(record["value"])
        return per_key


@pytest.fixture
def pageviews_app(kafka_sasl, tmp_path, unique_name) -> SecuredApp:
    app = SecuredApp(kafka_sasl, tmp_path, unique_name("pv-app"), ("pageviews", SASL_USERS["pageviews"]))
    app.create_source_and_sinks()
    return app


def _denials(broker: KafkaTestBroker, user: str, since: int) -> List[str]:
    """What Kafka's authorizer refused ``user`` after byte ``since`` of its log (the log lines),
    DESCRIBE_CONFIGS aside (optional: the worker reads topic configs only to report them)."""
    with open(broker.log_path, "rb") as log:
        log.seek(since)
        text = log.read().decode(errors="replace")
    return [line for line in text.splitlines()
            if f"Principal = User:{user} is Denied" in line and "operation = DESCRIBE_CONFIGS" not in line]


def _log_size(broker: KafkaTestBroker) -> int:
    return Path(broker.log_path).stat().st_size


def _run_worker(app: SecuredApp, *args: str, env: Dict[str, str],
                timeout: float = 180) -> subprocess.CompletedProcess:
    """``streamkit worker`` of ``app`` until its input is drained, with ``env``."""
    return subprocess.run([sys.executable, "-m", "streamkit", "worker", app.module, *args, "--until-idle", "3",
                           "--state-dir", str(app.directory / "state")],
                          capture_output=True, text=True, cwd=app.directory, env=env, timeout=timeout)


def _check_outputs(app: SecuredApp, expected: Dict[str, int], produced: int, *, exactly_once: bool) -> None:
    """The app's outputs (read as the super user: the app's user may only write them)."""
    admin = app.admin_env()
    ids = sorted(n for values in app.read(app.ids, env=admin).values() for n in values)
    counts = app.read(app.counts, env=admin)
    if exactly_once:
        assert ids == list(range(produced)), "ids duplicated or missing under exactly_once"
        for page, total in expected.items():
            assert counts[page] == list(range(1, total + 1)), f"page {page}: counts not exactly 1..{total}"
    else:
        assert set(ids) == set(range(produced)), "ids missing under at_least_once"
        for page, total in expected.items():
            assert set(range(1, total + 1)) <= set(counts[page]), f"page {page}: a count 1..{total} is missing"


def test_an_app_with_the_documented_acls_counts_exactly_once_and_the_cli_works(pageviews_app) -> None:
    """The README's ACL list is enough for an exactly_once worker over SASL_SSL: it counts
    exactly, and Kafka's authorizer refused it nothing but DESCRIBE_CONFIGS (optional: topic
    configs are only shown). The CLI works with the same settings."""
    app = pageviews_app
    create_acls(app.broker, app_acls("pageviews", app.app_id, [app.source], [app.ids, app.counts]))
    expected = app.produce_as_admin(2000)
    since = _log_size(app.broker)
    done = _run_worker(app, *EOS, env=app.env())
    assert done.returncode == 0, done.stderr[-4000:]
    refused = _denials(app.broker, "pageviews", since)
    assert not refused, "the documented ACLs lack:\n" + "\n".join(refused)
    _check_outputs(app, expected, 2000, exactly_once=True)

    # The CLI as the app's user: its group's lag, its source's offsets and records.
    group = app.cli("groups", "describe", app.app_id)
    assert group.returncode == 0, group.stderr[-3000:]
    rows = [line.split() for line in group.stdout.splitlines()[1:] if line.startswith(app.source)]
    assert len(rows) == 3 and sum(int(row[2]) for row in rows) == 2000 and all(row[4] == "0" for row in rows), \
        group.stdout
    create_acls(app.broker, [AclBinding(ResourceType.TOPIC, app.source, ResourcePatternType.LITERAL,
                                        "User:pageviews", "*", AclOperation.WRITE, AclPermissionType.ALLOW)])
    more = [json.dumps({"user": "u1", "page": "p-new", "n": 2000 + n}) for n in range(10)]
    produced = app.cli("produce", app.source, "--key-field", "user", stdin="\n".join(more) + "\n")
    assert produced.returncode == 0, produced.stderr[-3000:]
    described = app.cli("topics", "describe", app.source)
    assert described.returncode == 0, described.stderr[-3000:]
    rows = [line.split() for line in described.stdout.splitlines()[2:]]
    assert sum(int(row[3]) for row in rows) == 2010, described.stdout
    lag = app.cli("groups", "describe", app.app_id)
    assert lag.returncode == 0, lag.stderr[-3000:]
    assert sum(int(line.split()[4]) for line in lag.stdout.splitlines()[1:] if line.startswith(app.source)) == 10
    consumed = app.read(app.source)
    assert sorted(v["n"] for values in consumed.values() for v in values) == list(range(2010))


# The group's refusal comes out of the group member (membership.py), whose error names the
# group and Kafka's error but not the principal.
@pytest.mark.parametrize("granted, says, names_principal", [
    ((), "refused to describe topic '{source}' (DESCRIBE): topic authorization failed", True),
    ((ResourceType.TOPIC,), "group {app_id}: fetching no partitions failed: GroupAuthorizationFailedError",
     False),
    ((ResourceType.TOPIC, ResourceType.GROUP),
     "refused to start a producer with transactional id '{app_id}-0-0' (WRITE): transactional id authorization "
     "failed", True),
], ids=["no-acls", "no-group-acl", "no-transactional-id-acl"])
def test_a_user_without_an_acl_is_refused_at_once_naming_what(kafka_sasl, tmp_path, unique_name, granted, says,
                                                             names_principal) -> None:
    """``stranger`` runs the same exactly_once worker with only some of the ACLs: it stops at
    once (exit 1, no retries) with an error naming the resource the authorizer refused."""
    app = SecuredApp(kafka_sasl, tmp_path, unique_name("pv-app"), ("stranger", SASL_USERS["stranger"]))
    app.create_source_and_sinks()
    app.produce_as_admin(50)
    acls = app_acls("stranger", app.app_id, [app.source], [app.ids, app.counts])
    if granted:
        create_acls(kafka_sasl, [acl for acl in acls if acl.restype in granted])
    done = _run_worker(app, *EOS, env=app.env(), timeout=REFUSAL_TIMEOUT)
    assert done.returncode == 1, done.stderr[-3000:]
    error = done.stderr.strip().splitlines()[-1]
    assert error.startswith("Error: ") and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert says.format(source=app.source, app_id=app.app_id) in error, error
    if names_principal:
        assert "for User:stranger" in error, error


def _security_env(app: SecuredApp, protocol: str, *, sasl: bool, tls: bool) -> Dict[str, str]:
    """The app user's environment with ``security_protocol`` and only the SASL / TLS settings
    asked for."""
    dropped = (() if sasl else ("STREAMKIT_KAFKA_SASL_",)) + (() if tls else ("STREAMKIT_KAFKA_SSL_",))
    env = {key: value for key, value in app.env().items() if not dropped or not key.startswith(dropped)}
    env["STREAMKIT_KAFKA_SECURITY_PROTOCOL"] = protocol
    return env


@pytest.mark.parametrize("protocol, sasl, tls, override, says", [
    ("SASL_SSL", True, True, {"STREAMKIT_KAFKA_SASL_PASSWORD": "wrong"},
     "refused the SASL authentication of user 'pageviews' (SCRAM-SHA-512)"),
    ("SASL_SSL", True, True, {"STREAMKIT_KAFKA_SASL_MECHANISM": "SCRAM-SHA-256"},
     "does not accept SASL mechanism SCRAM-SHA-256 (sasl_mechanism); it accepts SCRAM-SHA-512"),
    ("SSL", False, True, {},
     "requires SASL authentication (SCRAM-SHA-512) but security_protocol is SSL: use SASL_SSL"),
    ("PLAINTEXT", False, False, {}, "speaks TLS but security_protocol is PLAINTEXT"),
    ("SASL_PLAINTEXT", True, False, {}, "speaks TLS but security_protocol is SASL_PLAINTEXT: use SASL_SSL"),
], ids=["wrong-password", "wrong-mechanism", "ssl-without-sasl", "plaintext", "sasl-without-tls"])
def test_a_client_the_listener_does_not_accept_is_told_why_at_once(pageviews_app, protocol, sasl, tls, override,
                                                                  says) -> None:
    """Refused credentials and security settings that do not match the listener stop the
    worker and the CLI at once (not after connect_timeout_s of retries) saying what to fix."""
    app = pageviews_app
    env = dict(_security_env(app, protocol, sasl=sasl, tls=tls), **override)
    for what, run in (("worker", lambda: _run_worker(app, env=env, timeout=REFUSAL_TIMEOUT)),
                      ("topics describe", lambda: app.cli("topics", "describe", app.source, env=env,
                                                          timeout=REFUSAL_TIMEOUT))):
        done = run()
        assert done.returncode == 1, f"{what}: {done.stderr[-3000:]}"
        error = done.stderr.strip().splitlines()[-1]
        assert error.startswith("Error: ") and says in error, f"{what}: {done.stderr[-3000:]}"
        assert "not reachable yet" not in done.stderr, f"{what} retried: {done.stderr[-3000:]}"


def test_the_librdkafka_client_with_the_documented_acls(pageviews_app) -> None:
    """kafka_client=librdkafka passes the SASL_SSL settings to librdkafka: an at_least_once
    worker (librdkafka has no exactly_once here) counts every record as the app's user."""
    app = pageviews_app
    create_acls(app.broker, app_acls("pageviews", app.app_id, [app.source], [app.ids, app.counts])
                + librdkafka_acls("pageviews", app.app_id))
    expected = app.produce_as_admin(1000)
    since = _log_size(app.broker)
    done = _run_worker(app, env=app.env(STREAMKIT_KAFKA_CLIENT="librdkafka"))
    assert done.returncode == 0, done.stderr[-4000:]
    assert "Kafka client: librdkafka" in done.stderr
    refused = _denials(app.broker, "pageviews", since)
    assert not refused, "the documented ACLs lack:\n" + "\n".join(refused)
    _check_outputs(app, expected, 1000, exactly_once=False)
