"""Securing streamkit's HTTP servers (the worker's endpoints and ``registry serve``):
where they bind, TLS, and who may ask.

* **Bind**: ``:PORT`` (no host) binds 127.0.0.1; another interface must be named
  (``0.0.0.0:PORT`` for every interface).
* **TLS** from a PEM certificate/key pair; with a client CA file, clients must present
  a certificate it signed (mutual TLS, refused at the handshake otherwise).
* **Authentication** once users or tokens are configured: HTTP basic auth (a file of
  ``user:password`` or ``user:sha256:HEX`` lines) and/or bearer tokens (a file of
  ``TOKEN`` or ``sha256:HEX`` lines, plus tokens given directly, e.g. from an
  environment variable). A request without valid credentials gets 401 with
  ``WWW-Authenticate`` and no data; every path needs them, ``/health`` too unless
  ``open_health`` (for liveness probes that cannot send credentials).
* **Host check without authentication**: a server with no users nor tokens answers
  only requests whose ``Host`` is an IP address, ``localhost``, the bound host, this
  machine's name or an ``allowed_hosts`` entry, and 403 to others. A browser page on
  a hostile site that re-points its own DNS name at 127.0.0.1 (DNS rebinding) sends
  its own name as ``Host`` and is refused, while scrapers and ``curl`` by address or
  by this machine's name keep working without credentials. (Requiring authentication
  on every non-loopback bind instead would break unauthenticated Prometheus scrapes
  inside a private network; such binds get a WARNING instead.)
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import logging
import socket
import ssl
from dataclasses import dataclass
from typing import Any, Callable, Dict, FrozenSet, List, Optional, Tuple

__all__ = ["HttpSecurity", "Credentials", "parse_bind_address", "is_loopback", "security_middleware",
           "ErrorBody"]

log = logging.getLogger(__name__)

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "ip6-localhost"})
ErrorBody = Callable[[int, str], Any]
"""Builds a refusal's response from (HTTP status, message): each server keeps its own error shape."""


def parse_bind_address(address: str) -> Tuple[str, int]:
    """``HOST:PORT`` (port 0: any free port) as (host, port); ``:PORT`` or ``PORT``
    bind 127.0.0.1 (name ``0.0.0.0`` or ``::`` to listen on every interface);
    ``[::1]:PORT`` for IPv6 addresses."""
    host, sep, port = address.rpartition(":")
    if not sep and address.isdigit():
        host, port = "", address
    elif not sep or not port.isdigit():
        raise ValueError(f"HTTP address {address!r}: expected HOST:PORT (e.g. 127.0.0.1:8080, 0.0.0.0:8080 "
                         f"for every interface, port 0 for any free port)")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host or "127.0.0.1", int(port)


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the server reachable from this machine only."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _matches(secret: str, stored: str) -> bool:
    """``secret`` against a stored ``PLAIN`` or ``sha256:HEX`` value, in constant time."""
    if stored.startswith("sha256:"):
        return hmac.compare_digest(_sha256(secret), stored[len("sha256:"):].strip().lower())
    return hmac.compare_digest(secret.encode(), stored.encode())


def _lines(path: str, what: str) -> List[Tuple[int, str]]:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise ValueError(f"cannot read the {what} file {path}: {exc.strerror}") from None
    return [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1)
            if line.strip() and not line.lstrip().startswith("#")]


@dataclass(frozen=True)
class Credentials:
    """The users (name -> stored ``PLAIN`` or ``sha256:HEX`` password) and tokens (stored
    ``TOKEN`` or ``sha256:HEX``) a server accepts."""

    users: Dict[str, str]
    tokens: Tuple[str, ...]

    @property
    def required(self) -> bool:
        return bool(self.users or self.tokens)

    def check_basic(self, user: str, password: str) -> bool:
        stored = self.users.get(user)
        # compare even for an unknown user, so timing does not reveal which users exist
        return _matches(password, stored if stored is not None else "sha256:" + "0" * 64) and stored is not None

    def check_bearer(self, token: str) -> bool:
        return any([_matches(token, stored) for stored in self.tokens])

    def accepts(self, authorization: str) -> bool:
        """Whether an ``Authorization`` header value carries valid credentials."""
        scheme, _, value = authorization.strip().partition(" ")
        value = value.strip()
        if scheme.lower() == "basic" and self.users:
            try:
                user, sep, password = base64.b64decode(value, validate=True).decode("utf-8").partition(":")
            except (ValueError, UnicodeDecodeError):
                return False
            return bool(sep) and self.check_basic(user, password)
        if scheme.lower() == "bearer" and self.tokens:
            return bool(value) and self.check_bearer(value)
        return False

    def forwarding_header(self) -> Optional[str]:
        """An ``Authorization`` value this server can send to its peers (a plain token or
        plain-password user; None when every secret is stored hashed)."""
        token = next((t for t in self.tokens if not t.startswith("sha256:")), None)
        if token is not None:
            return f"Bearer {token}"
        for user, password in self.users.items():
            if not password.startswith("sha256:"):
                return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        return None


@dataclass(frozen=True)
class HttpSecurity:
    """How an HTTP server is secured (all off by default: plain HTTP, no authentication,
    the Host check of the module docstring).

    ``tls_cert``/``tls_key``: PEM certificate (chain) and private key: serve HTTPS.
    ``tls_client_ca``: PEM CA certificates; clients must present a certificate one of
    them signed (mutual TLS). ``users_file``: ``user:password`` / ``user:sha256:HEX``
    lines (basic auth). ``tokens_file``: ``TOKEN`` / ``sha256:HEX`` lines (bearer
    tokens); ``tokens``: more tokens given directly. ``open_health``: ``GET /health``
    answers without credentials. ``allowed_hosts``: more ``Host`` names accepted when
    no credentials are configured.
    """

    tls_cert: Optional[str] = None
    tls_key: Optional[str] = None
    tls_client_ca: Optional[str] = None
    users_file: Optional[str] = None
    tokens_file: Optional[str] = None
    tokens: Tuple[str, ...] = ()
    open_health: bool = False
    allowed_hosts: Tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("TLS needs both a certificate file and a key file (--...-tls-cert and --...-tls-key)")
        if self.tls_client_ca is not None and self.tls_cert is None:
            raise ValueError("a TLS client CA (mutual TLS) needs TLS: give a certificate and a key file too")

    def __repr__(self) -> str:  # never the tokens
        return (f"HttpSecurity(tls={self.tls_enabled}, mutual_tls={self.tls_client_ca is not None}, "
                f"users_file={self.users_file!r}, tokens_file={self.tokens_file!r}, tokens={len(self.tokens)}, "
                f"open_health={self.open_health}, allowed_hosts={self.allowed_hosts!r})")

    @property
    def tls_enabled(self) -> bool:
        return self.tls_cert is not None

    @property
    def scheme(self) -> str:
        return "https" if self.tls_enabled else "http"

    def credentials(self) -> Credentials:
        """Read the users and tokens files (ValueError naming the file and line if malformed)."""
        users: Dict[str, str] = {}
        if self.users_file is not None:
            for number, line in _lines(self.users_file, "users"):
                user, sep, password = line.partition(":")
                if not sep or not user or not password:
                    raise ValueError(f"{self.users_file} line {number}: expected user:password or "
                                     f"user:sha256:HEX")
                users[user] = password
            if not users:
                raise ValueError(f"the users file {self.users_file} names no user")
        tokens = list(t for t in self.tokens if t)
        if self.tokens_file is not None:
            tokens += [line for _, line in _lines(self.tokens_file, "tokens")]
            if not tokens:
                raise ValueError(f"the tokens file {self.tokens_file} holds no token")
        return Credentials(users, tuple(tokens))

    def server_ssl_context(self) -> Optional[ssl.SSLContext]:
        """The TLS context to serve with (None: plain HTTP). ValueError for unreadable files."""
        if self.tls_cert is None or self.tls_key is None:
            return None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(self.tls_cert, self.tls_key)
            if self.tls_client_ca is not None:
                context.load_verify_locations(cafile=self.tls_client_ca)
                context.verify_mode = ssl.CERT_REQUIRED
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"cannot load the TLS files ({self.tls_cert}, {self.tls_key}"
                             f"{', ' + self.tls_client_ca if self.tls_client_ca else ''}): {exc}") from None
        return context

    def client_ssl_context(self) -> Optional[ssl.SSLContext]:
        """For requests to peers serving with the same settings (workers forwarding
        queries): verifies them against the system's CAs (``$SSL_CERT_FILE`` replaces
        them) and the client CA file, and presents this server's certificate when
        mutual TLS is on."""
        if not self.tls_enabled:
            return None
        context = ssl.create_default_context()
        if self.tls_client_ca is not None and self.tls_cert is not None and self.tls_key is not None:
            context.load_verify_locations(cafile=self.tls_client_ca)
            context.load_cert_chain(self.tls_cert, self.tls_key)
        return context

    def describe(self, credentials: Credentials) -> str:
        """E.g. ``TLS, mutual TLS, basic auth, bearer tokens`` for the start-up log line."""
        parts = [p for p, on in (("TLS", self.tls_enabled), ("mutual TLS", self.tls_client_ca is not None),
                                 ("basic auth", bool(credentials.users)),
                                 ("bearer tokens", bool(credentials.tokens))) if on]
        if not credentials.required:
            parts.append("no authentication (Host header checked)")
        elif self.open_health:
            parts.append("/health open")
        return ", ".join(parts)


def _host_name(header: str) -> str:
    """The host part of a ``Host`` header (``[v6]:port``, ``name:port`` or ``name``), lower case."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    return header.rpartition(":")[0] if header.count(":") == 1 else header


def accepted_host_names(bound_host: str, allowed: Tuple[str, ...]) -> FrozenSet[str]:
    """The DNS names a server without authentication answers to (IP addresses always pass)."""
    names = set(LOOPBACK_NAMES) | {bound_host.lower()} | {h.lower() for h in allowed}
    if not is_loopback(bound_host):
        names |= {socket.gethostname().lower(), socket.getfqdn().lower()}
    return frozenset(names)


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


def security_middleware(security: HttpSecurity, credentials: Credentials, bound_host: str,
                        error_body: ErrorBody, realm: str) -> Any:
    """An aiohttp middleware enforcing ``credentials`` (401 + ``WWW-Authenticate`` without
    valid ones) or, when there are none, the Host check (403). Refusals carry only
    ``error_body``'s message (an aiohttp response), never data."""
    from aiohttp import web  # only servers need it: the CLI's option parsing stays light
    names = accepted_host_names(bound_host, security.allowed_hosts)
    challenges = ([f'Basic realm="{realm}", charset="UTF-8"'] if credentials.users else []) + \
                 ([f'Bearer realm="{realm}"'] if credentials.tokens else [])

    @web.middleware
    async def secure(request: Any, handler: Callable[[Any], Any]) -> Any:
        if credentials.required:
            if security.open_health and request.path == "/health" and request.method in ("GET", "HEAD"):
                return await handler(request)
            authorization = request.headers.get("Authorization")
            if authorization is None or not credentials.accepts(authorization):
                refusal = error_body(401, "Unauthorized: valid credentials are required" if authorization is None
                                     else "Unauthorized: invalid credentials")
                for challenge in challenges:
                    refusal.headers.add("WWW-Authenticate", challenge)
                return refusal
            return await handler(request)
        host = _host_name(request.headers.get("Host", ""))
        # no Host at all (HTTP/1.0) never comes from a browser, so it cannot be a rebinding
        if host and not (host in names or _is_ip(host)):
            return error_body(403, f"Forbidden: Host {host!r} is not a name of this server (configure "
                                   f"authentication, or allow the name)")
        return await handler(request)

    return secure


def log_binding(what: str, host: str, port: int, url: str, security: HttpSecurity, credentials: Credentials
                ) -> None:
    """Log where ``what`` listens and how it is secured; WARNING for a non-loopback bind
    without authentication."""
    log.info("%s bound to %s:%d (%s), reached at %s", what, host, port, security.describe(credentials), url)
    if not is_loopback(host) and not credentials.required:
        log.warning("%s listens on %s:%d, beyond this machine, without authentication: anyone who reaches "
                    "the port can use it (configure users or tokens, or bind 127.0.0.1)", what, host, port)
