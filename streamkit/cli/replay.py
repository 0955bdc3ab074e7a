"""``streamkit replay``: rerun an app's topology over historical data on Spark."""
from __future__ import annotations

import logging
import re
from typing import Optional, Tuple

import click

from ..errors import ConfigError
from .common import broker_option
from .loading import load_app

log = logging.getLogger("streamkit.cli")

_PYTHON_ERROR = re.compile(r"^(?:[\w.]+\.)?(\w+(?:Error|Exception)): (.*)$")


@click.command()
@click.argument("app_spec", metavar="APP")
@click.option("--backend", type=click.Choice(["spark"]), default="spark", show_default=True,
              help="The batch engine that replays the app (Spark, the only one so far).")
@click.option("--input", "inputs", multiple=True, metavar="TOPIC=SOURCE",
              help="Where to read TOPIC: an embedded broker DIR, archive:DIR (sk.sinks.ParquetArchive), "
                   "files:GLOB, parquet-files:GLOB or kafka:HOST:PORT. Topics without one are read from "
                   "the app's embedded broker. Repeatable.")
@click.option("--output", required=True, metavar="DIR",
              help="Where to write the results as Parquet (topics/, sinks/, stores/), or embedded:DIR "
                   "to append the output topics to an embedded broker.")
@click.option("--master", default=None, metavar="URL", help="Spark master (default local[*]; spark://host:7077).")
@click.option("--allow-approximate", is_flag=True,
              help="Replay wall-clock punctuators and close_idle_windows_after with the documented difference "
                   "instead of refusing.")
@click.option("--compare", "compare_topics", multiple=True, metavar="TOPIC",
              help="After the replay, diff TOPIC with the live run's and print the differing keys "
                   "(exit code 1 if any). Repeatable.")
@click.option("--compare-with", default=None, metavar="SOURCE",
              help="Where the live output topics are (same forms as --input; default: the app's embedded broker).")
@click.option("--compare-mode", type=click.Choice(["latest", "records"]), default="latest", show_default=True,
              help="latest: the last value per key (tables); records: every value per key, in order.")
@click.option("--no-stores", is_flag=True, help="Do not write the final store contents.")
@click.option("--bulk", is_flag=True,
              help="Compile windowed counts to Spark SQL (bulk plans) instead of running the task code per "
                   "task partition (the default, faster on small clusters: see bench/spark_replay.py).")
@click.option("--slice-records", type=click.IntRange(min=0), default=None, metavar="N",
              help="Offsets per slice of a stateless stage (default: chosen from the input's size and Spark's "
                   "parallelism; 0: one Spark task per topic partition).")
@broker_option
def replay(app_spec: str, backend: str, inputs: Tuple[str, ...], output: str, master: Optional[str],
           allow_approximate: bool, compare_topics: Tuple[str, ...], compare_with: Optional[str],
           compare_mode: str, no_stores: bool, bulk: bool, slice_records: Optional[int],
           broker: Optional[str]) -> None:
    """Replay APP (module or module:attribute) over historical data with the live run's semantics."""
    from .. import spark as sk_spark

    app = load_app(app_spec)
    if broker:
        app.broker = broker
    given = {}
    for item in inputs:
        topic, sep, source = item.partition("=")
        if not sep or not topic or not source:
            raise click.BadParameter(f"{item!r}: expected TOPIC=SOURCE", param_hint="--input")
        given[topic] = source
    live = compare_with
    if compare_topics and live is None:
        url = app.resolve_broker()
        if not url.startswith("embedded://"):
            raise ConfigError("--compare needs --compare-with SOURCE when the app's broker is not embedded")
        live = url[len("embedded://"):]
    session = sk_spark.get_session(master)
    try:
        result = sk_spark.replay(app, inputs=given, output=output, spark=session,
                                 allow_approximate=allow_approximate, output_stores=not no_stores, bulk=bulk,
                                 slice_records=slice_records)
        for line in result.summary().splitlines():
            click.echo(line, err=True)
        differing = []
        for topic in compare_topics:
            spec = result_topic_spec(app, topic)
            report = sk_spark.compare_topic(session, output, topic, live, key_serde=spec.key_serde,
                                            value_serde=spec.value_serde, mode=compare_mode)
            click.echo(report.render())
            if not report.equal:
                differing.append(topic)
    except Exception as exc:  # noqa: BLE001 - Spark wraps the executor's error: show its last line
        if exc.__class__.__module__.startswith(("pyspark", "py4j")):
            raise click.ClickException(f"replay failed: {executor_error(str(exc))}") from None
        raise
    if differing:
        raise click.ClickException(f"the replay differs from the live run in {', '.join(differing)}")


def result_topic_spec(app: object, topic: str) -> object:
    """``topic``'s spec with its serdes bound as the replay binds them (registry serdes
    need their subject and the app's broker)."""
    from ..spark.replay import bound_topology

    topology = bound_topology(app)
    spec = topology.topics.get(topic)
    if spec is None:
        raise ConfigError(f"app '{app.id}' writes no topic '{topic}'")  # type: ignore[attr-defined]
    return spec


def executor_error(text: str) -> str:
    """The last Python error line in a Spark error's text (the executor's traceback)."""
    found = None
    for line in text.splitlines():
        match = _PYTHON_ERROR.match(line.strip())
        if match:
            found = f"{match.group(1)}: {match.group(2)}"
    if found:
        return found
    lines = text.strip().splitlines()
    return lines[0] if lines else repr(text)

