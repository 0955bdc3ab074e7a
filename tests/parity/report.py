"""Running parity cases, shrinking a failing one to a minimal input, and printing it."""
from __future__ import annotations

import collections
import json
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence

from tests.parity.cases import Case, Output, describe
from tests.parity.defects import DEFECTS, judge
from tests.parity.reference import KafkaStreamsReference, ReferenceError
from tests.parity.topologies import run_streamkit
from tests.parity.verdicts import NOISE, Verdict


@dataclass
class Outcome:
    case: Case
    verdict: Verdict
    kafka: Optional[List[Output]]
    streamkit: Optional[List[Output]]


def evaluate(case: Case, reference: KafkaStreamsReference, kafka: Optional[List[Output]] = None) -> Outcome:
    """Run ``case`` through both (Kafka's output may be given) and judge it. An exception on either
    side is a failure naming it."""
    try:
        kafka = reference.run(case) if kafka is None else kafka
    except ReferenceError as exc:
        return Outcome(case, Verdict("fail", note=f"Kafka Streams raised: {exc}"), None, None)
    try:
        streamkit = run_streamkit(case)
    except Exception as exc:  # noqa: BLE001 - a streamkit exception is a finding, reported as such
        return Outcome(case, Verdict("fail", note=f"streamkit raised {type(exc).__name__}: {exc}"), kafka, None)
    return Outcome(case, judge(case, kafka, streamkit, reference), kafka, streamkit)


def shrink(case: Case, still_fails: Callable[[Case], bool], budget: int = 300) -> Case:
    """A smaller input that still fails: drop halves, then quarters, ..., then single records."""
    records, tries = list(case.records), 0
    chunk = max(1, len(records) // 2)
    while chunk >= 1 and tries < budget:
        start, removed = 0, False
        while start < len(records) and tries < budget:
            candidate = records[:start] + records[start + chunk:]
            tries += 1
            if candidate and still_fails(case.with_records(candidate)):
                records, removed = candidate, True
            else:
                start += chunk
        if not removed:
            chunk //= 2
    return case.with_records(records)


def minimal_failure(outcome: Outcome, reference: KafkaStreamsReference) -> Outcome:
    """The failing ``outcome``'s case shrunk, evaluated again."""
    small = shrink(outcome.case, lambda c: evaluate(c, reference).verdict.kind == "fail")
    return evaluate(small, reference)


def _text(x: object) -> str:
    if x is None:
        return "null"
    if isinstance(x, tuple):
        return f"{_text(x[0])}@[{x[1]},{x[2]}]"
    return str(x)


def _table(header: Sequence[str], rows: List[List[object]]) -> str:
    cells = [[str(c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(header)]
    lines = [[h.ljust(w) for h, w in zip(header, widths)]] + [[c.ljust(w) for c, w in zip(r, widths)] for r in cells]
    return "\n".join("    " + "  ".join(line).rstrip() for line in lines) if cells else "    (nothing)"


def _output_table(outputs: Sequence[Output], other: Sequence[Output]) -> str:
    """``*`` marks a record the other side lacks (same key, value, timestamp and cause)."""
    spare = collections.Counter(outputs) - collections.Counter(other)
    rows = []
    for record in outputs:
        mark = "*" if spare[record] > 0 else ""
        spare[record] -= 1 if mark else 0
        rows.append([mark, _text(record.key), _text(record.value), record.timestamp, f"#{record.cause + 1}"])
    return _table(["", "key", "value", "ts", "after"], rows)


def render(outcome: Outcome) -> str:
    """A case in full: its parameters, input records, both outputs (and Kafka's with defects undone)."""
    case, verdict = outcome.case, outcome.verdict
    codes = {**DEFECTS, **NOISE}
    said = verdict.note if verdict.kind == "fail" else "; ".join(f"{c}: {codes[c]}" for c in verdict.codes)
    lines = [f"{case.name} [{describe(case)}] {case.family} {json.dumps(case.params, sort_keys=True)}",
             f"verdict: {verdict.kind.upper()}" + (f" ({said})" if said else ""),
             "input records, piped in this order:",
             _table(["#", "topic", "key", "value", "ts"],
                    [[f"#{i + 1}", t, _text(k), _text(v), ts] for i, (t, k, v, ts) in enumerate(case.records)])]
    kafka, streamkit = outcome.kafka or [], outcome.streamkit or []
    lines += [f"Kafka Streams -> out:", _output_table(kafka, streamkit)]
    if verdict.kafka_undone is not None:
        undone = "+".join(c for c in verdict.codes if c in DEFECTS)
        lines += [f"Kafka Streams with {undone} undone -> out:", _output_table(verdict.kafka_undone, streamkit)]
    lines += ["streamkit -> out:", _output_table(streamkit, verdict.kafka_undone or kafka)]
    return "\n".join(lines)
