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


GENERATORS: Dict[str, Callable[[random.Random, int, bool], Case]] = {
    **{kind: _windowed(kind, suppress=False) for kind in WINDOW_KINDS},
    **{f"suppressed_{kind}": _windowed(kind, suppress=True) for kind in WINDOW_KINDS},
    "stream_join": _stream_join,
    "stream_table_join": _key_joins("stream_table_join", ("inner", "left")),
    "table_join": _key_joins("table_join", ("inner", "left", "outer")),
    "foreign_key_join": _foreign_key_join,
    "table_aggregation": _table_aggregation,
    "stream_aggregation": _stream_aggregation,
}
"""Each test family's case generator: ``(rng, seed, nulls) -> Case``."""

FAMILIES = tuple(GENERATORS)


def generate(family: str, seed: int) -> Case:
    """The case of ``family`` for ``seed``: the same on every machine and Python version."""
    rng = random.Random(f"streamkit-parity/{family}/{seed}")
    nulls = rng.random() < 0.3
    case = GENERATORS[family](rng, seed, nulls)
    return replace(case, name=f"{family}:{seed}")


def describe(case: Case) -> str:
    """A short label of the case's variant, e.g. ``session/reduce`` or ``left/asymmetric``."""
    p = case.params
    if "window" in p:
        return f"{p['window']}/{p['op']}"
    if "how" in p:
        return p["how"] + ("/asymmetric" if "before" in p else "")
    return p["op"] + ("/regroup" if p.get("regroup") else "")
