"""Named Kafka Streams 4.1 defects, each recognised by a narrow mechanism, and the judge.

Each defect is undone in Kafka's output in one of two ways, and the case is accepted only when
the undone output then equals streamkit's (with the named noise of :mod:`tests.parity.verdicts`):

- a counterfactual run: Kafka Streams again with one thing changed: a store keeping one or two ms
  more (K1, K4, K6), tombstones for absent keys not piped (K7), a cogroup as one aggregation (K8);
- a replay: a model of the one Kafka processor at fault, fed from Kafka's own records, must first
  reproduce Kafka's actual output; then the same model with the defect corrected gives the undone
  output (K2, K3, K5). A model that does not reproduce Kafka gives no acceptance.

K1  stream-stream join: a join store drops a partner exactly at its retention edge (timestamp ==
    the store's time - (before + after + grace)) while the joining record is still on time; with
    before + after + grace == 0, equal timestamps never join. Undone: join stores keep one ms more.
K2  left/outer stream-stream join: a scan for unmatched results leaves the tracked earliest pending
    timestamp at the last entry it looked at, not the earliest one it kept, so the scan's gate
    skips due results at later chances. Undone: the scans replayed keeping the earliest timestamp.
K3  suppress(untilWindowCloses) of sliding windows emits a window at stream time end + grace while
    the aggregation still updates it (its end is inclusive): a "final" result one record early, or
    two. Undone: Kafka's unsuppressed updates buffered until stream time end + grace + 1.
K4  session windows: the session store expires a session with end <= its time - gap - grace while
    the aggregation still merges one with end >= stream time - gap - grace; a record then starts a
    new session instead of merging. Undone: the session store keeps one ms more.
K5  suppress(untilWindowCloses) of session windows emits a session at stream time end + gap + grace
    while the aggregation still merges records into it at that stream time (the session twin of
    K3). Undone: Kafka's unsuppressed updates buffered until stream time end + gap + grace + 1.
K6  sliding windows: the window store (its time the latest window start, up to stream time) hides a
    window starting at or before its time - (2 * difference + grace), while the aggregation still
    needs a window starting as early as stream time - grace - 2 * difference - 1 (the left window
    of a record whose right window is still open); when another key moved the store's time, Kafka
    leaves the earlier record out of the new record's windows, or does not create the earlier
    record's right window. Undone: the sliding-window store keeps two ms more.
K7  a table read from a topic forwards a tombstone for a key it has no row for (its source is not
    materialized, so it cannot know); a suppress(untilTimeLimit) downstream holds that non-change
    as the key's first update, so the time limit starts with it and the key's next value goes out
    early. Undone: Kafka re-run with such tombstones not piped (as if the table source dropped them).
K8  a windowed cogroup runs one window-aggregation processor per input, each with its own stream
    time, over one store: a record of one input is aggregated into a window that the other inputs'
    records have already closed (stream time past end + grace), or starts a session there. Undone:
    Kafka re-run with the inputs merged into one windowed aggregation (one processor, one stream
    time), each value folded with its own input's aggregator.
"""
from __future__ import annotations

import collections
from typing import Dict, List, Optional, Sequence, Tuple

from tests.parity.cases import Case, Output
from tests.parity.reference import KafkaStreamsReference
from tests.parity.verdicts import Verdict, difference, equal_with_noise

DEFECTS: Dict[str, str] = {
    "K1": "Kafka misses a stream-stream join partner at its store's retention edge",
    "K2": "Kafka skips a due unmatched join result (its scan loses the earliest pending timestamp)",
    "K3": "Kafka's suppression emits a sliding window at end + grace, before it closes",
    "K4": "Kafka's session store expires a session the aggregation still merges",
    "K5": "Kafka's suppression emits a session at end + gap + grace, before it closes",
    "K6": "Kafka's sliding-window store hides a window the aggregation still needs",
    "K7": "Kafka's suppression starts a key's time limit with a tombstone for a key the table lacks",
    "K8": "Kafka's windowed cogroup keeps one stream time per input: it updates windows already closed",
}

JOIN_STORES_ONE_MS_LONGER = "join-store-one-ms-longer"
SESSION_STORE_ONE_MS_LONGER = "session-store-one-ms-longer"
SLIDING_STORE_TWO_MS_LONGER = "sliding-store-two-ms-longer"
ABSENT_TOMBSTONES_DROPPED = "absent-tombstones-dropped"
COGROUP_ONE_STREAM_TIME = "cogroup-one-stream-time"

_JAVA_LONG_MAX = 2**63 - 1  # the join's "nothing pending"


# ---- K3, K5: the suppression buffer replayed ----

def suppression_replay(updates: Sequence[Output], hold: int, *, emit_at_close: bool) -> List[Output]:
    """What a suppress(untilWindowCloses) buffer forwards for these windowed ``updates``: each
    window's latest update is held until stream time (the latest update timestamp seen) reaches
    ``end + hold`` (Kafka Streams 4.1), or passes it (``emit_at_close``: the window then no longer
    accepts records); due windows go out by (end, key, start), tombstones not at all."""
    held: Dict[Tuple, Tuple[Optional[str], int]] = {}
    stream_time: Optional[int] = None
    forwarded = []
    for update in updates:
        stream_time = update.timestamp if stream_time is None else max(stream_time, update.timestamp)
        held[update.key] = (update.value, update.timestamp)
        due = sorted((w for w in held if (w[2] + hold < stream_time if emit_at_close else w[2] + hold <= stream_time)),
                     key=lambda w: (w[2], w[0], w[1]))
        for window in due:
            value, timestamp = held.pop(window)
            if value is not None:
                forwarded.append(Output(window, value, timestamp, update.cause))
    return forwarded


def undo_early_suppression(case: Case, suppressed: Sequence[Output],
                           unsuppressed: Sequence[Output]) -> Optional[List[Output]]:
    """Kafka's suppressed output as it is once windows are emitted only when they close (K3 for
    sliding windows, K5 for sessions); None when replaying Kafka's buffer on its own unsuppressed
    updates does not give Kafka's suppressed output."""
    p = case.params
    hold = p["grace"] + (p["gap"] if p["window"] == "session" else 0)
    as_kafka = suppression_replay(unsuppressed, hold, emit_at_close=False)
    if equal_with_noise(case, suppressed, as_kafka) is None:
        return None
    return suppression_replay(unsuppressed, hold, emit_at_close=True)


# ---- K2: the unmatched-result scans of a left/outer join replayed ----

def _unmatched_value(topic: str, value: str) -> str:
    return f"{value}&~" if topic == "left" else f"~&{value}"


def join_replay(case: Case, kafka: Sequence[Output], *, keep_earliest: bool) -> Optional[List[Output]]:
    """A left/outer stream-stream join's output rebuilt from the inputs and the inner results Kafka
    produced (which partners each record found): the unmatched results as Kafka Streams 4.1 emits
    them (its tracked earliest pending timestamp set to the last entry a scan looked at), or with
    ``keep_earliest`` as they are once a scan keeps the earliest pending timestamp. None when
    Kafka's output cannot be read that way.

    Per record, as Kafka 4.1: stream time (shared by both sides) advances; an outer side's record
    with a null key is emitted unmatched at once; other null keys or values stop there. A record at
    stream time scans unless ``earliest + its side's after + grace >= stream time`` (the right
    side's after is the windows' before): pending entries in (timestamp, right before left, key)
    order, each value in turn; an entry whose window is open (``t + after`` for left, ``t + before``
    for right, ``+ grace >= stream time``) marks its side open, others are emitted and removed;
    the scan stops once both sides are open. Then the inner results, each removing its partner's
    pending entry; then, on an outer side without partners, the record is emitted at once if
    ``t + its after < stream time``, else kept pending."""
    p = case.params
    if p["how"] == "inner":
        return None
    before, after, grace = p.get("before", p["diff"]), p.get("after", p["diff"]), p["grace"]
    index_of = {value: i for i, (_t, _k, value, _ts) in enumerate(case.records) if value is not None}
    if len(index_of) != sum(1 for record in case.records if record[2] is not None):
        return None  # the values are not unique labels
    inner: Dict[int, List[Tuple[Output, int]]] = collections.defaultdict(list)
    for record in kafka:
        if record.value is None or "&" not in record.value:
            return None
        sides = [label for label in record.value.split("&") if label != "~"]
        if len(sides) == 2:
            if any(label not in index_of for label in sides):
                return None
            members = [index_of[label] for label in sides]
            if record.cause not in members:
                return None
            inner[record.cause].append((record, members[0] if members[1] == record.cause else members[1]))
    pending: Dict[Tuple[int, int, str], List[int]] = {}
    earliest, stream_time = _JAVA_LONG_MAX, None
    rebuilt: List[Output] = []
    for i, (topic, key, value, ts) in enumerate(case.records):
        stream_time = ts if stream_time is None else max(stream_time, ts)
        is_left = topic == "left"
        outer_side = is_left or p["how"] == "outer"
        if key is None and value is not None and outer_side:
            rebuilt.append(Output(None, _unmatched_value(topic, value), ts, i))
            continue
        if key is None or value is None:
            continue
        own_after = after if is_left else before
        # Long.MAX_VALUE + after + grace overflows in Java: the gate then always opens
        if ts == stream_time and (earliest == _JAVA_LONG_MAX or earliest + own_after + grace < stream_time):
            earliest = _JAVA_LONG_MAX
            open_sides = set()
            emitted = []
            for entry in [e for e in sorted(pending) for _ in pending[e]]:
                earliest = entry[0]
                if len(open_sides) == 2:
                    break
                if entry[0] + (after if entry[1] else before) + grace >= stream_time:
                    open_sides.add(entry[1])
                    continue
                emitted.append(entry)
            for entry in dict.fromkeys(emitted):
                for x in pending.pop(entry):
                    x_topic, _x_key, x_value, _x_ts = case.records[x]
                    rebuilt.append(Output(entry[2], _unmatched_value(x_topic, x_value), entry[0], i))
            if keep_earliest:
                earliest = min((entry[0] for entry in pending), default=_JAVA_LONG_MAX)
        for record, partner in inner.get(i, ()):
            p_topic, p_key, _p_value, p_ts = case.records[partner]
            pending.pop((p_ts, 1 if p_topic == "left" else 0, p_key), None)
            rebuilt.append(record)
        if outer_side and not inner.get(i):
            if max(0, ts + own_after) < stream_time:
                rebuilt.append(Output(key, _unmatched_value(topic, value), ts, i))
            else:
                earliest = min(earliest, ts)
                pending.setdefault((ts, 1 if is_left else 0, key), []).append(i)
    return rebuilt


def undo_skipped_unmatched_results(case: Case, kafka: Sequence[Output]) -> Optional[List[Output]]:
    """K2 undone: Kafka's output with the scans keeping the earliest pending timestamp; None when the
    replay of Kafka's own scans does not reproduce Kafka's output record for record."""
    if join_replay(case, kafka, keep_earliest=False) != list(kafka):
        return None
    return join_replay(case, kafka, keep_earliest=True)


# ---- the judge ----

def undone_variants(case: Case, kafka: List[Output],
                    reference: KafkaStreamsReference) -> List[Tuple[Tuple[str, ...], List[Output]]]:
    """Kafka's output with each applicable set of defects undone (fewest defects first); a set that
    cannot be undone, or changes nothing, is left out."""
    variants: List[Tuple[Tuple[str, ...], List[Output]]] = []

    def add(codes: Tuple[str, ...], undone: Optional[List[Output]]) -> None:
        if undone is not None and undone != kafka and all(undone != other for _c, other in variants):
            variants.append((codes, undone))

    p = case.params
    if case.family == "stream_join":
        longer = reference.run(case, [JOIN_STORES_ONE_MS_LONGER])
        add(("K1",), longer)
        add(("K2",), undo_skipped_unmatched_results(case, kafka))
        if longer != kafka:
            add(("K1", "K2"), undo_skipped_unmatched_results(case, longer))
    elif case.family == "cogroup" and p["window"] == "session":
        add(("K4",), reference.run(case, [SESSION_STORE_ONE_MS_LONGER]))
        add(("K8",), reference.run(case, [COGROUP_ONE_STREAM_TIME]))
        add(("K4", "K8"), reference.run(case, [SESSION_STORE_ONE_MS_LONGER, COGROUP_ONE_STREAM_TIME]))
    elif case.family == "cogroup" and p["window"] != "none":
        add(("K8",), reference.run(case, [COGROUP_ONE_STREAM_TIME]))
    elif case.family == "repartition_aggregation" and p["window"] == "session":
        add(("K4",), reference.run(case, [SESSION_STORE_ONE_MS_LONGER]))
    elif case.family == "windowed" and p["window"] == "session":
        longer = reference.run(case, [SESSION_STORE_ONE_MS_LONGER])
        add(("K4",), longer)
        if p["suppress"]:
            unsuppressed = case.with_params(suppress=False)
            add(("K5",), undo_early_suppression(case, kafka, reference.run(unsuppressed)))
            add(("K4", "K5"), undo_early_suppression(
                case, longer, reference.run(unsuppressed, [SESSION_STORE_ONE_MS_LONGER])))
    elif case.family == "windowed" and p["window"] == "sliding":
        longer = reference.run(case, [SLIDING_STORE_TWO_MS_LONGER])
        if p["suppress"]:
            unsuppressed = case.with_params(suppress=False)
            add(("K3",), undo_early_suppression(case, kafka, reference.run(unsuppressed)))
        add(("K6",), longer)
        if p["suppress"]:
            add(("K3", "K6"), undo_early_suppression(
                case, longer, reference.run(unsuppressed, [SLIDING_STORE_TWO_MS_LONGER])))
    elif case.family == "table_suppress" and p["source"] == "topic":
        add(("K7",), reference.run(case, [ABSENT_TOMBSTONES_DROPPED]))
    return variants


def judge(case: Case, kafka: List[Output], streamkit: List[Output], reference: KafkaStreamsReference) -> Verdict:
    """The verdict on streamkit's output for ``case`` given Kafka Streams' (``reference`` runs the
    counterfactuals)."""
    if kafka == streamkit:
        return Verdict("exact")
    noise = equal_with_noise(case, kafka, streamkit)
    if noise is not None:
        return Verdict("accepted", noise)
    variants = undone_variants(case, kafka, reference)
    for codes, undone in variants:
        noise = equal_with_noise(case, undone, streamkit)
        if noise is not None:
            return Verdict("accepted", codes + noise, kafka_undone=undone)
    note = difference(case, kafka, streamkit)
    if variants:
        note += "; still different with " + " or ".join("+".join(codes) for codes, _o in variants) + " undone"
    return Verdict("fail", note=note)
