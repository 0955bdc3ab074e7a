"""Judging streamkit's output against Kafka Streams': exact, accepted (a named Kafka Streams defect
or named noise, and nothing else) or failed.

Outputs are lists of :class:`~tests.parity.cases.Output`: (key, value, timestamp, cause), the
cause being the piped input record after which the record was on the output topic.

Noise is normalised in both outputs before comparing, only where named:

- N1 (unsuppressed session windows, of any family): Kafka forwards ``(session, null)`` and at once
  ``(session, value)`` for one input record when the session's bounds do not change; the
  tombstone is dropped.
- N2 (unsuppressed sliding windows): Kafka forwards the same window twice in a row with the same
  value, timestamp and cause; the repeat is dropped.
- N3 (table-table and foreign-key joins, table filter/map_values views, table suppression): a
  record that leaves its key's latest value as it was (an unchanged result again, a tombstone for
  a key without a result, e.g. for a row failing a filter) is dropped.
- O1 (any family): the records one input record caused may come in another order across keys;
  per (cause, key) the order must stay.

A Kafka Streams defect is undone in Kafka's output by a narrow mechanism (:mod:`tests.parity.defects`),
and the result must then equal streamkit's (with the noise above); a case is never accepted because
of its family alone.
"""
from __future__ import annotations

import collections
import json
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from tests.parity.cases import Case, Output

NOISE: Dict[str, str] = {
    "N1": "Kafka forwards a tombstone and then the value for a session whose bounds did not change",
    "N2": "Kafka forwards the same sliding window twice in a row",
    "N3": "Kafka forwards a table result (join, view, suppression) that does not change its key's latest value",
    "O1": "the records of one input record in another order across keys",
}


@dataclass
class Verdict:
    """``kind`` is "exact", "accepted" (with the defect and noise ``codes``) or "fail"."""

    kind: str
    codes: Tuple[str, ...] = ()
    note: str = ""
    kafka_undone: Optional[List[Output]] = field(default=None, repr=False)  # Kafka's output, defects undone

    @property
    def label(self) -> str:
        return "+".join(self.codes) if self.kind == "accepted" else self.kind


# ---- noise ----

def drop_session_tombstone_before_value(outputs: Sequence[Output]) -> List[Output]:
    """N1: drop a tombstone directly followed, for the same cause, by a value of the same session."""
    kept = []
    for i, record in enumerate(outputs):
        following = outputs[i + 1] if i + 1 < len(outputs) else None
        if (record.value is None and following is not None and following.key == record.key
                and following.value is not None and following.cause == record.cause):
            continue
        kept.append(record)
    return kept


def drop_immediate_repeats(outputs: Sequence[Output]) -> List[Output]:
    """N2: drop a record equal to the one just before it."""
    kept: List[Output] = []
    for record in outputs:
        if not kept or kept[-1] != record:
            kept.append(record)
    return kept


def drop_unchanged_table_values(outputs: Sequence[Output]) -> List[Output]:
    """N3: drop a record whose value is already its key's latest (a tombstone for an absent key too)."""
    latest: Dict[object, Optional[str]] = {}
    kept = []
    for record in outputs:
        if latest.get(record.key) == record.value:  # an absent key's latest value is None
            continue
        latest[record.key] = record.value
        kept.append(record)
    return kept


def noise_of(case: Case) -> Optional[Tuple[str, Callable[[Sequence[Output]], List[Output]]]]:
    """The noise code and normaliser that apply to the case's family, if any."""
    p = case.params
    if p.get("window") == "session" and not p.get("suppress"):
        return "N1", drop_session_tombstone_before_value
    if case.family == "windowed" and not p["suppress"]:
        if p["window"] == "sliding":
            return "N2", drop_immediate_repeats
    if case.family in ("table_join", "foreign_key_join", "table_view", "table_suppress"):
        return "N3", drop_unchanged_table_values
    return None


def same(kafka: Sequence[Output], streamkit: Sequence[Output], *, any_order_across_keys: bool = False) -> bool:
    """Equal record by record (with causes); with ``any_order_across_keys`` (O1), equal per (cause, key)."""
    if not any_order_across_keys:
        return list(kafka) == list(streamkit)

    def by_cause_and_key(outputs: Sequence[Output]) -> Dict[Tuple[int, str], List[Tuple]]:
        grouped: Dict[Tuple[int, str], List[Tuple]] = collections.defaultdict(list)
        for record in outputs:
            grouped[(record.cause, json.dumps(record.key))].append((record.value, record.timestamp))
        return grouped
    return by_cause_and_key(kafka) == by_cause_and_key(streamkit)


def equal_with_noise(case: Case, kafka: Sequence[Output], streamkit: Sequence[Output]) -> Optional[Tuple[str, ...]]:
    """The noise codes under which the outputs are equal (fewest first; () if exactly), or None."""
    noise = noise_of(case)
    attempts: List[Tuple[Tuple[str, ...], Callable, bool]] = [((), list, False)]
    if noise:
        attempts.append(((noise[0],), noise[1], False))
    attempts.append((("O1",), list, True))
    if noise:
        attempts.append(((noise[0], "O1"), noise[1], True))
    for codes, normalise, reorder in attempts:
        if same(normalise(kafka), normalise(streamkit), any_order_across_keys=reorder):
            return codes
    return None


def difference(case: Case, kafka: Sequence[Output], streamkit: Sequence[Output]) -> str:
    """A one-line account of how the outputs differ (after the family's noise)."""
    noise = noise_of(case)
    normalise = noise[1] if noise else list
    a = collections.Counter(r[:3] for r in normalise(kafka))
    b = collections.Counter(r[:3] for r in normalise(streamkit))
    only_kafka, only_streamkit = sum((a - b).values()), sum((b - a).values())
    if not only_kafka and not only_streamkit:
        return "the same records, caused by other input records"
    if collections.Counter(r[:2] for r in a.elements()) == collections.Counter(r[:2] for r in b.elements()):
        return f"the same (key, value)s, other timestamps ({only_kafka} records)"
    return f"{only_kafka} record(s) only in Kafka Streams, {only_streamkit} only in streamkit"
