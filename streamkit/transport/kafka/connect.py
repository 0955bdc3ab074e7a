"""Starting aiokafka clients with a bounded retry while the brokers cannot be reached, and
telling apart what retrying cannot fix: refused credentials, security settings that do not
match the listener, refused authorization (see :func:`authorization_error`)."""
from __future__ import annotations

import asyncio
import logging
import ssl
import time
from typing import Any, Awaitable, Callable, Optional

from aiokafka.errors import (AuthenticationFailedError, AuthenticationMethodNotSupported,
                             ClusterAuthorizationFailedError, GroupAuthorizationFailedError,
                             IllegalSaslStateError, KafkaConnectionError,
                             KafkaError, SaslAuthenticationFailed, TopicAuthorizationFailedError,
                             TransactionalIdAuthorizationFailed, UnsupportedSaslMechanismError)

from ...errors import AuthenticationError, AuthorizationError, BrokerUnavailableError
from .config import KafkaClientConfig
from .config_settings import SASL_PROTOCOLS, TLS_PROTOCOLS

log = logging.getLogger(__name__)

_PROBE_TIMEOUT = 10.0  # s for each diagnostic connection
_AUTHORIZATION_ERRORS = {TopicAuthorizationFailedError: "topic", GroupAuthorizationFailedError: "group",
                         TransactionalIdAuthorizationFailed: "transactional id",
                         ClusterAuthorizationFailedError: "cluster"}


async def start_with_retry(start: Callable[[], Awaitable[Any]], servers: str, timeout_s: float,
                           what: str, config: Optional[KafkaClientConfig] = None) -> None:
    """Call ``start()`` until it connects, for at most ``timeout_s``; then a clear error.

    With ``config``, a failed connection is diagnosed first (aiokafka reports every failure
    as "Unable to bootstrap"): refused credentials or security settings that do not match
    the listener raise :class:`AuthenticationError` at once instead of retrying.
    """
    deadline = time.monotonic() + timeout_s
    delay = 0.2
    while True:
        try:
            await start()
            return
        except KafkaConnectionError as exc:
            if config is not None:
                budget = min(_PROBE_TIMEOUT, max(0.5, deadline - time.monotonic()))
                try:
                    refused = await asyncio.wait_for(diagnose_connection(config), budget)
                except asyncio.TimeoutError:
                    refused = None
                if refused is not None:
                    raise refused from None
            if time.monotonic() + delay > deadline:
                raise BrokerUnavailableError(
                    f"cannot reach Kafka at {servers} after {timeout_s:g} s ({what}: {exc}); check the "
                    "broker URL, that the brokers are up, and the security settings") from None
            log.info("Kafka at %s not reachable yet (%s: %s); retrying", servers, what, exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)


async def diagnose_connection(config: KafkaClientConfig) -> Optional[AuthenticationError]:
    """Why a bootstrap server refuses this client's connections, when that is something
    retrying cannot fix; None when none says so (they accept it, or cannot be reached yet)."""
    for server in config.bootstrap_servers:
        host, _, port = server.rpartition(":")
        host = host.strip("[]")
        try:
            refused = await _diagnose(config, server, host, int(port))
        except (OSError, asyncio.TimeoutError, KafkaError) as exc:
            log.debug("diagnosing the connection to %s: %s", server, exc)
            continue
        if refused is not None:
            return refused
    return None


async def _diagnose(config: KafkaClientConfig, server: str, host: str, port: int
                    ) -> Optional[AuthenticationError]:
    from aiokafka.conn import create_conn

    kwargs = config.common_kwargs()
    kwargs.pop("bootstrap_servers")
    protocol = config.security_protocol
    try:
        conn = await asyncio.wait_for(create_conn(host, port, **kwargs), _PROBE_TIMEOUT)
    except (SaslAuthenticationFailed, AuthenticationFailedError) as exc:
        return AuthenticationError(
            f"Kafka at {server} refused the SASL authentication of user '{config.sasl_username}' "
            f"({config.sasl_mechanism}): {exc}; check sasl_username and sasl_password "
            f"(STREAMKIT_KAFKA_SASL_PASSWORD)")
    except (UnsupportedSaslMechanismError, AuthenticationMethodNotSupported):
        enabled = await _sasl_mechanisms(host, port, kwargs["ssl_context"], protocol in TLS_PROTOCOLS)
        return AuthenticationError(
            f"Kafka at {server} does not accept SASL mechanism {config.sasl_mechanism} (sasl_mechanism)"
            + (f"; it accepts {', '.join(enabled)}" if enabled else ""))
    except IllegalSaslStateError:
        return AuthenticationError(f"Kafka at {server} does not use SASL but security_protocol is {protocol}: "
                                   f"use {'SSL' if protocol in TLS_PROTOCOLS else 'PLAINTEXT'}")
    except ssl.SSLCertVerificationError as exc:
        return AuthenticationError(
            f"the TLS certificate of Kafka at {server} is not trusted: {exc.verify_message}; set ssl_cafile "
            f"to the CA that signed it (ssl_check_hostname=false if it does not name this host)")
    except (OSError, KafkaConnectionError, asyncio.TimeoutError) as exc:
        return await _mismatched_listener(config, server, host, port, exc)
    try:
        if protocol not in SASL_PROTOCOLS:
            enabled = await _sasl_mechanisms_on(conn)
            if enabled is not None:
                mechanisms = ", ".join(enabled) or "mechanisms not listed"
                return AuthenticationError(
                    f"Kafka at {server} requires SASL authentication ({mechanisms}) but security_protocol is "
                    f"{protocol}: use "
                    f"{'SASL_SSL' if protocol in TLS_PROTOCOLS else 'SASL_PLAINTEXT or SASL_SSL'} with "
                    f"sasl_mechanism, sasl_username and sasl_password")
    finally:
        conn.close()
    return None


async def _mismatched_listener(config: KafkaClientConfig, server: str, host: str, port: int,
                               failure: BaseException) -> Optional[AuthenticationError]:
    """The connection failed at once: a listener that answers in TLS to a client that does not
    speak it, or in plain Kafka to one that does, is a setting to change. Anything without such
    positive evidence (a proxy that accepts and drops connections while its brokers are down)
    may pass: None."""
    protocol = config.security_protocol
    tls = await _speaks_tls(host, port)
    if tls and protocol not in TLS_PROTOCOLS:
        return AuthenticationError(
            f"Kafka at {server} speaks TLS but security_protocol is {protocol}: use "
            f"{'SASL_SSL' if protocol in SASL_PROTOCOLS else 'SSL (or SASL_SSL)'} and ssl_cafile")
    if tls is False and protocol in TLS_PROTOCOLS and await _sasl_mechanisms(host, port, None, False) is not None:
        return AuthenticationError(
            f"Kafka at {server} does not speak TLS but security_protocol is {protocol} "
            f"({type(failure).__name__}: {failure}): use "
            f"{'SASL_PLAINTEXT' if protocol in SASL_PROTOCOLS else 'PLAINTEXT'}, or the broker's TLS listener")
    return None


async def _speaks_tls(host: str, port: int) -> Optional[bool]:
    """Whether a TLS handshake with ``host:port`` succeeds (certificate not checked); None
    when nothing accepts a connection there."""
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), _PROBE_TIMEOUT)
        writer.close()
    except (OSError, asyncio.TimeoutError):
        return None
    try:
        _, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, ssl=_unverified_tls(), server_hostname=host), _PROBE_TIMEOUT)
    except (OSError, asyncio.TimeoutError):
        return False
    writer.close()
    return True


def _unverified_tls() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


async def _sasl_mechanisms(host: str, port: int, ssl_context: Optional[ssl.SSLContext], tls: bool
                           ) -> Optional[list]:
    """The SASL mechanisms the listener at ``host:port`` enables ([] if it uses no SASL;
    None if it cannot be asked)."""
    from aiokafka.conn import create_conn

    try:
        conn = await asyncio.wait_for(create_conn(host, port, ssl_context=ssl_context or _unverified_tls(),
                                                  security_protocol="SSL" if tls else "PLAINTEXT"),
                                      _PROBE_TIMEOUT)
    except (OSError, KafkaError, asyncio.TimeoutError):
        return None
    try:
        enabled = await _sasl_mechanisms_on(conn)
    finally:
        conn.close()
    return [] if enabled is None else enabled


async def _sasl_mechanisms_on(conn: Any) -> Optional[list]:
    """Ask an open connection's listener for its SASL mechanisms (a SaslHandshake, which a
    listener without SASL answers with ILLEGAL_SASL_STATE): the list, or None without SASL."""
    from aiokafka.protocol.admin import SaslHandShakeRequest

    try:
        response = await asyncio.wait_for(conn.send(SaslHandShakeRequest("PLAIN")), _PROBE_TIMEOUT)
    except (KafkaError, asyncio.TimeoutError):
        return None
    if response.error_code not in (0, UnsupportedSaslMechanismError.errno):
        return None
    return list(response.enabled_mechanisms)


def authorization_error(exc: BaseException, config: KafkaClientConfig, action: str) -> Optional[AuthorizationError]:
    """An :class:`AuthorizationError` for an authorizer's refusal ``exc`` while ``action``
    (e.g. "reading topic 'x'"), naming the principal; None for other errors."""
    kind = next((name for cls, name in _AUTHORIZATION_ERRORS.items() if isinstance(exc, cls)), None)
    if kind is None:
        return None
    return refused(config, kind, action, f"{type(exc).__name__}: {exc}")


def refused(config: KafkaClientConfig, kind: str, action: str, detail: str) -> AuthorizationError:
    """The error for Kafka's authorizer refusing ``action`` on a ``kind`` resource."""
    return AuthorizationError(
        f"Kafka at {','.join(config.bootstrap_servers)} refused {action}: {kind} authorization failed for "
        f"{principal(config)} ({detail}); grant it the ACLs a streamkit app needs (README: 'ACLs a "
        f"streamkit app needs')")


def principal(config: KafkaClientConfig) -> str:
    """Who the broker takes this client for, as far as the client can tell."""
    if config.security_protocol in SASL_PROTOCOLS:
        return f"User:{config.sasl_username}"
    if config.ssl_certfile:
        return "the principal of the client certificate (ssl_certfile)"
    return "User:ANONYMOUS"


async def quietly(awaitable: Awaitable[Any]) -> None:
    """Await a best-effort cleanup (closing a client), ignoring its failure."""
    try:
        await awaitable
    except Exception:  # noqa: BLE001 - cleanup must not hide the error being handled
        pass
