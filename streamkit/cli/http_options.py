"""The ``--http-*`` security options shared by ``streamkit worker`` and ``streamkit registry serve``."""
from __future__ import annotations

import os
from typing import Any, Callable, Optional, Tuple

import click

from ..core.http_security import HttpSecurity

_FILE = click.Path(exists=True, dir_okay=False)


def http_security_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--http-tls-cert/-key/-client-ca``, ``--http-users``, ``--http-tokens``,
    ``--http-open-health`` and ``--http-allowed-host`` (read with :func:`http_security`)."""
    options = [
        click.option("--http-tls-cert", type=_FILE, default=None, metavar="FILE",
                     help="Serve HTTPS with this PEM certificate (chain); needs --http-tls-key."),
        click.option("--http-tls-key", type=_FILE, default=None, metavar="FILE",
                     help="The PEM private key of --http-tls-cert."),
        click.option("--http-tls-client-ca", type=_FILE, default=None, metavar="FILE",
                     help="Mutual TLS: clients must present a certificate signed by a CA in this PEM file."),
        click.option("--http-users", type=_FILE, default=None, metavar="FILE",
                     help="HTTP basic auth: 'user:password' or 'user:sha256:HEX' lines; every request "
                          "then needs credentials (401 without)."),
        click.option("--http-tokens", type=_FILE, default=None, metavar="FILE",
                     help="Bearer tokens: 'TOKEN' or 'sha256:HEX' lines (the token in $STREAMKIT_HTTP_TOKEN, "
                          "for registry serve $STREAMKIT_REGISTRY_TOKEN, is accepted too)."),
        click.option("--http-open-health", is_flag=True, default=False,
                     help="Answer GET /health without credentials (for liveness probes)."),
        click.option("--http-allowed-host", "http_allowed_hosts", multiple=True, metavar="NAME",
                     help="Without users or tokens, requests must name this server in Host: localhost, an IP "
                          "address, the bound host or this machine's name, else 403 (DNS-rebinding "
                          "defence); add more names (repeatable)."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def http_security(tls_cert: Optional[str], tls_key: Optional[str], tls_client_ca: Optional[str],
                  users: Optional[str], tokens: Optional[str], open_health: bool, allowed_hosts: Tuple[str, ...],
                  *, token_env: str = "STREAMKIT_HTTP_TOKEN") -> Optional[HttpSecurity]:
    """The options as an :class:`HttpSecurity` (None when none is given and ``$token_env``
    is unset: the app's own setting applies); usage errors for inconsistent ones."""
    env_token = os.environ.get(token_env, "").strip()
    given = (tls_cert, tls_key, tls_client_ca, users, tokens)
    if all(v is None for v in given) and not open_health and not allowed_hosts and not env_token:
        return None
    try:
        security = HttpSecurity(tls_cert=tls_cert, tls_key=tls_key, tls_client_ca=tls_client_ca,
                                users_file=users, tokens_file=tokens, tokens=(env_token,) if env_token else (),
                                open_health=open_health, allowed_hosts=tuple(allowed_hosts))
        security.credentials()
        security.server_ssl_context()
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    return security
