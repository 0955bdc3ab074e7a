"""``streamkit mirror``: copy topics (and translate consumer groups) from one broker to another."""
from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from typing import Iterator, List, Optional, Sequence, Tuple

import click

from ..mirror.copier import Mirror, MirrorOptions, read_progress
from ..mirror.groups import GroupTranslation, GroupTranslator
from ..mirror.selection import TopicSelection, select_topics
from ..transport.base import Transport
from ..transport.factory import open_transport

log = logging.getLogger(__name__)


@contextlib.contextmanager
def _opened(url: str, config_file: Optional[str]) -> Iterator[Transport]:
    transport = open_transport(url, config_file=config_file)
    try:
        yield transport
    finally:
        transport.close()


@click.command()
@click.option("--from", "source_url", required=True, metavar="URL",
              help="The source broker: embedded:///path or kafka://host:port[,host:port].")
@click.option("--to", "target_url", required=True, metavar="URL", help="The target broker, as --from.")
@click.option("--from-config", "source_config", type=click.Path(exists=True, dir_okay=False), default=None,
              metavar="FILE", help="TOML client settings ([kafka] table: TLS, SASL, ...) for the source "
                                   "(default: the global --config / $STREAMKIT_CONFIG).")
@click.option("--to-config", "target_config", type=click.Path(exists=True, dir_okay=False), default=None,
              metavar="FILE", help="TOML client settings for the target, as --from-config.")
@click.option("--name", default="mirror", show_default=True,
              help="The mirror's name: its group, transactional id and offset-syncs topic on the target are "
                   "streamkit-mirror.NAME[.offset-syncs]. Run again with the same name to resume.")
@click.option("--include", multiple=True, metavar="REGEX",
              help="Mirror the topics whose whole name matches REGEX (repeatable; default: every topic).")
@click.option("--exclude", multiple=True, metavar="REGEX",
              help="Do not mirror the topics whose whole name matches REGEX (repeatable).")
@click.option("--include-internal", is_flag=True,
              help="Also mirror streamkit apps' changelog and repartition topics (skipped by default; "
                   "moving an app needs them).")
@click.option("--repartition", is_flag=True,
              help="Place each record by its key with Kafka's partitioner (murmur2) instead of keeping its "
                   "partition; the groups of such topics cannot be translated.")
@click.option("--until-caught-up", "mode", flag_value="once",
              help="Copy until every partition reached the end offset it had at the start, then exit 0.")
@click.option("--continuous", "mode", flag_value="continuous",
              help="Keep copying new records until interrupted (SIGINT/SIGTERM); new topics that match and "
                   "partitions added on the source are picked up every --rescan-interval.")
@click.option("--translate-groups", "groups", default="", metavar="GROUP[,GROUP...]",
              help="Translate these consumer groups' committed offsets onto the target (after the copy with "
                   "--until-caught-up; every --translate-interval with --continuous, following their commits). "
                   "Never past what was mirrored, never backwards, never for a group with live members on "
                   "the target.")
@click.option("--translate-interval", type=click.FloatRange(min=1), default=30.0, show_default=True,
              metavar="SECONDS", help="With --continuous: time between two translations of the groups.")
@click.option("--rescan-interval", type=click.FloatRange(min=1), default=30.0, show_default=True,
              metavar="SECONDS", help="With --continuous: time between two looks for new source topics and "
                                      "partitions (added on the target too, unless --repartition).")
@click.option("--metrics", "metrics_address", default=None, metavar="HOST:PORT",
              help="Serve the lag and progress per partition as Prometheus /metrics on HOST:PORT.")
@click.option("--status", is_flag=True,
              help="Print the mirror's committed position and lag per partition, copy nothing, and exit.")
@click.pass_context
def mirror(ctx: click.Context, source_url: str, target_url: str, source_config: Optional[str],
           target_config: Optional[str], name: str, include: Tuple[str, ...], exclude: Tuple[str, ...],
           include_internal: bool, repartition: bool, mode: Optional[str], groups: str,
           translate_interval: float, rescan_interval: float, metrics_address: Optional[str], status: bool) -> None:
    """Copy topics from the --from broker to the --to broker, exactly once.

    Records keep their key, value, timestamp, headers and partition; target topics are
    created with the source's partition count and configs. The source position is
    committed on the target in the transaction that writes the records, so a mirror
    stopped (or killed) anywhere resumes without loss or duplicate. Consumer groups'
    committed offsets are translated to the target's offsets with --translate-groups.
    Partitions added to a source topic are added to the target topic (not with
    --repartition: the target keeps its count) and copied from their start.
    """
    selection = TopicSelection(include, exclude, include_internal)
    group_list = [g.strip() for g in groups.split(",") if g.strip()]
    if not status and mode is None:
        raise click.UsageError("say how long to mirror: --until-caught-up or --continuous (or --status)")
    options = MirrorOptions(name=name, selection=selection, repartition=repartition,
                            rescan_interval=rescan_interval)
    with _opened(source_url, source_config) as source, _opened(target_url, target_config) as target:
        if status:
            _print_status(source, target, name, selection)
            return
        copier = Mirror(source, target, options)
        server = None
        if metrics_address:
            from ..mirror.metrics import serve_metrics

            server, bound = serve_metrics(name, copier.progress, metrics_address)
            log.info("mirror %s: /metrics on http://%s/metrics", name, bound)
        try:
            results = asyncio.run(_run(copier, source, target, mode == "once", group_list, translate_interval))
        finally:
            if server is not None:
                server.shutdown()
    refused = [r for r in results if r.refused]
    for result in refused:
        click.echo(f"Error: group '{result.group}' not translated: {result.refused}", err=True)
    ctx.exit(1 if refused else 0)


async def _run(copier: Mirror, source: Transport, target: Transport, once: bool, groups: Sequence[str],
               interval: float) -> List[GroupTranslation]:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    translator = GroupTranslator(source, target, copier.options.name, copier.progress)

    async def translate() -> List[GroupTranslation]:
        mirrored = {name: not copier.options.repartition for name in copier.topics}
        return await translator.translate(groups, mirrored)

    try:
        if once:
            await copier.run(until_caught_up=True, stop=stop)
            return await translate() if groups and not stop.is_set() else []
        copying = asyncio.ensure_future(copier.run(until_caught_up=False, stop=stop))
        while groups and not copying.done():
            done, _ = await asyncio.wait([copying], timeout=interval)
            if not done and copier.topics:
                try:
                    await translate()
                except Exception:  # a long-running mirror goes on copying; the next round retries
                    log.exception("translating groups %s failed; retried in %g s", ", ".join(groups), interval)
        await copying
        return []
    finally:
        await translator.aclose()


def _print_status(source: Transport, target: Transport, name: str, selection: TopicSelection) -> None:
    topics, _skipped = select_topics(source.admin, selection)
    progress = read_progress(source, target, name, [(t.name, t.partitions) for t in topics])
    lag = progress.lag()
    header = ("TOPIC", "PARTITION", "POSITION", "SOURCE-END", "LAG")
    rows = [(tp.topic, str(tp.partition), str(progress.positions[tp]), str(progress.ends[tp]), str(lag[tp]))
            for tp in sorted(progress.positions)]
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(header)]
    click.echo(f"mirror {name}: {source.url} -> {target.url}, total lag {sum(lag.values())}")
    for row in [header, *rows]:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
