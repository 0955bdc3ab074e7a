"""The parity cases' topologies in streamkit's DSL (``KafkaStreamsReference.java`` builds the same
ones in Kafka Streams), run through ``streamkit.testing.TopologyTestDriver``."""
from __future__ import annotations

import itertools
from datetime import timedelta
from typing import Any, Callable, Dict, List, Optional

import streamkit as sk
from streamkit.testing import TopologyTestDriver
from tests.parity.cases import Case, Key, Output, input_topics

_app_numbers = itertools.count()


# ---- the user functions (the Java program has the same) ----

def amount(value: Optional[str]) -> int:
    """The amount of a value ``"g:n"`` (``"n"`` alone counts too); 0 for None."""
    return 0 if value is None else int(value.rsplit(":", 1)[-1])


def group(value: Optional[str]) -> Optional[str]:
    """The group (or foreign key) of a value ``"g:n"``; None for None or the group ``~``."""
    if value is None or ":" not in value:
        return None
    name = value.split(":", 1)[0]
    return None if name == "~" else name


def pair(left: Optional[str], right: Optional[str]) -> str:
    return f"{'~' if left is None else left}&{'~' if right is None else right}"


def doubled(value: Optional[str]) -> Optional[str]:
    """``"g:n"`` as ``"g:2n"``; None stays None."""
    return None if value is None else f"{value.split(':', 1)[0]}:{2 * amount(value)}"


def last_three(aggregate: Optional[str], value: Optional[str]) -> str:
    """A reducer keeping the last three values (``~`` for None), so their order shows."""
    return "|".join(f"{'~' if aggregate is None else aggregate}|{'~' if value is None else value}".split("|")[-3:])


COGROUP_WEIGHTS = (1, 100, 10000)
"""What an amount weighs in the cogrouped sum, by input (in1, in2, in3)."""


def _ms(params: dict, field: str) -> timedelta:
    return timedelta(milliseconds=params[field])


def _windows(params: dict) -> Any:
    kind = params["window"]
    if kind == "tumbling":
        return sk.TumblingWindows(size=_ms(params, "size"), grace=_ms(params, "grace"))
    if kind == "hopping":
        return sk.HoppingWindows(size=_ms(params, "size"), advance=_ms(params, "advance"), grace=_ms(params, "grace"))
    if kind == "sliding":
        return sk.SlidingWindows(time_difference=_ms(params, "diff"), grace=_ms(params, "grace"))
    return sk.SessionWindows(inactivity_gap=_ms(params, "gap"), grace=_ms(params, "grace"))


def _windowed(b: sk.StreamsBuilder, p: dict) -> None:
    windowed = b.stream("in").group_by_key().windowed_by(_windows(p))
    if p["op"] == "count":
        table = windowed.count(name="agg")
    elif p["op"] == "reduce":
        table = windowed.reduce(lambda a, c: str(amount(a) + amount(c)), name="agg")
    elif p["window"] == "session":
        table = windowed.aggregate(lambda: 0, lambda k, v, total: total + amount(v),
                                   lambda k, left, right: left + right, name="agg")
    else:
        table = windowed.aggregate(lambda: 0, lambda k, v, total: total + amount(v), name="agg")
    if p["suppress"]:
        table = table.suppress(sk.Suppressed.until_window_closes())
    table.to_stream().to("out")


def _stream_join(b: sk.StreamsBuilder, p: dict) -> None:
    windows = sk.JoinWindows.of(_ms(p, "diff"), grace=_ms(p, "grace"))
    if "before" in p:
        windows = windows.before(_ms(p, "before")).after(_ms(p, "after"))
    left, right = b.stream("left"), b.stream("right")
    {"inner": left.join, "left": left.left_join, "outer": left.outer_join}[p["how"]](
        right, pair, windows).to("out")


def _stream_table_join(b: sk.StreamsBuilder, p: dict) -> None:
    table, stream = b.table("right", name="right_table"), b.stream("left")
    (stream.join if p["how"] == "inner" else stream.left_join)(table, pair).to("out")


def _table_join(b: sk.StreamsBuilder, p: dict) -> None:
    left, right = b.table("left", name="left_table"), b.table("right", name="right_table")
    {"inner": left.join, "left": left.left_join, "outer": left.outer_join}[p["how"]](right, pair) \
        .to_stream().to("out")


def _foreign_key_join(b: sk.StreamsBuilder, p: dict) -> None:
    left, right = b.table("left", name="left_table"), b.table("right", name="right_table")
    (left.join if p["how"] == "inner" else left.left_join)(right, pair, foreign_key_extractor=group) \
        .to_stream().to("out")


def _table_aggregation(b: sk.StreamsBuilder, p: dict) -> None:
    regrouped = b.table("in", name="rows").group_by(lambda k, v: (group(v), v))
    if p["op"] == "count":
        table = regrouped.count(name="agg")
    else:
        table = regrouped.aggregate(lambda: 0, lambda k, v, total: total + amount(v),
                                    lambda k, v, total: total - amount(v), name="agg")
    table.to_stream().to("out")


def _stream_aggregation(b: sk.StreamsBuilder, p: dict) -> None:
    stream = b.stream("in")
    grouped = stream.group_by(lambda k, v: group(v)) if p["regroup"] else stream.group_by_key()
    if p["op"] == "count":
        table = grouped.count(name="agg")
    elif p["op"] == "reduce":
        table = grouped.reduce(lambda a, c: str(amount(a) + amount(c)), name="agg")
    else:
        table = grouped.aggregate(lambda: 0, lambda k, v, total: total + amount(v), name="agg")
    table.to_stream().to("out")


def _global_table_join(b: sk.StreamsBuilder, p: dict) -> None:
    table, stream = b.global_table("right", name="right_global"), b.stream("left")
    (stream.join if p["how"] == "inner" else stream.left_join)(
        table, pair, key_selector=lambda k, v: group(v)).to("out")


def _cogroup(b: sk.StreamsBuilder, p: dict) -> None:
    cogrouped = None
    for n in range(p["inputs"]):
        stream = b.stream(f"in{n + 1}")
        grouped = stream.group_by(lambda k, v: group(v)) if n == 1 and p["regroup"] else stream.group_by_key()
        aggregator = (lambda weight: lambda k, v, total: total + weight * amount(v))(COGROUP_WEIGHTS[n])
        cogrouped = grouped.cogroup(aggregator) if cogrouped is None else cogrouped.cogroup(grouped, aggregator)
    if p["window"] == "none":
        table = cogrouped.aggregate(lambda: 0, name="agg")
    elif p["window"] == "session":
        table = cogrouped.windowed_by(_windows(p)).aggregate(lambda: 0, lambda k, a, c: a + c, name="agg")
    else:
        table = cogrouped.windowed_by(_windows(p)).aggregate(lambda: 0, name="agg")
    table.to_stream().to("out")


def _branch_merge(b: sk.StreamsBuilder, p: dict) -> None:
    stream = b.stream("in")
    branches = stream.split().branch(lambda k, v: amount(v) >= 6, name="big") \
        .branch(lambda k, v: group(v) == "x", name="x").default_branch(name="rest")
    merged = branches["big"].map_values(doubled).merge(branches["x"]).merge(branches["rest"])
    if p["with_source"]:
        merged = merged.merge(stream)
    grouped = merged.group_by(lambda k, v: group(v)) if p["group"] else merged.group_by_key()
    if p["window"] != "none":
        grouped = grouped.windowed_by(_windows(p))
    table = grouped.count(name="agg") if p["op"] == "count" else grouped.reduce(last_three, name="agg")
    table.to_stream().to("out")


def _repartition_aggregation(b: sk.StreamsBuilder, p: dict) -> None:
    stream = b.stream("in")
    if p["rekey"] == "group_by":
        grouped = stream.group_by(lambda k, v: group(v))
    elif p["rekey"] == "select_key":
        grouped = stream.select_key(lambda k, v: group(v)).group_by_key()
    else:
        grouped = stream.map(lambda k, v: (group(v), None if v is None else f"{k or '~'}:{amount(v)}")) \
            .group_by_key()
    if p["window"] != "none":
        grouped = grouped.windowed_by(_windows(p))
    if p["op"] == "count":
        table = grouped.count(name="agg")
    elif p["op"] == "reduce":
        table = grouped.reduce(lambda a, c: str(amount(a) + amount(c)), name="agg")
    elif p["window"] == "session":
        table = grouped.aggregate(lambda: 0, lambda k, v, total: total + amount(v),
                                  lambda k, left, right: left + right, name="agg")
    else:
        table = grouped.aggregate(lambda: 0, lambda k, v, total: total + amount(v), name="agg")
    table.to_stream().to("out")


def _table_view(b: sk.StreamsBuilder, p: dict) -> None:
    table, view = b.table("in", name="rows"), p["view"]
    if view == "filter":
        table = table.filter(lambda k, v: amount(v) >= 5)
    elif view == "filter_not":
        table = table.filter_not(lambda k, v: amount(v) >= 5)
    elif view == "map_values":
        table = table.map_values(doubled)
    elif view == "filter_map_values":
        table = table.filter(lambda k, v: amount(v) >= 5).map_values(doubled)
    else:
        table = table.map_values(doubled).filter(lambda k, v: amount(v) >= 10)
    table.to_stream().to("out")


def _table_suppress(b: sk.StreamsBuilder, p: dict) -> None:
    if p["source"] == "topic":
        table = b.table("in", name="rows")
    elif p["source"] == "aggregation":
        table = b.stream("in").group_by_key().aggregate(lambda: 0, lambda k, v, total: total + amount(v),
                                                        name="agg")
    else:
        table = b.table("in", name="rows").group_by(lambda k, v: (group(v), v)).aggregate(
            lambda: 0, lambda k, v, total: total + amount(v), lambda k, v, total: total - amount(v), name="agg")
    table.suppress(sk.Suppressed.until_time_limit(_ms(p, "limit"))).to_stream().to("out")


BUILDERS: Dict[str, Callable[[sk.StreamsBuilder, dict], None]] = {
    "windowed": _windowed,
    "stream_join": _stream_join,
    "stream_table_join": _stream_table_join,
    "table_join": _table_join,
    "foreign_key_join": _foreign_key_join,
    "table_aggregation": _table_aggregation,
    "stream_aggregation": _stream_aggregation,
    "global_table_join": _global_table_join,
    "cogroup": _cogroup,
    "branch_merge": _branch_merge,
    "repartition_aggregation": _repartition_aggregation,
    "table_view": _table_view,
    "table_suppress": _table_suppress,
}
"""Each family's topology builder: ``(builder, params)``."""


def app_for(case: Case) -> sk.App:
    """A streamkit app running the case's topology on String-serialized topics."""
    app = sk.App(f"parity-{next(_app_numbers)}")
    strings = sk.serdes.String()
    topics = {record[0] for record in case.records} | set(input_topics(case))
    for name in sorted(topics):  # "out" keeps the default serdes: it carries windowed keys and numbers
        app.topic(name, key_serde=strings, value_serde=strings, partitions=1)

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        BUILDERS[case.family](b, case.params)
    return app


def _key(key: Any) -> Key:
    if key is None or isinstance(key, str):
        return key
    return (key.key, key.start, key.end)  # a windowed key


def run_streamkit(case: Case) -> List[Output]:
    """streamkit's output for ``case``, read after every piped record (exceptions propagate)."""
    outputs: List[Output] = []
    with TopologyTestDriver(app_for(case)) as driver:
        out = driver.output_topic("out")
        inputs = {}
        for cause, (topic, key, value, timestamp) in enumerate(case.records):
            if topic not in inputs:
                inputs[topic] = driver.input_topic(topic)
            inputs[topic].pipe_input(key, value, timestamp=timestamp)
            outputs.extend(Output(_key(r.key), None if r.value is None else str(r.value), r.timestamp, cause)
                           for r in out.read_records())
    return outputs
