"""``streamkit worker`` and ``streamkit describe``."""
from __future__ import annotations

import logging
import sys
from typing import Optional, Tuple

import click

from ..errors import RecordError
from .common import broker_option
from .http_options import http_security, http_security_options
from .loading import load_app

log = logging.getLogger("streamkit.cli")


@click.command()
@click.argument("app_spec", metavar="APP")
@broker_option
@click.option("--until-idle", type=click.FloatRange(min=0), default=None, metavar="SECONDS",
              help="Commit and exit after no input arrived for this long.")
@click.option("--guarantee", type=click.Choice(["at_least_once", "exactly_once"]), default=None,
              help="Processing guarantee (default: the app's processing_guarantee).")
@click.option("--state-dir", type=click.Path(file_okay=False), default=None,
              help="Where the tasks' RocksDB stores live (default: the app's state_dir, else "
                   "<embedded dir>/state/<app-id>; on Kafka, a free worker-N slot under .streamkit/state/<app-id>).")
@click.option("--standby-replicas", type=click.IntRange(min=0), default=None,
              help="Kafka: warm standby copies of each task's stores on other workers "
                   "(default: the app's num_standby_replicas).")
@click.option("--http", "http", default=None, metavar="HOST:PORT",
              help="Serve metrics, health, interactive queries, lag and the live page here (no host or "
                   "127.0.0.1: this machine only; 0.0.0.0:PORT: every interface; port 0: any free port, "
                   "logged); default: the app's http setting, else $STREAMKIT_HTTP, else off.")
@click.option("--reseed-changelog", "reseed", multiple=True, metavar="STORE",
              help="Repair for a store whose changelog was deleted or truncated under it (the worker "
                   "refuses to start its tasks otherwise): write the intact local store back into the "
                   "changelog and continue from it. Repeatable; acts only where the store's checkpoint "
                   "is past its changelog's end.")
@click.option("--reset-store", "reset", multiple=True, metavar="STORE",
              help="The other way out for such a store: discard its local state and rebuild it from "
                   "the changelog as it is, losing what the changelog lost (logged). Repeatable.")
@http_security_options
def worker(app_spec: str, broker: Optional[str], until_idle: Optional[float], guarantee: Optional[str],
           state_dir: Optional[str], standby_replicas: Optional[int], http: Optional[str],
           http_tls_cert: Optional[str], http_tls_key: Optional[str], http_tls_client_ca: Optional[str],
           http_users: Optional[str], http_tokens: Optional[str], http_open_health: bool,
           http_allowed_hosts: Tuple[str, ...], reseed: Tuple[str, ...], reset: Tuple[str, ...]) -> None:
    """Run APP (module or module:attribute) until stopped (Ctrl-C / SIGTERM commit first)."""
    security = http_security(http_tls_cert, http_tls_key, http_tls_client_ca, http_users, http_tokens,
                             http_open_health, http_allowed_hosts)
    from ..state.restore import StateRepairs

    repairs = StateRepairs(reseed=frozenset(reseed), reset=frozenset(reset))
    app = load_app(app_spec)
    url = app.resolve_broker(broker)
    try:
        totals = app.run(broker=url, until_idle=until_idle, guarantee=guarantee, state_dir=state_dir,
                         standby_replicas=standby_replicas, http=http, http_security=security,
                         state_repairs=repairs)
    except RecordError as exc:
        log.error("worker stopped: %s", exc)
        raise click.ClickException(f"{exc} (offsets are committed only up to before this record)") from None
    click.echo(f"processed {totals.records_processed} record(s)", err=True)


@click.command()
@click.argument("app_spec", metavar="APP")
@click.option("--format", "fmt", type=click.Choice(["text", "mermaid"]), default="text", show_default=True,
              help="text: an indented listing; mermaid: a flowchart for Markdown (GitHub, mermaid.live).")
def describe(app_spec: str, fmt: str) -> None:
    """Print APP's topology: sub-topologies, sources, processors, stores, sinks."""
    sys.stdout.write(load_app(app_spec).describe(fmt))
