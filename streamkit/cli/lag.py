"""``streamkit lag GROUP``: a consumer group's lag judged over a sliding window of
samples, with Burrow's rules (see :mod:`streamkit.operations.lag`)."""
from __future__ import annotations

import json
import time
from typing import Dict, Iterator, Optional

import click

from ..operations.lag import GroupLag, LagStatus
from ..operations.lag_sampling import LagMonitor
from ..transport.base import Transport
from .common import broker_option, connected

EXIT_CODES: Dict[LagStatus, int] = {
    LagStatus.OK: 0, LagStatus.NOTFOUND: 1, LagStatus.WARN: 3, LagStatus.STOP: 4, LagStatus.STALL: 5,
    LagStatus.REWIND: 6,
}
"""The exit code for the group's (worst) status; 1 is also any error, 2 a usage error."""


@click.command()
@click.argument("group")
@click.option("--window", type=click.IntRange(min=1), default=10, show_default=True, metavar="N",
              help="Samples judged together (the sliding window).")
@click.option("--interval", type=click.FloatRange(min=0, min_open=True), default=5.0, show_default=True,
              metavar="SECONDS", help="Time between two samples.")
@click.option("--watch", is_flag=True,
              help="Keep sampling and print the sliding window's evaluation after every sample, until "
                   "interrupted (then exit with the last evaluation's code).")
@click.option("--json", "as_json", is_flag=True,
              help="Print each evaluation as one line of JSON shaped like Burrow's consumer status.")
@broker_option
@click.pass_context
def lag(ctx: click.Context, group: str, window: int, interval: float, watch: bool, as_json: bool,
        broker: Optional[str]) -> None:
    """Judge GROUP's consumer lag over N samples taken S seconds apart, Burrow-style.

    Each partition is OK, WARN (the offset moves but the lag keeps growing), STOP (the
    offset stands still with lag and the group has no live member), STALL (it stands
    still with lag while the group has members: stuck) or REWIND (it moved backwards).
    Prints a table per partition and the group's status, the worst of them.

    Exit codes: 0 OK, 3 WARN, 4 STOP, 5 STALL, 6 REWIND; 1 an error, or a group with
    no partition left to judge (NOTFOUND); 2 a usage error.
    """
    with connected(broker) as transport:
        _require_group(transport, group)
        monitor = LagMonitor(transport.admin, group, window=window)
        last: Optional[GroupLag] = None
        try:
            for count, evaluation in enumerate(_evaluations(monitor, interval), start=1):
                last = evaluation
                if watch:
                    _show(evaluation, interval, as_json, when=time.time())
                elif count == window:
                    _show(evaluation, interval, as_json)
                    break
        except KeyboardInterrupt:
            if not watch:
                raise
    ctx.exit(EXIT_CODES[last.status] if last is not None else 1)


def _require_group(transport: Transport, group: str) -> None:
    if not transport.admin.committed_offsets(group) and group not in transport.admin.list_groups():
        raise click.ClickException(f"unknown group '{group}' on {transport.url} (see `streamkit groups list`)")


def _evaluations(monitor: LagMonitor, interval: float) -> Iterator[GroupLag]:
    """Sample every ``interval`` seconds (start to start; at once when a sample ran late),
    yielding the window's evaluation after each."""
    due = time.monotonic()
    while True:
        wait = due - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        due = max(due + interval, time.monotonic())
        monitor.sample()
        yield monitor.evaluate()


def _show(evaluation: GroupLag, interval: float, as_json: bool, *, when: Optional[float] = None) -> None:
    if as_json:
        click.echo(json.dumps(evaluation.to_json()))
        return
    if when is not None:
        click.echo(time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when)))
    members = "unknown" if evaluation.live_members is None else str(evaluation.live_members)
    fill = "complete" if evaluation.complete else "incomplete"
    click.echo(f"group {evaluation.group}: {evaluation.status.name}  total lag {evaluation.total_lag}, "
               f"{len(evaluation.partitions)} partition(s), {members} live member(s), "
               f"window {evaluation.samples}/{evaluation.window} samples {interval:g} s apart ({fill})")
    header = ("TOPIC", "PARTITION", "STATUS", "OFFSET-START", "OFFSET-END", "LAG-START", "LAG-END")
    rows = [(p.topic, str(p.partition), p.status.name, str(p.start.committed), str(p.end.committed),
             str(p.start.lag), str(p.end.lag)) for p in evaluation.partitions]
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(header)]
    for row in [header, *rows]:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    if when is not None:
        click.echo("")
