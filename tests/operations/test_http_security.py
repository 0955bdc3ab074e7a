"""The worker's HTTP endpoints secured (issue 34), through ``streamkit worker`` processes
and real clients (aiohttp, curl): TLS, basic auth and bearer tokens (401 without, no
data), mutual TLS refused without a client certificate, the loopback default bind, the
WARNING on a non-loopback bind without authentication, and the Host check (403)."""
from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import aiohttp
import pytest

from streamkit.core.http_security import parse_bind_address
from tests.cli_processes import REPO
from tests.kafka.certs import generate_test_certs

from .client_certs import generate_client_certs
from .test_http_endpoints import USERS, produce
from .workers_over_http import WorkerLog, wait_for

APP = "tests.operations.http_app"
STORE_PATH = "/stores/clicks-per-user/user-3"


class SecuredWorker(WorkerLog):
    """``streamkit worker APP --http ... ARGS`` on an embedded broker, stderr collected."""

    def __init__(self, broker: Path, state: Path, *args: str, env: Optional[Dict[str, str]] = None) -> None:
        full_env = {**os.environ, "STREAMKIT_BROKER": f"embedded://{broker}", "PYTHONPATH": str(REPO), **(env or {})}
        for name in ("STREAMKIT_HTTP", "STREAMKIT_HTTP_TOKEN"):
            if name not in (env or {}):
                full_env.pop(name, None)
        super().__init__(subprocess.Popen(
            [sys.executable, "-m", "streamkit", "worker", APP, "--state-dir", str(state), *args],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO, env=full_env))

    def https_url(self, timeout: float = 60.0) -> str:
        """The worker's address (``https://`` when it serves TLS), from its log line."""
        return self.url(timeout)

    def log(self) -> str:
        return "".join(self.lines)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture
def workers() -> Iterator[List[SecuredWorker]]:
    started: List[SecuredWorker] = []
    yield started
    for worker in started:
        worker.stop()


@pytest.fixture
def certs(tmp_path: Path):
    return generate_test_certs(tmp_path / "certs")


def write_users(path: Path) -> Path:
    path.write_text("# streamkit HTTP users\nalice:wonderland\n"
                    f"bob:sha256:{hashlib.sha256(b'builder').hexdigest()}\n")
    return path


def basic(user: str, password: str) -> str:
    """An ``Authorization`` header value for HTTP basic auth."""
    return aiohttp.encode_basic_auth(user, password)


def fetch(url: str, *, ssl_context: Any = None, auth: Optional[str] = None,
          headers: Optional[Dict[str, str]] = None) -> Tuple[int, bytes, Any]:
    """(status, body, headers) of a GET with a fresh aiohttp client (``auth``: an
    ``Authorization`` value)."""
    headers = {**(headers or {}), **({"Authorization": auth} if auth is not None else {})}

    async def go() -> Tuple[int, bytes, Any]:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as session:
            async with session.get(url, ssl=ssl_context if ssl_context is not None else True,
                                   headers=headers) as answer:
                return answer.status, await answer.read(), answer.headers
    return asyncio.run(go())


def trusting(ca_file: str, client: Any = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=ca_file)
    if client is not None:
        context.load_cert_chain(client.cert_file, client.key_file)
    return context


def wait_ready(url: str, **kwargs: Any) -> None:
    wait_for(lambda: fetch(url + "/ready", **kwargs)[0] == 200, 60, "readiness")
    wait_for(lambda: fetch(url + STORE_PATH, **kwargs)[0] == 200, 60, "user-3's count")


def assert_refused_without_data(status: int, body: bytes, expected: int) -> None:
    assert status == expected, body
    assert b"user-" not in body and b"value" not in body and b"clicks" not in body, body


def test_tls_with_basic_auth_and_bearer_tokens(tmp_path: Path, certs, workers) -> None:
    broker = tmp_path / "broker"
    produce(broker, 60)
    users = write_users(tmp_path / "users")
    tokens = tmp_path / "tokens"
    tokens.write_text(f"file-token-1\nsha256:{hashlib.sha256(b'hashed-token').hexdigest()}\n")
    worker = SecuredWorker(broker, tmp_path / "state", "--http", ":0", "--http-tls-cert", certs.cert_file,
                           "--http-tls-key", certs.key_file, "--http-users", str(users), "--http-tokens",
                           str(tokens), env={"STREAMKIT_HTTP_TOKEN": "env-token"})
    workers.append(worker)
    url = worker.https_url()
    assert url.startswith("https://127.0.0.1:"), url  # ":PORT" binds loopback, advertised as such
    tls = trusting(certs.ca_file)
    alice = basic("alice", "wonderland")
    wait_ready(url, ssl_context=tls, auth=alice)
    assert "bound to 127.0.0.1:" in worker.log() and "TLS, basic auth, bearer tokens" in worker.log()
    assert "WARNING" not in worker.log()

    # every path needs credentials, /health included (no --http-open-health)
    for path in (STORE_PATH, "/stores/clicks-per-user", "/metrics", "/status", "/health", "/", "/no-such-path"):
        status, body, headers = fetch(url + path, ssl_context=tls)
        assert_refused_without_data(status, body, 401)
        challenges = headers.getall("WWW-Authenticate")
        assert any(c.startswith("Basic realm=") for c in challenges) and any(
            c.startswith("Bearer realm=") for c in challenges), challenges
    for wrong in (basic("alice", "wrong"), basic("mallory", "wonderland"),
                  basic("bob", hashlib.sha256(b"builder").hexdigest())):
        assert_refused_without_data(*fetch(url + STORE_PATH, ssl_context=tls, auth=wrong)[:2], 401)
    assert_refused_without_data(*fetch(url + STORE_PATH, ssl_context=tls,
                                       headers={"Authorization": "Bearer not-a-token"})[:2], 401)

    answers = [fetch(url + STORE_PATH, ssl_context=tls, auth=auth)
               for auth in (alice, basic("bob", "builder"))]
    answers += [fetch(url + STORE_PATH, ssl_context=tls, headers={"Authorization": f"Bearer {token}"})
                for token in ("file-token-1", "hashed-token", "env-token")]
    for status, body, _ in answers:
        assert status == 200 and b'"key":"user-3"' in body, body
    assert len({body for _, body, _ in answers}) == 1

    # the certificate is checked by the client: an untrusting client fails the handshake
    with pytest.raises(aiohttp.ClientConnectorCertificateError):
        fetch(url + "/health", ssl_context=ssl.create_default_context(), auth=alice)
    # plain HTTP on the TLS port gets no answer
    with pytest.raises((aiohttp.ClientError, asyncio.TimeoutError)):
        fetch(url.replace("https://", "http://") + STORE_PATH, auth=alice)

    if shutil.which("curl") is None:
        print("curl is not installed: the curl checks are skipped")
        return
    curl = ["curl", "-s", "--cacert", certs.ca_file, "-w", "\n%{http_code}", url + STORE_PATH]
    refused = subprocess.run(curl, capture_output=True, text=True, timeout=30)
    body, _, code = refused.stdout.rpartition("\n")
    assert code == "401" and "user-3" not in body, refused.stdout
    allowed = subprocess.run(curl + ["-u", "bob:builder"], capture_output=True, text=True, timeout=30)
    body, _, code = allowed.stdout.rpartition("\n")
    assert code == "200" and '"key":"user-3"' in body, allowed.stdout


def test_mutual_tls_refuses_clients_without_a_certificate(tmp_path: Path, certs, workers) -> None:
    broker = tmp_path / "broker"
    produce(broker, 30)
    client = generate_client_certs(tmp_path / "client")
    users = write_users(tmp_path / "users")
    worker = SecuredWorker(broker, tmp_path / "state", "--http", "127.0.0.1:0", "--http-tls-cert", certs.cert_file,
                           "--http-tls-key", certs.key_file, "--http-tls-client-ca", client.ca_file,
                           "--http-users", str(users), "--http-open-health")
    workers.append(worker)
    url = worker.https_url()
    alice = basic("alice", "wonderland")
    with_cert = trusting(certs.ca_file, client)
    wait_ready(url, ssl_context=with_cert, auth=alice)
    assert "mutual TLS" in worker.log()

    # without a client certificate the handshake fails: no HTTP answer at all, credentials or not
    for auth in (None, alice):
        with pytest.raises(aiohttp.ClientError):
            fetch(url + STORE_PATH, ssl_context=trusting(certs.ca_file), auth=auth)
    # a certificate from another CA (the server's own, signed by its CA) is refused too
    other = generate_test_certs(tmp_path / "other")
    with pytest.raises(aiohttp.ClientError):
        fetch(url + STORE_PATH, ssl_context=trusting(certs.ca_file, other), auth=alice)

    # with the certificate: credentials are still needed, except on /health (opened)
    assert_refused_without_data(*fetch(url + STORE_PATH, ssl_context=with_cert)[:2], 401)
    assert_refused_without_data(*fetch(url + "/ready", ssl_context=with_cert)[:2], 401)
    assert fetch(url + "/health", ssl_context=with_cert)[0] == 200
    status, body, _ = fetch(url + STORE_PATH, ssl_context=with_cert, auth=alice)
    assert status == 200 and b'"key":"user-3"' in body

    if shutil.which("curl") is None:
        print("curl is not installed: the curl checks are skipped")
        return
    no_cert = subprocess.run(["curl", "-s", "--cacert", certs.ca_file, "-u", "alice:wonderland",
                              url + STORE_PATH], capture_output=True, text=True, timeout=30)
    assert no_cert.returncode != 0 and "user-3" not in no_cert.stdout, (no_cert.returncode, no_cert.stdout)
    cert = subprocess.run(["curl", "-s", "--cacert", certs.ca_file, "--cert", client.cert_file, "--key",
                           client.key_file, "-u", "alice:wonderland", url + STORE_PATH],
                          capture_output=True, text=True, timeout=30)
    assert cert.returncode == 0 and '"key":"user-3"' in cert.stdout, cert.stdout


def test_without_authentication_the_host_header_is_checked_and_open_binds_warn(tmp_path: Path, workers) -> None:
    broker = tmp_path / "broker"
    produce(broker, 30)
    worker = SecuredWorker(broker, tmp_path / "state", "--http", "0.0.0.0:0", "--http-allowed-host",
                           "streamkit.internal")
    workers.append(worker)
    url = worker.https_url()
    port = url.rsplit(":", 1)[1]
    local = f"http://127.0.0.1:{port}"
    wait_ready(local)
    log = worker.log()
    assert f"bound to 0.0.0.0:{port}" in log and "no authentication (Host header checked)" in log
    assert re.search(r"WARNING .*listens on 0\.0\.0\.0:\d+, beyond this machine, without authentication", log), log

    # a DNS name that is not this server's (a rebinding attack's own domain) is refused
    for host in ("attacker.example", f"attacker.example:{port}", "localhost.attacker.example"):
        status, body, _ = fetch(local + STORE_PATH, headers={"Host": host})
        assert_refused_without_data(status, body, 403)
    # addresses, localhost, this machine's name and allowed names are answered
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "streamkit.internal", url.split("//")[1]):
        status, body, _ = fetch(local + STORE_PATH, headers={"Host": host})
        assert status == 200 and b'"key":"user-3"' in body, (host, body)


@pytest.mark.parametrize("address, bound", [(":8080", ("127.0.0.1", 8080)), ("8080", ("127.0.0.1", 8080)),
                                            ("0.0.0.0:0", ("0.0.0.0", 0)), ("[::1]:9", ("::1", 9)),
                                            ("worker-0.svc:80", ("worker-0.svc", 80))])
def test_an_address_without_a_host_binds_loopback(address: str, bound: Tuple[str, int]) -> None:
    assert parse_bind_address(address) == bound


@pytest.mark.parametrize("args, message", [
    (("--http-tls-cert", "{cert}"), "needs both a certificate file and a key file"),
    (("--http-tls-cert", "{cert}", "--http-tls-key", "{cert}"), "cannot load the TLS files"),
    (("--http-users", "{bad_users}"), "line 2: expected user:password"),
])
def test_inconsistent_security_options_are_usage_errors(tmp_path: Path, certs, args: Tuple[str, ...],
                                                        message: str) -> None:
    bad_users = tmp_path / "users"
    bad_users.write_text("alice:wonderland\nno-password-here\n")
    values = {"cert": certs.cert_file, "bad_users": str(bad_users)}
    for command in (["worker", APP, "--http", ":0"], ["registry", "serve", "--http", ":0"]):
        done = subprocess.run([sys.executable, "-m", "streamkit", *command, *(a.format(**values) for a in args),
                               "--broker", f"embedded://{tmp_path}/broker"],
                              capture_output=True, text=True, cwd=REPO, timeout=60,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
        assert done.returncode == 2 and message in done.stderr, (command, done.returncode, done.stderr[-2000:])


def test_queries_are_forwarded_between_secured_workers(tmp_path: Path, certs, workers) -> None:
    """Two workers with TLS and basic auth: a key on the other worker is forwarded with
    the caller's credentials, over TLS verified against $SSL_CERT_FILE."""
    broker = tmp_path / "broker"
    clicks = 60
    produce(broker, clicks)
    expected = Counter(USERS[n % len(USERS)] for n in range(clicks))
    users = write_users(tmp_path / "users")
    args = ("--http", "127.0.0.1:0", "--http-tls-cert", certs.cert_file, "--http-tls-key", certs.key_file,
            "--http-users", str(users))
    env = {"SSL_CERT_FILE": certs.ca_file}
    tls = trusting(certs.ca_file)
    alice = basic("alice", "wonderland")

    def running(url: str) -> List[str]:
        status, body, _ = fetch(url + "/status", ssl_context=tls, auth=alice)
        return [t["task"] for t in json.loads(body)["tasks"] if t["state"] == "running"] if status == 200 else []

    a = SecuredWorker(broker, tmp_path / "a", *args, env=env)
    workers.append(a)
    url_a = a.https_url()
    wait_ready(url_a, ssl_context=tls, auth=alice)
    b = SecuredWorker(broker, tmp_path / "b", *args, env=env)
    workers.append(b)
    url_b = b.https_url()
    wait_for(lambda: len(running(url_a)) == 2 and len(running(url_b)) == 2, 60, "the workers to share the tasks")

    owners = set()
    for user in USERS:
        status, body, _ = wait_for(lambda: (lambda r: r[0] != 503 and r)(
            fetch(f"{url_a}/stores/clicks-per-user/{user}", ssl_context=tls, auth=alice)), 30, f"{user}'s answer")
        answer = json.loads(body)
        assert status == 200 and answer["value"] == expected[user], (user, body)
        owners.add(answer["owner"])
        refused = fetch(f"{url_a}/stores/clicks-per-user/{user}", ssl_context=tls)
        assert_refused_without_data(*refused[:2], 401)
    assert owners == {url_a, url_b}  # some answers came from B, through A
    status, body, _ = fetch(url_a + "/stores/clicks-per-user?limit=100", ssl_context=tls, auth=alice)
    assert status == 200 and len(json.loads(body)["entries"]) == len(USERS), body
