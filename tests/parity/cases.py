"""Seeded random cases for the differential suite: a topology family, its parameters and input
records (few keys, out-of-order and late timestamps, tombstones, and in about a third of the
cases null keys, null stream values and null groups or foreign keys).

A value is ``"g:n"``: group (or foreign key) ``g`` and amount ``n``; the group ``~`` means none.
Join inputs carry unique labels (``l3``, ``r5``) so that every join result names its inputs.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple, Union

WindowedKey = Tuple[str, int, int]
Key = Union[None, str, WindowedKey]


class Output(NamedTuple):
    """One record on the output topic, and the index of the piped input record that caused it."""

    key: Key
    value: Optional[str]
    timestamp: int
    cause: int


def output_from_json(row: List[Any]) -> Output:
    key, value, timestamp, cause = row
    return Output(tuple(key) if isinstance(key, list) else key, value, timestamp, cause)


InputRecord = Tuple[str, Optional[str], Optional[str], int]  # (topic, key, value, timestamp)


@dataclass(frozen=True)
class Case:
    """A topology (``family`` with ``params``, as both sides build it) and the records piped into it."""

    family: str
    params: Dict[str, Any]
    records: List[InputRecord] = field(hash=False)
    name: str = ""

    def with_records(self, records: List[InputRecord]) -> "Case":
        return replace(self, records=list(records))

    def with_params(self, **changes: Any) -> "Case":
        return replace(self, params={**self.params, **changes})


# ---- timestamps and keys ----

def _timestamps(rng: random.Random, count: int, step: int, lateness: int) -> List[int]:
    """``count`` timestamps >= 0: mostly advancing by up to ``step``, sometimes repeating,
    sometimes up to ``lateness`` behind the latest, sometimes jumping far ahead."""
    latest = rng.randint(0, step)
    out: List[int] = []
    for _ in range(count):
        roll = rng.random()
        if out and roll < 0.22:
            out.append(max(0, latest - rng.randint(1, lateness)))
        elif out and roll < 0.32:
            out.append(latest)
        else:
            latest += rng.randint(2 * step, 4 * step) if roll > 0.93 else rng.randint(0, step)
            out.append(latest)
    return out


def _key(rng: random.Random, keys: List[str], null_rate: float) -> Optional[str]:
    return None if rng.random() < null_rate else rng.choice(keys)


# ---- the families ----

WINDOW_KINDS = ("tumbling", "hopping", "sliding", "session")
OPS = ("count", "reduce", "aggregate")


def _windowed(kind: str, suppress: bool) -> Callable[[random.Random, int, bool], Case]:
    def generate(rng: random.Random, seed: int, nulls: bool) -> Case:
        grace = 0 if rng.random() < 0.35 else rng.randint(1, 8)
        params: Dict[str, Any] = {"window": kind, "grace": grace, "op": OPS[seed % 3], "suppress": suppress}
        if kind in ("tumbling", "hopping"):
            params["size"] = span = rng.randint(2, 14)
            if kind == "hopping":
                params["advance"] = rng.randint(1, span)
        elif kind == "sliding":
            params["diff"] = span = rng.randint(1, 12)
        else:
            params["gap"] = span = rng.randint(1, 8)
        keys = ["a", "b", "c"][:rng.randint(1, 3)]
        null_rate = 0.1 if nulls else 0.0
        records = [("in", _key(rng, keys, null_rate),
                    None if rng.random() < null_rate else f"{rng.choice('xy')}:{rng.randint(0, 9)}", ts)
                   for ts in _timestamps(rng, rng.randint(1, 16), span // 2 + 1, span + grace + 4)]
        return Case("windowed", params, records)
    return generate


def _stream_join(rng: random.Random, seed: int, nulls: bool) -> Case:
    params: Dict[str, Any] = {"how": ("inner", "left", "outer")[seed % 3], "diff": rng.randint(0, 8),
                              "grace": 0 if rng.random() < 0.4 else rng.randint(1, 6)}
    if rng.random() < 0.35:  # asymmetric windows
        params["before"], params["after"] = rng.randint(0, 8), rng.randint(0, 8)
    span = max(params["diff"], params.get("before", 0), params.get("after", 0)) + 1
    keys = ["a", "b", "c"][:rng.randint(1, 3)]
    null_rate = 0.1 if nulls else 0.0
    records = []
    for i, ts in enumerate(_timestamps(rng, rng.randint(2, 16), span // 2 + 1, span + params["grace"] + 4)):
        side = rng.choice(("left", "right"))
        value = None if rng.random() < null_rate else f"{side[0]}{i}"
        records.append((side, _key(rng, keys, null_rate), value, ts))
    return Case("stream_join", params, records)


def _key_joins(family: str, hows: Tuple[str, ...]) -> Callable[[random.Random, int, bool], Case]:
    def generate(rng: random.Random, seed: int, nulls: bool) -> Case:
        keys = ["a", "b", "c"][:rng.randint(1, 3)]
        null_rate = 0.1 if nulls else 0.0
        records = []
        for i, ts in enumerate(_timestamps(rng, rng.randint(2, 16), 3, 6)):
            side = rng.choice(("left", "right"))
            if family == "stream_table_join" and side == "left":
                value = None if rng.random() < null_rate else f"l{i}"
            else:  # a table's update or tombstone
                value = None if rng.random() < 0.2 else f"{side[0]}{i}"
            records.append((side, _key(rng, keys, null_rate), value, ts))
        return Case(family, {"how": hows[seed % len(hows)]}, records)
    return generate


def _foreign_key_join(rng: random.Random, seed: int, nulls: bool) -> Case:
    left_keys = ["k1", "k2", "k3"][:rng.randint(1, 3)]
    foreign = ["x", "y"] + (["~"] if nulls else [])
    null_rate = 0.1 if nulls else 0.0
    records = []
    for i, ts in enumerate(_timestamps(rng, rng.randint(2, 16), 3, 6)):
        if rng.random() < 0.55:
            value = None if rng.random() < 0.2 else f"{rng.choice(foreign)}:{i}"
            records.append(("left", _key(rng, left_keys, null_rate), value, ts))
        else:
            value = None if rng.random() < 0.2 else f"r{i}"
            records.append(("right", _key(rng, ["x", "y"], null_rate), value, ts))
    return Case("foreign_key_join", {"how": ("inner", "left")[seed % 2]}, records)


def _table_aggregation(rng: random.Random, seed: int, nulls: bool) -> Case:
    rows = ["k1", "k2", "k3", "k4"][:rng.randint(1, 4)]
    groups = ["x", "y"] + (["~"] if nulls else [])
    null_rate = 0.1 if nulls else 0.0
    records = [("in", _key(rng, rows, null_rate),
                None if rng.random() < 0.2 else f"{rng.choice(groups)}:{rng.randint(0, 9)}", ts)
               for ts in _timestamps(rng, rng.randint(1, 16), 3, 6)]
    return Case("table_aggregation", {"op": ("count", "sum")[seed % 2]}, records)


def _stream_aggregation(rng: random.Random, seed: int, nulls: bool) -> Case:
    keys = ["a", "b", "c"][:rng.randint(1, 3)]
    groups = ["x", "y"] + (["~"] if nulls else [])
    null_rate = 0.1 if nulls else 0.0
    records = [("in", _key(rng, keys, null_rate),
                None if rng.random() < null_rate else f"{rng.choice(groups)}:{rng.randint(0, 9)}", ts)
               for ts in _timestamps(rng, rng.randint(1, 16), 3, 6)]
    return Case("stream_aggregation", {"op": OPS[seed % 3], "regroup": seed % 6 >= 3}, records)


def _value(rng: random.Random, groups: List[str], null_rate: float, top: int = 9) -> Optional[str]:
    return None if rng.random() < null_rate else f"{rng.choice(groups)}:{rng.randint(0, top)}"


def _window_params(rng: random.Random, kind: str) -> Dict[str, Any]:
    """``window`` (none, tumbling, hopping or session), its grace and its size, advance or gap."""
    params: Dict[str, Any] = {"window": kind}
    if kind == "none":
        return params
    params["grace"] = 0 if rng.random() < 0.35 else rng.randint(1, 8)
    if kind == "session":
        params["gap"] = rng.randint(1, 8)
    else:
        params["size"] = rng.randint(2, 14)
        if kind == "hopping":
            params["advance"] = rng.randint(1, params["size"])
    return params


def _span(params: Dict[str, Any]) -> int:
    return params.get("size", params.get("gap", 4))


def _global_table_join(rng: random.Random, seed: int, nulls: bool) -> Case:
    """A stream ("left": values "g:l<i>") joined with a global table ("right", keyed by group)
    through the key selector ``group(value)``: null keys, null values, the group ``~`` (a null
    selector result) and table tombstones."""
    left_keys = ["k1", "k2", "k3"][:rng.randint(1, 3)]
    groups = ["x", "y"] + (["~"] if nulls else [])
    null_rate = 0.1 if nulls else 0.0
    records = []
    for i, ts in enumerate(_timestamps(rng, rng.randint(2, 16), 3, 6)):
        if rng.random() < 0.55:
            value = None if rng.random() < null_rate else f"{rng.choice(groups)}:l{i}"
            records.append(("left", _key(rng, left_keys, null_rate), value, ts))
        else:
            value = None if rng.random() < 0.2 else f"r{i}"
            records.append(("right", _key(rng, ["x", "y"], null_rate), value, ts))
    return Case("global_table_join", {"how": ("inner", "left")[seed % 2]}, records)


def _cogroup(rng: random.Random, seed: int, nulls: bool) -> Case:
    """Two or three streams ("in1".."in3") cogrouped into one sum per key (each input weighs its
    amounts differently), unwindowed, tumbling, hopping or session; the second input is grouped
    by ``group(value)`` in a third of the cases (a repartition)."""
    params = _window_params(rng, ("none", "tumbling", "hopping", "session")[seed % 4])
    params["inputs"] = 2 + (seed // 4) % 2
    params["regroup"] = rng.random() < 0.33
    keys = ["a", "b", "c"][:rng.randint(1, 3)]
    groups = ["a", "b"] + (["~"] if nulls else [])
    null_rate = 0.1 if nulls else 0.0
    span = _span(params)
    topics = [f"in{n + 1}" for n in range(params["inputs"])]
    records = [(topic, _key(rng, keys, null_rate), _value(rng, groups, null_rate), ts)
               for topic, ts in ((rng.choice(topics), ts) for ts in _timestamps(
                   rng, rng.randint(1, 16), span // 2 + 1, span + params.get("grace", 0) + 4))]
    return Case("cogroup", params, records)


def _branch_merge(rng: random.Random, seed: int, nulls: bool) -> Case:
    """A stream split into three branches (amount >= 6, doubled; group x; the default), merged
    back (with the unsplit stream too in some cases), grouped by key or by group, and counted or
    reduced (keeping the last three values, so the order through the merge shows)."""
    params = _window_params(rng, ("none", "tumbling")[(seed // 2) % 2])
    params.update(op=("count", "reduce")[seed % 2], group=rng.random() < 0.3, with_source=rng.random() < 0.3)
    keys = ["a", "b", "c"][:rng.randint(1, 3)]
    groups = ["x", "y"] + (["~"] if nulls else [])
    null_rate = 0.1 if nulls else 0.0
    span = _span(params)
    records = [("in", _key(rng, keys, null_rate), _value(rng, groups, null_rate), ts)
               for ts in _timestamps(rng, rng.randint(1, 16), span // 2 + 1, span + params.get("grace", 0) + 4)]
    return Case("branch_merge", params, records)


def _repartition_aggregation(rng: random.Random, seed: int, nulls: bool) -> Case:
    """A stream re-keyed to ``group(value)`` (group_by, select_key or map) and then counted,
    reduced or aggregated, unwindowed or per tumbling, hopping or session window."""
    params = _window_params(rng, ("none", "tumbling", "hopping", "session")[(seed // 3) % 4])
    params.update(op=OPS[seed % 3], rekey=("group_by", "select_key", "map")[(seed // 12) % 3])
    keys = ["a", "b", "c"][:rng.randint(1, 3)]
    groups = ["x", "y"] + (["~"] if nulls else [])
    null_rate = 0.1 if nulls else 0.0
    span = _span(params)
    records = [("in", _key(rng, keys, null_rate), _value(rng, groups, null_rate), ts)
               for ts in _timestamps(rng, rng.randint(1, 16), span // 2 + 1, span + params.get("grace", 0) + 4)]
    return Case("repartition_aggregation", params, records)


TABLE_VIEWS = ("filter", "filter_not", "map_values", "filter_map_values", "map_values_filter")


def _table_view(rng: random.Random, seed: int, nulls: bool) -> Case:
    """A table from "in" through filter / filter_not (amount >= 5) and map_values (doubled),
    to_stream: tombstones, keys never seen, rows that stop or start passing the filter."""
    rows = ["k1", "k2", "k3"][:rng.randint(1, 3)]
    null_rate = 0.1 if nulls else 0.0
    records = [("in", _key(rng, rows, null_rate),
                None if rng.random() < 0.2 else f"{rng.choice('xy')}:{rng.randint(0, 9)}", ts)
               for ts in _timestamps(rng, rng.randint(1, 16), 3, 6)]
    return Case("table_view", {"view": TABLE_VIEWS[seed % len(TABLE_VIEWS)]}, records)


def _table_suppress(rng: random.Random, seed: int, nulls: bool) -> Case:
    """A table (from "in"; a stream's sum per key; a table's sum per group) suppressed with
    until_time_limit (unbounded buffer): stream time advances by records; tombstones."""
    source = ("topic", "aggregation", "table_aggregation")[seed % 3]
    params = {"source": source, "limit": rng.choice([0, 1, 2, 3, 5, 8, 12])}
    rows = ["k1", "k2", "k3"][:rng.randint(1, 3)]
    groups = ["x", "y"] + (["~"] if nulls else [])
    null_rate = 0.1 if nulls else 0.0
    tombstones = 0.05 if source == "aggregation" else 0.2
    records = [("in", _key(rng, rows, null_rate),
                None if rng.random() < tombstones else f"{rng.choice(groups)}:{rng.randint(0, 9)}", ts)
               for ts in _timestamps(rng, rng.randint(1, 16), 3, 6)]
    return Case("table_suppress", params, records)


GENERATORS: Dict[str, Callable[[random.Random, int, bool], Case]] = {
    **{kind: _windowed(kind, suppress=False) for kind in WINDOW_KINDS},
    **{f"suppressed_{kind}": _windowed(kind, suppress=True) for kind in WINDOW_KINDS},
    "stream_join": _stream_join,
    "stream_table_join": _key_joins("stream_table_join", ("inner", "left")),
    "table_join": _key_joins("table_join", ("inner", "left", "outer")),
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
"""Each test family's case generator: ``(rng, seed, nulls) -> Case``."""

FAMILIES = tuple(GENERATORS)


def generate(family: str, seed: int) -> Case:
    """The case of ``family`` for ``seed``: the same on every machine and Python version."""
    rng = random.Random(f"streamkit-parity/{family}/{seed}")
    nulls = rng.random() < 0.3
    case = GENERATORS[family](rng, seed, nulls)
    return replace(case, name=f"{family}:{seed}")


def input_topics(case: Case) -> List[str]:
    """The topics the case's topology reads (whether or not a record is piped into each)."""
    if case.family == "cogroup":
        return [f"in{n + 1}" for n in range(case.params["inputs"])]
    return ["left", "right"] if "join" in case.family else ["in"]


def describe(case: Case) -> str:
    """A short label of the case's variant, e.g. ``session/reduce`` or ``left/asymmetric``."""
    p = case.params
    if case.family == "cogroup":
        return f"{p['window']}/{p['inputs']} inputs" + ("/regroup" if p["regroup"] else "")
    if case.family == "branch_merge":
        return f"{p['window']}/{p['op']}" + ("/group" if p["group"] else "") + ("/source" if p["with_source"] else "")
    if case.family == "repartition_aggregation":
        return f"{p['rekey']}/{p['window']}/{p['op']}"
    if case.family == "table_view":
        return p["view"]
    if case.family == "table_suppress":
        return f"{p['source']}/limit {p['limit']}"
    if "window" in p:
        return f"{p['window']}/{p['op']}"
    if "how" in p:
        return p["how"] + ("/asymmetric" if "before" in p else "")
    return p["op"] + ("/regroup" if p.get("regroup") else "")
