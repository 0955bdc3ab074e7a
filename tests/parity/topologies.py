"""The parity cases' topologies in streamkit's DSL (``KafkaStreamsReference.java`` builds the same
ones in Kafka Streams), run through ``streamkit.testing.TopologyTestDriver``."""
from __future__ import annotations

import itertools
from datetime import timedelta
from typing import Any, List, Optional

import streamkit as sk
from streamkit.testing import TopologyTestDriver
from tests.parity.cases import Case, Key, Output

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


def _build(b: sk.StreamsBuilder, family: str, p: dict) -> None:
    if family == "windowed":
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
    elif family == "stream_join":
        windows = sk.JoinWindows.of(_ms(p, "diff"), grace=_ms(p, "grace"))
        if "before" in p:
            windows = windows.before(_ms(p, "before")).after(_ms(p, "after"))
        left, right = b.stream("left"), b.stream("right")
        {"inner": left.join, "left": left.left_join, "outer": left.outer_join}[p["how"]](
            right, pair, windows).to("out")
    elif family == "stream_table_join":
        table, stream = b.table("right", name="right_table"), b.stream("left")
        (stream.join if p["how"] == "inner" else stream.left_join)(table, pair).to("out")
    elif family == "table_join":
        left, right = b.table("left", name="left_table"), b.table("right", name="right_table")
        {"inner": left.join, "left": left.left_join, "outer": left.outer_join}[p["how"]](right, pair) \
            .to_stream().to("out")
    elif family == "foreign_key_join":
        left, right = b.table("left", name="left_table"), b.table("right", name="right_table")
        (left.join if p["how"] == "inner" else left.left_join)(right, pair, foreign_key_extractor=group) \
            .to_stream().to("out")
    elif family == "table_aggregation":
        regrouped = b.table("in", name="rows").group_by(lambda k, v: (group(v), v))
        if p["op"] == "count":
            table = regrouped.count(name="agg")
        else:
            table = regrouped.aggregate(lambda: 0, lambda k, v, total: total + amount(v),
                                        lambda k, v, total: total - amount(v), name="agg")
        table.to_stream().to("out")
    elif family == "stream_aggregation":
        stream = b.stream("in")
        grouped = stream.group_by(lambda k, v: group(v)) if p["regroup"] else stream.group_by_key()
        if p["op"] == "count":
            table = grouped.count(name="agg")
        elif p["op"] == "reduce":
            table = grouped.reduce(lambda a, c: str(amount(a) + amount(c)), name="agg")
        else:
            table = grouped.aggregate(lambda: 0, lambda k, v, total: total + amount(v), name="agg")
        table.to_stream().to("out")
    else:
        raise ValueError(f"unknown family {family!r}")


def app_for(case: Case) -> sk.App:
    """A streamkit app running the case's topology on String-serialized topics."""
    app = sk.App(f"parity-{next(_app_numbers)}")
    strings = sk.serdes.String()
    topics = {record[0] for record in case.records} | ({"left", "right"} if "join" in case.family else {"in"})
    for name in sorted(topics):  # "out" keeps the default serdes: it carries windowed keys and numbers
        app.topic(name, key_serde=strings, value_serde=strings, partitions=1)

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        _build(b, case.family, case.params)
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
