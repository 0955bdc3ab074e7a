"""``streamkit registry serve`` secured (issue 34) and frozen with ``/mode``, against
confluent-kafka's SchemaRegistryClient over ``https://`` (``ssl.ca.location``, basic
auth, bearer tokens), aiohttp and curl: 401 without valid credentials (no data), mutual
TLS refused without a client certificate, READONLY refusing writes with Confluent's 42205."""
from __future__ import annotations

import asyncio
import hashlib
import importlib
import json
import shutil
import ssl
import subprocess
import uuid
from pathlib import Path
from typing import Any, Dict, Iterator, Optional, Tuple

import aiohttp
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from tests.kafka.certs import TestCerts, generate_test_certs
from tests.operations.client_certs import generate_client_certs

from .registry_servers import RegistryProcess


def _transport_errors() -> Tuple[type, ...]:
    """The transport errors of the HTTP library confluent-kafka's registry client uses:
    httpx2 in recent releases, httpx before (the bench extras resolve an older one)."""
    errors = []
    for library in ("httpx2", "httpx"):
        try:
            errors.append(importlib.import_module(library).TransportError)
        except ImportError:
            pass
    return tuple(errors)


V1 = json.dumps({"type": "record", "name": "Order", "namespace": "shop", "fields": [{"name": "id", "type": "long"}]})
V2 = json.dumps({"type": "record", "name": "Order", "namespace": "shop",
                 "fields": [{"name": "id", "type": "long"}, {"name": "note", "type": "string", "default": ""}]})


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> TestCerts:
    return generate_test_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, certs: TestCerts) -> Iterator[RegistryProcess]:
    """A registry on HTTPS with two users (one with a sha256 password) and a token from the environment."""
    directory = tmp_path_factory.mktemp("registry")
    users = directory / "users"
    users.write_text(f"alice:wonderland\nbob:sha256:{hashlib.sha256(b'builder').hexdigest()}\n")
    process = RegistryProcess(
        f"embedded://{directory}/broker", directory / "registry.log",
        extra_args=("--http-tls-cert", certs.cert_file, "--http-tls-key", certs.key_file, "--http-users", str(users)),
        env={"STREAMKIT_REGISTRY_TOKEN": "registry-token"})
    yield process
    assert process.stop() == 0, process.log()


def client(server: RegistryProcess, certs: TestCerts, user_info: Optional[str] = "alice:wonderland",
           **extra: str) -> SchemaRegistryClient:
    config = {"url": server.url, "ssl.ca.location": certs.ca_file, **extra}
    if user_info is not None:
        config["basic.auth.user.info"] = user_info
    return SchemaRegistryClient(config)


@pytest.fixture
def subject() -> str:
    return f"orders-{uuid.uuid4().hex[:8]}-value"


def http(url: str, method: str = "GET", body: Optional[Any] = None, *, ssl_context: Any = True,
         auth: Optional[str] = None) -> Tuple[int, Any, Any]:
    """(status, JSON body, headers) of a request with a fresh aiohttp client."""
    headers: Dict[str, str] = {"Content-Type": "application/vnd.schemaregistry.v1+json"}
    if auth is not None:
        headers["Authorization"] = auth

    async def go() -> Tuple[int, Any, Any]:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as session:
            async with session.request(method, url, data=None if body is None else json.dumps(body),
                                       headers=headers, ssl=ssl_context) as answer:
                return answer.status, await answer.json(content_type=None), answer.headers
    return asyncio.run(go())


def test_confluent_client_over_https_with_basic_auth(server: RegistryProcess, certs: TestCerts,
                                                     subject: str) -> None:
    assert server.url.startswith("https://127.0.0.1:")
    log = server.log()
    assert "the schema registry bound to 127.0.0.1:" in log and "TLS, basic auth, bearer tokens" in log
    alice = client(server, certs)
    schema_id = alice.register_schema(subject, Schema(V1, "AVRO"))
    bob = client(server, certs, "bob:builder")
    assert bob.get_latest_version(subject).schema_id == schema_id
    assert bob.get_schema(schema_id).schema_str == alice.get_schema(schema_id).schema_str
    token = client(server, certs, None, **{"bearer.auth.credentials.source": "STATIC_TOKEN",
                                           "bearer.auth.token": "registry-token",
                                           "bearer.auth.logical.cluster": "lsrc-1",
                                           "bearer.auth.identity.pool.id": "pool-1"})
    assert subject in token.get_subjects()

    for user_info in (None, "alice:wrong", "mallory:wonderland",
                      f"bob:{hashlib.sha256(b'builder').hexdigest()}"):
        refused = client(server, certs, user_info)
        with pytest.raises(SchemaRegistryError) as error:
            refused.get_subjects()
        assert error.value.http_status_code == 401 and error.value.error_code == 40101, error.value
        assert subject not in str(error.value)
        with pytest.raises(SchemaRegistryError) as error:
            refused.register_schema(subject, Schema(V2, "AVRO"))
        assert error.value.http_status_code == 401
    assert alice.get_versions(subject) == [1]  # the refused registration changed nothing

    status, body, headers = http(server.url + f"/subjects/{subject}/versions/1",
                                 ssl_context=ssl.create_default_context(cafile=certs.ca_file))
    assert status == 401 and body["error_code"] == 40101 and "Order" not in json.dumps(body)
    assert headers.getall("WWW-Authenticate") == ['Basic realm="schema-registry", charset="UTF-8"',
                                                  'Bearer realm="schema-registry"']

    if shutil.which("curl") is None:
        print("curl is not installed: the curl checks are skipped")
        return
    base = ["curl", "-s", "--cacert", certs.ca_file, "-w", "\n%{http_code}",
            f"{server.url}/subjects/{subject}/versions/1"]
    out = subprocess.run(base, capture_output=True, text=True, timeout=30).stdout
    assert out.endswith("\n401") and "Order" not in out, out
    out = subprocess.run(base + ["-u", "bob:builder"], capture_output=True, text=True, timeout=30).stdout
    assert out.endswith("\n200") and json.loads(out.rpartition("\n")[0])["id"] == schema_id, out


def test_readonly_mode_freezes_registrations_and_deletes(server: RegistryProcess, certs: TestCerts,
                                                         subject: str) -> None:
    alice = client(server, certs)
    alice.register_schema(subject, Schema(V1, "AVRO"))
    other = f"{subject}-other"
    assert alice.get_global_mode() == "READWRITE"

    assert alice.update_mode(subject, "READONLY") == "READONLY"
    assert alice.get_mode(subject) == "READONLY"
    for attempt in (lambda: alice.register_schema(subject, Schema(V2, "AVRO")),
                    lambda: alice.delete_subject(subject),
                    lambda: alice.delete_version(subject, 1)):
        with pytest.raises(SchemaRegistryError) as error:
            attempt()
        assert (error.value.http_status_code, error.value.error_code) == (422, 42205), error.value
        assert error.value.error_message == f"Subject {subject} is in read-only mode"
    assert alice.get_versions(subject) == [1]
    alice.register_schema(other, Schema(V1, "AVRO"))  # other subjects follow the global mode

    # the global mode freezes every subject without its own mode
    assert alice.update_global_mode("READONLY") == "READONLY"
    try:
        with pytest.raises(SchemaRegistryError) as error:
            alice.register_schema(f"{subject}-new", Schema(V1, "AVRO"))
        assert error.value.error_code == 42205
        with pytest.raises(SchemaRegistryError) as error:
            alice.set_compatibility(other, "FULL")
        assert error.value.error_code == 42205
        # reads still work; IMPORT is refused with a clear message
        assert alice.get_latest_version(other).version == 1
        tls = ssl.create_default_context(cafile=certs.ca_file)
        status, body, _ = http(server.url + "/mode", "PUT", {"mode": "IMPORT"}, ssl_context=tls,
                               auth=aiohttp.encode_basic_auth("alice", "wonderland"))
        assert status == 422 and body["error_code"] == 42204 and "IMPORT" in body["message"], body
        status, body, _ = http(server.url + f"/mode/{subject}-new?defaultToGlobal=true", ssl_context=tls,
                               auth=aiohttp.encode_basic_auth("alice", "wonderland"))
        assert (status, body) == (200, {"mode": "READONLY"})
        # changing modes needs credentials like everything else
        status, body, _ = http(server.url + "/mode", "PUT", {"mode": "READWRITE"}, ssl_context=tls)
        assert status == 401
    finally:
        assert alice.update_global_mode("READWRITE") == "READWRITE"
    alice.register_schema(f"{subject}-new", Schema(V1, "AVRO"))
    with pytest.raises(SchemaRegistryError):
        alice.register_schema(subject, Schema(V2, "AVRO"))  # still READONLY on its own
    assert alice.delete_mode(subject) == "READONLY"
    with pytest.raises(SchemaRegistryError) as error:
        alice.get_mode(subject)
    assert error.value.error_code == 40409
    assert alice.register_schema(subject, Schema(V2, "AVRO")) > 0
    assert alice.get_versions(subject) == [1, 2]


def test_modes_survive_a_restart(tmp_path: Path, subject: str) -> None:
    broker = f"embedded://{tmp_path}/broker"
    first = RegistryProcess(broker, tmp_path / "first.log")
    try:
        status, body, _ = http(first.url + f"/mode/{subject}", "PUT", {"mode": "READONLY"})
        assert (status, body) == (200, {"mode": "READONLY"})
    finally:
        assert first.stop() == 0, first.log()
    second = RegistryProcess(broker, tmp_path / "second.log")
    try:
        registry = SchemaRegistryClient({"url": second.url})
        assert registry.get_mode(subject) == "READONLY"
        with pytest.raises(SchemaRegistryError) as error:
            registry.register_schema(subject, Schema(V1, "AVRO"))
        assert error.value.error_code == 42205
    finally:
        assert second.stop() == 0, second.log()


def test_mutual_tls_refuses_clients_without_a_certificate(tmp_path: Path, certs: TestCerts, subject: str) -> None:
    client_certs = generate_client_certs(tmp_path / "client")
    server = RegistryProcess(f"embedded://{tmp_path}/broker", tmp_path / "registry.log",
                             extra_args=("--http-tls-cert", certs.cert_file, "--http-tls-key", certs.key_file,
                                         "--http-tls-client-ca", client_certs.ca_file))
    try:
        with_cert = client(server, certs, None, **{"ssl.certificate.location": client_certs.cert_file,
                                                   "ssl.key.location": client_certs.key_file})
        schema_id = with_cert.register_schema(subject, Schema(V1, "AVRO"))
        assert with_cert.get_schema(schema_id).schema_str
        # the server ends the TLS session: no HTTP answer at all, a transport error of the client's HTTP library
        with pytest.raises(_transport_errors()):
            client(server, certs, None).get_subjects()
        with pytest.raises(aiohttp.ClientError):
            http(server.url + "/subjects", ssl_context=ssl.create_default_context(cafile=certs.ca_file))
    finally:
        assert server.stop() == 0, server.log()
