"""The ``streamkit`` command line."""
from __future__ import annotations

import logging
import os
import sys
from typing import Any, Optional

import click

from ..errors import StreamkitError
from .broker_admin import broker
from .consume import consume
from .demo import demo
from .groups import groups
from .lag import lag
from .mirror import mirror
from .produce import produce
from .registry import registry
from .replay import replay
from .topics import topics
from .worker import describe, worker

__all__ = ["main", "cli"]


class _Cli(click.Group):
    """Turns expected errors into one ``Error: ...`` line and exit code 1, never a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        from ..broker import EmbeddedBrokerError

        try:
            return super().invoke(ctx)
        except (StreamkitError, EmbeddedBrokerError, ValueError, OSError) as exc:
            if isinstance(exc, click.ClickException):
                raise
            raise click.ClickException(str(exc)) from None


@click.group(cls=_Cli, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
              help="The least severe log messages written to stderr.")
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False), default=None,
              metavar="FILE", help="TOML file with `broker = \"kafka://...\"` and a [kafka] table of client "
                                   "settings (TLS, SASL, ...); default $STREAMKIT_CONFIG.")
@click.version_option(package_name="streamkit")
def cli(log_level: str, config_file: Optional[str]) -> None:
    """streamkit: Kafka Streams-style stream processing for Python."""
    if config_file:
        os.environ["STREAMKIT_CONFIG"] = os.path.abspath(config_file)  # read by every broker connection
    logging.basicConfig(level=log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


for command in (worker, describe, topics, produce, consume, groups, lag, demo, replay, registry):
    cli.add_command(command)
cli.add_command(mirror)
cli.add_command(broker)


def main() -> None:
    cli(prog_name="streamkit")
